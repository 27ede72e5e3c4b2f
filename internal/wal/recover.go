package wal

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/internal/fsys"
)

// segmentInfo is one segment file of the log.
type segmentInfo struct {
	first uint64 // LSN of its first record, from its name and header
	path  string
	bytes int64 // file size once sealed; the active segment's is Log.activeBytes
}

// recovered is the state of the log directory after Open's scan.
type recovered struct {
	segments []segmentInfo
	lastLSN  uint64 // last valid record, or segments[0].first-1 if there is none
	active   fsys.File
	size     int64 // size of the active (last) segment
	// tail is the tail file's mark, written now if there was none.
	tail tailMark
	// missing is what the log lacks of what the tail file says it held.
	missing *Missing
}

// listSegments sorts the entries names of the log directory dir: the
// segments, in LSN order, and the leftovers of segment creations and tail
// file writes that crashed before their rename (a segment's name, or the
// tail file's, with tmpExt after it).
// Other files are not the log's and are left out; a file that ends in
// segmentExt without a segment's name is corruption (renamed by hand?).
func listSegments(dir string, names []string) (segs []segmentInfo, leftovers []string, err error) {
	for _, name := range names {
		path := filepath.Join(dir, name)
		if base, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(base); ok || base == tailFile {
				leftovers = append(leftovers, path)
				continue
			}
		}
		first, ok := parseSegmentName(name)
		if !ok {
			if strings.HasSuffix(name, segmentExt) {
				return nil, nil, &CorruptionError{Segment: path, Reason: "file name is not <16 hex digits of its first lsn>.wal (renamed by hand?)"}
			}
			continue // not ours; leave it alone
		}
		segs = append(segs, segmentInfo{first: first, path: path})
	}
	slices.SortFunc(segs, func(a, b segmentInfo) int { return cmp.Compare(a.first, b.first) })
	return segs, leftovers, nil
}

// recoverDir scans the segments in opts.Dir, repairs a torn tail of the last
// segment (the only modification it ever makes, besides removing leftovers of
// an interrupted segment creation or tail file write) and opens the last
// segment for appending. It creates the directory and a first segment if
// there are none, and the tail file if there is none. Bytes that are not a
// valid record where the tail file says records were are not a torn write:
// they are left as they are, and reported as missing records.
func recoverDir(opts Options) (*recovered, error) {
	fsy, dir, logger := opts.FS, opts.Dir, opts.Logger
	names, err := fsy.ReadDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Every new directory's entry must be durable, not only the last:
		// MkdirAll may have created several levels.
		if err := fsys.MkdirAllSync(fsy, dir); err != nil {
			return nil, fmt.Errorf("wal: create directory %s: %w", dir, err)
		}
		names, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wal: read directory %s: %w", dir, err)
	}

	segs, leftovers, err := listSegments(dir, names)
	if err != nil {
		return nil, err
	}
	mark, err := readTail(fsy, dir)
	if err != nil {
		return nil, err
	}
	for _, path := range leftovers {
		// A segment creation or tail file write that crashed before its
		// rename; it never held records.
		if err := fsy.Remove(path); err != nil {
			return nil, fmt.Errorf("wal: remove leftover %s: %w", path, err)
		}
		logger.Warn("wal: removed leftover of an interrupted segment creation or tail file write", slog.String("file", path))
	}
	found := len(segs) > 0

	sc := scanner{fs: fsy, maxRecordBytes: opts.MaxRecordBytes}
	next := uint64(1) // LSN the next record must have
	var lastRes scanResult
	for i, seg := range segs {
		last := i == len(segs)-1
		if i > 0 && seg.first != next {
			return nil, gapError(seg, next)
		}
		res, err := sc.scan(seg, last)
		if err != nil {
			return nil, err
		}
		segs[i].bytes = res.size
		if res.shortHeader {
			// Only possible for the last segment (scan reports corruption
			// otherwise). It never held a record.
			if err := fsy.Remove(seg.path); err != nil {
				return nil, fmt.Errorf("wal: remove segment %s with a torn header: %w", seg.path, err)
			}
			if err := fsy.SyncDir(dir); err != nil {
				return nil, fmt.Errorf("wal: fsync directory %s: %w", dir, err)
			}
			logger.Warn("wal: removed last segment with a torn header",
				slog.String("segment", seg.path), slog.Int64("bytes", res.size))
			if i == 0 {
				next = seg.first
			}
			segs = segs[:i]
			break
		}
		next = res.lastLSN + 1
		lastRes = res
	}
	var torn *scanResult
	if len(segs) > 0 && lastRes.tornAt >= 0 {
		torn = &lastRes
	}
	missing := missingFrom(dir, mark, segs, next-1, torn, lastPath(segs))
	if missing != nil {
		lastRes.tornAt = -1 // not a torn write: AcceptMissing cuts it
	}

	var rec *recovered
	if len(segs) > 0 {
		if rec, err = openTail(opts, segs, lastRes); err != nil {
			return nil, err
		}
	} else {
		// No segment left: start a fresh one where the log would continue.
		f, path, err := createSegment(fsy, dir, next)
		if err != nil {
			return nil, err
		}
		rec = &recovered{
			segments: []segmentInfo{{first: next, path: path}},
			lastLSN:  next - 1,
			active:   f,
			size:     segmentHeaderSize,
		}
	}
	rec.missing = missing
	if mark != nil {
		rec.tail = *mark
		return rec, nil
	}
	// A fresh log, or one written before the tail file existed: from now on
	// its end is recorded.
	rec.tail = tailMark{segment: rec.segments[len(rec.segments)-1].first, last: rec.lastLSN}
	if err := writeTail(fsy, dir, rec.tail); err != nil {
		rec.active.Close()
		return nil, err
	}
	if found {
		logger.Info("wal: wrote the tail file, which records how far the log reaches (first start of a log written before it existed)",
			slog.String("file", filepath.Join(dir, tailFile)), slog.Uint64("last_lsn", rec.lastLSN))
	}
	return rec, nil
}

func lastPath(segs []segmentInfo) string {
	if len(segs) == 0 {
		return ""
	}
	return segs[len(segs)-1].path
}

// openTail opens the last segment for appending, truncating the torn tail
// its scan found, if any.
func openTail(opts Options, segs []segmentInfo, res scanResult) (*recovered, error) {
	seg := segs[len(segs)-1]
	f, err := opts.FS.OpenFile(seg.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment %s: %w", seg.path, err)
	}
	if res.tornAt >= 0 {
		if err := f.Truncate(res.tornAt); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: truncate torn tail of segment %s at offset %d: %w", seg.path, res.tornAt, err)
		}
		opts.Logger.Warn("wal: truncated torn write at the tail of the log",
			slog.String("segment", seg.path), slog.Int64("offset", res.tornAt),
			slog.Int64("dropped_bytes", res.size-res.tornAt), slog.String("reason", res.tornReason.String()),
			slog.Uint64("last_lsn", res.lastLSN))
	}
	// Always fsync the tail once: a previous process may have written it
	// without fsyncing (SyncNone, or a crash between write and fsync), and
	// its records are about to be reported durable and replayed.
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: fsync segment %s: %w", seg.path, err)
	}
	return &recovered{segments: segs, lastLSN: res.lastLSN, active: f, size: res.end}, nil
}

// createSegment creates the segment starting at first: under a temporary
// name, header written and fsynced, then renamed into place and the directory
// fsynced, so a segment file never exists without a valid header. It returns
// the file open for appending, positioned after the header.
func createSegment(fsy fsys.FS, dir string, first uint64) (fsys.File, string, error) {
	path := filepath.Join(dir, segmentName(first))
	tmp := path + tmpExt
	f, err := fsy.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, "", ioError("create segment", tmp, err)
	}
	var hdr [segmentHeaderSize]byte
	encodeSegmentHeader(hdr[:], first)
	renamed := false
	if _, err = f.Write(hdr[:]); err == nil {
		if err = f.Sync(); err == nil {
			if err = fsy.Rename(tmp, path); err == nil {
				renamed = true
				err = fsy.SyncDir(dir)
			}
		}
	}
	if err != nil {
		f.Close()
		if !renamed {
			fsy.Remove(tmp) // best effort; Open removes leftovers too
		}
		return nil, "", ioError("create segment", path, err)
	}
	return f, path, nil
}

// ioError wraps a failed file operation, pointing at disk space when that is
// the cause.
func ioError(op, path string, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("wal: %s %s: out of disk space (free space on its device): %w", op, path, err)
	}
	return fmt.Errorf("wal: %s %s: %w", op, path, err)
}

// scanResult describes one scanned segment.
type scanResult struct {
	lastLSN     uint64 // last valid record, first-1 if none
	end         int64  // offset just past the last valid frame
	size        int64  // file size
	tornAt      int64  // offset of a torn tail to truncate, -1 if none
	tornReason  frameProblem
	shortHeader bool // last segment shorter than its header
}

// scanner validates segments. It keeps its buffers across segments.
type scanner struct {
	fs             fsys.FS
	maxRecordBytes int
	// check, if set, is called for every valid frame (Verify decodes the
	// payload with it); its error makes the frame corrupt.
	check   func(lsn uint64, e Entry) error
	br      *bufio.Reader
	payload []byte
	chunk   []byte
}

// scan validates every frame of seg. For the last segment it reports a torn
// tail in the result instead of an error; see doc.go for the rule.
func (s *scanner) scan(seg segmentInfo, last bool) (scanResult, error) {
	res := scanResult{tornAt: -1, lastLSN: seg.first - 1}
	f, err := s.fs.OpenFile(seg.path, os.O_RDONLY, 0)
	if err != nil {
		return res, fmt.Errorf("wal: open segment %s: %w", seg.path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return res, fmt.Errorf("wal: stat segment %s: %w", seg.path, err)
	}
	size := fi.Size()
	res.size = size
	corrupt := func(off int64, lsn uint64, reason string) (scanResult, error) {
		return res, &CorruptionError{Segment: seg.path, Offset: off, LSN: lsn, Reason: reason}
	}

	if size < segmentHeaderSize {
		if last {
			res.shortHeader = true
			return res, nil
		}
		return corrupt(0, seg.first, fmt.Sprintf("segment is %d bytes, shorter than its %d-byte header", size, segmentHeaderSize))
	}
	var hdr [segmentHeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return res, fmt.Errorf("wal: read segment %s: %w", seg.path, err)
	}
	first, reason := decodeSegmentHeader(hdr[:])
	if reason != "" {
		return corrupt(0, seg.first, reason)
	}
	if first != seg.first {
		return corrupt(0, seg.first, fmt.Sprintf("header says the segment starts at lsn %d but its name says %d (renamed by hand?)", first, seg.first))
	}

	if s.br == nil {
		s.br = bufio.NewReaderSize(nil, 64<<10)
	}
	s.br.Reset(io.NewSectionReader(f, segmentHeaderSize, size-segmentHeaderSize))
	off := int64(segmentHeaderSize)
	lsn := seg.first
	var fh [frameHeaderSize]byte
	for off < size {
		h, p, err := s.readFrame(f, fh[:], off, size)
		if err != nil {
			return res, fmt.Errorf("wal: read segment %s at offset %d: %w", seg.path, off, err)
		}
		if p == frameOK && h.lsn != lsn {
			return corrupt(off, lsn, fmt.Sprintf("frame has lsn %d: records are missing or repeated", h.lsn))
		}
		if p == frameOK {
			if s.check != nil {
				if err := s.check(lsn, Entry{Type: h.typ, Payload: s.payload[:h.length]}); err != nil {
					return corrupt(off, lsn, fmt.Sprintf("record does not decode: %v", err))
				}
			}
			lsn++
			off += h.frameBytes()
			continue
		}

		reason := p.String()
		hard := !p.torn()
		if p == frameTooLarge {
			reason = fmt.Sprintf("frame claims a %d-byte payload, over MaxRecordBytes = %d", h.length, s.maxRecordBytes)
			if off+h.frameBytes() <= size {
				crc, err := s.crcAt(f, fh[:], off+frameHeaderSize, int64(h.length))
				if err != nil {
					return res, fmt.Errorf("wal: read segment %s at offset %d: %w", seg.path, off, err)
				}
				if crc == h.crc {
					// A complete, intact record: written with a larger limit.
					// Dropping it as torn would lose acknowledged data.
					hard = true
					reason += " and its checksum is valid (was MaxRecordBytes lowered? raise it back)"
				}
			}
		}
		if hard {
			return corrupt(off, lsn, reason)
		}
		if !last {
			return corrupt(off, lsn, reason+" in a segment that is not the last one")
		}
		q, qlsn, found, err := s.findFrameAfter(f, off, size, lsn)
		if err != nil {
			return res, fmt.Errorf("wal: read segment %s: %w", seg.path, err)
		}
		if found {
			return corrupt(off, lsn, fmt.Sprintf("%s, but a valid frame (lsn %d) follows at offset %d", reason, qlsn, q))
		}
		res.tornAt, res.tornReason = off, p
		break
	}
	res.lastLSN = lsn - 1
	res.end = off
	return res, nil
}

// readFrame reads the frame at off from s.br (positioned at off) into fh and
// s.payload and checks it, except for its LSN. It allocates at most
// MaxRecordBytes, whatever the header claims. A frame that is not valid may
// leave s.br anywhere; the caller stops reading it then.
func (s *scanner) readFrame(f fsys.File, fh []byte, off, size int64) (frameHeader, frameProblem, error) {
	if size-off < frameHeaderSize {
		return frameHeader{}, frameShortHeader, nil
	}
	if _, err := io.ReadFull(s.br, fh); err != nil {
		return frameHeader{}, 0, err
	}
	h := decodeFrameHeader(fh)
	if int64(h.length) > int64(s.maxRecordBytes) {
		return h, frameTooLarge, nil
	}
	if off+h.frameBytes() > size {
		return h, frameShortPayload, nil
	}
	if cap(s.payload) < int(h.length) {
		s.payload = make([]byte, h.length)
	}
	payload := s.payload[:h.length]
	if _, err := io.ReadFull(s.br, payload); err != nil {
		return h, 0, err
	}
	return h, checkFrame(h, fh, payload), nil
}

// crcAt computes the checksum of a frame with header bytes fh whose payload
// of n bytes is at off in f, streaming it in small chunks.
func (s *scanner) crcAt(f io.ReaderAt, fh []byte, off, n int64) (uint32, error) {
	if s.chunk == nil {
		s.chunk = make([]byte, 32<<10)
	}
	crc := frameCRC(fh, nil)
	for n > 0 {
		b := s.chunk[:min(n, int64(len(s.chunk)))]
		if _, err := f.ReadAt(b, off); err != nil {
			return 0, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		off += int64(len(b))
		n -= int64(len(b))
	}
	return crc, nil
}

// findFrameAfter looks at every byte offset after bad for the start of a
// valid frame that could follow a record with LSN want at bad: it must pass
// every frame check, fit in the file, and carry an LSN between want and
// want+(its offset-bad)/frameHeaderSize (the records in between each take at
// least a header). Finding one means the bad frame is not a torn tail.
func (s *scanner) findFrameAfter(f io.ReaderAt, bad, size int64, want uint64) (int64, uint64, bool, error) {
	const window = 256 << 10
	buf := make([]byte, window+frameHeaderSize-1)
	for base := bad + 1; base+frameHeaderSize <= size; base += window {
		n := min(int64(len(buf)), size-base)
		b := buf[:n]
		if _, err := f.ReadAt(b, base); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, false, err
		}
		for i := 0; i < window && i+frameHeaderSize <= len(b); i++ {
			fh := b[i : i+frameHeaderSize]
			// Cheap filters first: almost every offset fails one of them.
			if fh[10]|fh[11] != 0 || (fh[8]|fh[9]) == 0 {
				continue
			}
			h := decodeFrameHeader(fh)
			pos := base + int64(i)
			if int64(h.length) > int64(s.maxRecordBytes) || pos+h.frameBytes() > size {
				continue
			}
			if h.lsn < want || h.lsn-want > uint64(pos-bad)/frameHeaderSize {
				continue
			}
			crc, err := s.crcAt(f, fh, pos+frameHeaderSize, int64(h.length))
			if err != nil {
				return 0, 0, false, err
			}
			if crc == h.crc {
				return pos, h.lsn, true, nil
			}
		}
	}
	return 0, 0, false, nil
}
