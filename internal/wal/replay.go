package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"

	"github.com/tenurehq/tenure/internal/fsys"
)

// Replay calls fn for every durable record with an LSN >= from, in LSN order,
// reading them from disk. It stops at DurableLSN as of the call, so it is
// safe while appends continue; records appended meanwhile are not visited.
// from 0 means 1. Replay returns ErrCompacted if from is below FirstLSN (or
// if DeleteBefore removes a segment before the replay reaches it, possibly
// after fn saw some records), a *CorruptionError if a record fails its
// checks, and fn's error unwrapped if fn fails (which stops the replay).
//
// The Entry.Payload passed to fn is only valid until fn returns: Replay
// reuses its memory for the next record. Copy it to keep it.
//
// Replay finds the segment holding from by binary search over the segments'
// first LSNs, then scans that segment from its start; records before from
// are skipped without checking their checksums (Open checked them).
func (l *Log) Replay(from uint64, fn func(lsn uint64, e Entry) error) error {
	from = max(from, 1)
	// The limit first: a rotation adds its segment to the list before
	// anything in it is durable, so the copy holds every record up to it.
	// A copy: DeleteBefore replaces the list, rotations append to it.
	limit := l.gc.DurableLSN()
	l.mu.Lock()
	segs := slices.Clone(l.segments)
	l.mu.Unlock()

	if from < segs[0].first {
		return fmt.Errorf("%w: replay from lsn %d, but the log starts at lsn %d", ErrCompacted, from, segs[0].first)
	}
	// A segment in the copy may be deleted before it is opened; that is
	// compaction overtaking the replay, not damage.
	gone := func(seg segmentInfo) error {
		if first := l.FirstLSN(); first > seg.first {
			return fmt.Errorf("%w: segment %s was deleted during the replay (the log now starts at lsn %d)", ErrCompacted, seg.path, first)
		}
		return nil
	}
	r := replayer{fs: l.opts.FS, maxRecordBytes: l.opts.MaxRecordBytes, gone: gone}
	return r.replay(segs, from, limit, fn)
}

// replay replays the records of segs from from to limit; segs[0].first <=
// from.
func (r *replayer) replay(segs []segmentInfo, from, limit uint64, fn func(lsn uint64, e Entry) error) error {
	if from > limit {
		return nil
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > from }) - 1
	r.br = bufio.NewReaderSize(nil, 64<<10)
	next := segs[i].first
	for ; i < len(segs) && next <= limit; i++ {
		seg := segs[i]
		if seg.first != next {
			return &CorruptionError{Segment: seg.path, LSN: next, Reason: fmt.Sprintf("segment starts at lsn %d, expected %d", seg.first, next)}
		}
		var err error
		if next, err = r.segment(seg, from, limit, fn); err != nil {
			return err
		}
	}
	if next <= limit {
		seg := segs[len(segs)-1]
		return &CorruptionError{Segment: seg.path, LSN: next, Offset: r.off,
			Reason: fmt.Sprintf("log ends before durable lsn %d", limit)}
	}
	return nil
}

type replayer struct {
	fs             fsys.FS
	maxRecordBytes int
	// gone, if set, explains a segment file that no longer exists.
	gone    func(segmentInfo) error
	br      *bufio.Reader
	payload []byte
	off     int64 // offset in the current segment
}

// segment replays the records of seg up to limit and returns the LSN after
// the last one it read.
func (r *replayer) segment(seg segmentInfo, from, limit uint64, fn func(uint64, Entry) error) (uint64, error) {
	f, err := r.fs.OpenFile(seg.path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && r.gone != nil {
			if gerr := r.gone(seg); gerr != nil {
				return 0, gerr
			}
		}
		return 0, fmt.Errorf("wal: replay: open segment %s: %w", seg.path, err)
	}
	defer f.Close()
	r.br.Reset(f)
	r.off = 0
	corrupt := func(lsn uint64, reason string) (uint64, error) {
		return 0, &CorruptionError{Segment: seg.path, Offset: r.off, LSN: lsn, Reason: reason}
	}
	readErr := func(lsn uint64, what string, err error) (uint64, error) {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return corrupt(lsn, what+" cut short")
		}
		return 0, fmt.Errorf("wal: replay: read segment %s at offset %d: %w", seg.path, r.off, err)
	}

	var hdr [segmentHeaderSize]byte
	if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
		return readErr(seg.first, "segment header", err)
	}
	first, reason := decodeSegmentHeader(hdr[:])
	if reason == "" && first != seg.first {
		reason = fmt.Sprintf("header says the segment starts at lsn %d", first)
	}
	if reason != "" {
		return corrupt(seg.first, reason)
	}
	r.off = segmentHeaderSize

	var fh [frameHeaderSize]byte
	lsn := seg.first
	for lsn <= limit {
		if _, err := io.ReadFull(r.br, fh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return lsn, nil // end of this segment; the next one continues
			}
			return readErr(lsn, "frame header", err)
		}
		h := decodeFrameHeader(fh[:])
		if int64(h.length) > int64(r.maxRecordBytes) {
			return corrupt(lsn, fmt.Sprintf("frame claims a %d-byte payload, over MaxRecordBytes = %d", h.length, r.maxRecordBytes))
		}
		if h.lsn != lsn {
			return corrupt(lsn, fmt.Sprintf("frame has lsn %d", h.lsn))
		}
		if lsn < from {
			if _, err := r.br.Discard(int(h.length)); err != nil {
				return readErr(lsn, "frame payload", err)
			}
		} else {
			if cap(r.payload) < int(h.length) {
				r.payload = make([]byte, h.length)
			}
			payload := r.payload[:h.length]
			if _, err := io.ReadFull(r.br, payload); err != nil {
				return readErr(lsn, "frame payload", err)
			}
			if p := checkFrame(h, fh[:], payload); p != frameOK {
				return corrupt(lsn, p.String())
			}
			if err := fn(lsn, Entry{Type: h.typ, Payload: payload}); err != nil {
				return 0, err
			}
		}
		r.off += h.frameBytes()
		lsn++
	}
	return lsn, nil
}
