package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// Replay calls fn for every durable record with an LSN >= from, in LSN order,
// reading them from disk. It stops at DurableLSN as of the call, so it is
// safe while appends continue; records appended meanwhile are not visited.
// from 0 means 1. Replay returns ErrCompacted if from is below FirstLSN, a
// *CorruptionError if a record fails its checks, and fn's error unwrapped if
// fn fails (which stops the replay).
//
// The Entry.Payload passed to fn is only valid until fn returns: Replay
// reuses its memory for the next record. Copy it to keep it.
//
// Replay finds the segment holding from by binary search over the segments'
// first LSNs, then scans that segment from its start; records before from
// are skipped without checking their checksums (Open checked them).
func (l *Log) Replay(from uint64, fn func(lsn uint64, e Entry) error) error {
	from = max(from, 1)
	l.mu.Lock()
	segs := l.segments[:len(l.segments):len(l.segments)]
	limit := l.durable.Load()
	l.mu.Unlock()

	if from < segs[0].first {
		return fmt.Errorf("%w: replay from lsn %d, but the log starts at lsn %d", ErrCompacted, from, segs[0].first)
	}
	if from > limit {
		return nil
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > from }) - 1
	r := replayer{maxRecordBytes: l.opts.MaxRecordBytes, br: bufio.NewReaderSize(nil, 64<<10)}
	next := segs[i].first
	for ; i < len(segs) && next <= limit; i++ {
		seg := segs[i]
		if seg.first != next {
			return &CorruptionError{Segment: seg.path, LSN: next, Reason: fmt.Sprintf("segment starts at lsn %d, expected %d", seg.first, next)}
		}
		var err error
		if next, err = r.segment(l, seg, from, limit, fn); err != nil {
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
	maxRecordBytes int
	br             *bufio.Reader
	payload        []byte
	off            int64 // offset in the current segment
}

// segment replays the records of seg up to limit and returns the LSN after
// the last one it read.
func (r *replayer) segment(l *Log, seg segmentInfo, from, limit uint64, fn func(uint64, Entry) error) (uint64, error) {
	f, err := l.opts.FS.OpenFile(seg.path, os.O_RDONLY, 0)
	if err != nil {
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
