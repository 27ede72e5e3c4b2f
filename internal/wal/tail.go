package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tenurehq/tenure/internal/fsys"
)

// The tail file records how far the log was known to reach, so that Open
// can tell a log that lost its end from one that never had more (doc.go,
// "The tail file").
const (
	tailFile    = "TAIL"
	tailMagic   = "TENUTAIL"
	tailVersion = 1
	tailSize    = 32 // magic 8 | version 4 | crc 4 | segment 8 | last lsn 8
)

// tailMark is the content of the tail file.
type tailMark struct {
	segment uint64 // first LSN of the newest segment when it was written
	last    uint64 // every record up to this LSN was durable then
}

func encodeTail(m tailMark) []byte {
	b := make([]byte, tailSize)
	copy(b[0:8], tailMagic)
	binary.LittleEndian.PutUint32(b[8:12], tailVersion)
	binary.LittleEndian.PutUint64(b[16:24], m.segment)
	binary.LittleEndian.PutUint64(b[24:32], m.last)
	binary.LittleEndian.PutUint32(b[12:16], tailCRC(b))
	return b
}

func tailCRC(b []byte) uint32 {
	crc := crc32.Update(0, castagnoli, b[0:12])
	return crc32.Update(crc, castagnoli, b[16:tailSize])
}

// decodeTail returns the mark in b, or why b is not a valid tail file.
func decodeTail(b []byte) (tailMark, string) {
	if len(b) != tailSize {
		return tailMark{}, fmt.Sprintf("%d bytes, not %d", len(b), tailSize)
	}
	if string(b[0:8]) != tailMagic {
		return tailMark{}, fmt.Sprintf("bad magic %q", b[0:8])
	}
	if binary.LittleEndian.Uint32(b[12:16]) != tailCRC(b) {
		return tailMark{}, "checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != tailVersion {
		return tailMark{}, fmt.Sprintf("unsupported version %d (this build reads version %d)", v, tailVersion)
	}
	m := tailMark{segment: binary.LittleEndian.Uint64(b[16:24]), last: binary.LittleEndian.Uint64(b[24:32])}
	if m.segment == 0 || m.last+1 < m.segment {
		return tailMark{}, fmt.Sprintf("impossible content: newest segment at lsn %d, last lsn %d", m.segment, m.last)
	}
	return m, ""
}

// ErrTailDamaged is returned by Open and Verify when the tail file does not
// decode (a *TailError matches it).
var ErrTailDamaged = errors.New("wal: tail file damaged")

// TailError reports a tail file that does not decode. It is written
// atomically (a temporary file, fsynced, renamed), so only damage to the
// disk or a hand edit makes one.
type TailError struct {
	Path   string
	Reason string
}

func (e *TailError) Error() string {
	return fmt.Sprintf("wal: the tail file %s, which records how far the log reached, is damaged (%s); nothing was modified: "+
		"check the segments with `tenure wal verify`, and if they hold every record you expect, delete %s (the next start writes a new one, "+
		"without checking the log's end against the old)", e.Path, e.Reason, e.Path)
}

// Is makes errors.Is(err, ErrTailDamaged) true for a *TailError.
func (e *TailError) Is(target error) bool { return target == ErrTailDamaged }

// readTail reads the tail file of dir: nil without one (a fresh log, or
// one written before the tail file existed).
func readTail(fsy fsys.FS, dir string) (*tailMark, error) {
	path := filepath.Join(dir, tailFile)
	f, err := fsy.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, tailSize+1))
	if err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	m, reason := decodeTail(b)
	if reason != "" {
		return nil, &TailError{Path: path, Reason: reason}
	}
	return &m, nil
}

// writeTail replaces the tail file of dir with m, atomically and durably:
// a temporary file written and fsynced, renamed over the old one, the
// directory fsynced. A crash leaves the old file or the new one.
func writeTail(fsy fsys.FS, dir string, m tailMark) error {
	path := filepath.Join(dir, tailFile)
	tmp := path + tmpExt
	f, err := fsy.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return ioError("create tail file", tmp, err)
	}
	renamed := false
	if _, err = f.Write(encodeTail(m)); err == nil {
		if err = f.Sync(); err == nil {
			if err = f.Close(); err == nil {
				f = nil
				if err = fsy.Rename(tmp, path); err == nil {
					renamed = true
					err = fsy.SyncDir(dir)
				}
			}
		}
	}
	if f != nil {
		f.Close()
	}
	if err != nil {
		if !renamed {
			fsy.Remove(tmp) // best effort; Open removes it too
		}
		return ioError("write tail file", path, err)
	}
	return nil
}

// Missing describes records that the tail file says were durable and that
// the log no longer holds: First is the first record the log lacks, Last
// the last one the tail file names (records after it may be gone too; at
// a clean Close the tail file names the log's last record).
type Missing struct {
	First, Last uint64
	// TailFile is the tail file's path.
	TailFile string
	// What says what the disk shows instead: a segment gone, or the last
	// segment cut short or damaged where the records should be.
	What string
	// truncate is the offset of the last segment to cut at when the loss
	// is accepted (bytes where the records should be that are not valid
	// records), -1 for none.
	truncate int64
}

func (m *Missing) String() string {
	return fmt.Sprintf("the tail file %s says the log held every record up to lsn %d, but %s", m.TailFile, m.Last, m.What)
}

// ErrMissing is returned by Append while the log lacks records the tail
// file says were durable (Log.Missing), until the loss is accepted
// (Log.AcceptMissing).
var ErrMissing = errors.New("wal: the log lacks records it held durably")

// missingFrom returns what the log lacks, given the tail file's mark and
// the scan of the segments: nil if the log reaches the mark. segs are the
// segments on disk, lastLSN the last valid record, and torn, if not nil,
// the scan of the last segment when it ends in bytes that are not a valid
// record.
func missingFrom(dir string, mark *tailMark, segs []segmentInfo, lastLSN uint64, torn *scanResult, tornPath string) *Missing {
	if mark == nil || mark.last <= lastLSN {
		return nil
	}
	m := &Missing{First: lastLSN + 1, Last: mark.last, TailFile: filepath.Join(dir, tailFile), truncate: -1}
	if torn != nil {
		m.truncate = torn.tornAt
	}
	switch {
	case len(segs) == 0:
		m.What = "no segment is left in " + dir
	case segs[len(segs)-1].first < mark.segment:
		m.What = fmt.Sprintf("the segment %s, which it names as the newest, is gone: the log now ends at lsn %d", segmentName(mark.segment), lastLSN)
	case torn != nil:
		m.What = fmt.Sprintf("the last segment %s ends at offset %d in %d bytes that are not a valid record (%s): it was cut short or damaged there",
			tornPath, torn.tornAt, torn.size-torn.tornAt, torn.tornReason)
	default:
		m.What = fmt.Sprintf("the last segment %s ends at lsn %d: it was cut short", segs[len(segs)-1].path, lastLSN)
	}
	return m
}
