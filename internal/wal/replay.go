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
	r, err := l.NewReader(from)
	if err != nil {
		return err
	}
	defer r.Close()
	// The limit first: a rotation adds its segment to the list before
	// anything in it is durable, so a copy of the list made after it holds
	// every record up to it.
	limit := l.gc.DurableLSN()
	for r.Next() <= limit {
		if _, err := r.read(limit, -1, fn); err != nil {
			return err
		}
	}
	return nil
}

// Reader reads a log's durable records in LSN order from a position on,
// and keeps its place: each Read continues where the last one stopped,
// from the segment file it has open, without scanning again (a stream of
// events that follows the log, docs/design/events.md). A Reader is not
// safe for concurrent use; the Log may be appended to, compacted and
// closed meanwhile.
type Reader struct {
	l *Log
	r replayer
}

// NewReader returns a Reader whose first record is from (0 means 1). It
// returns ErrCompacted if from is below FirstLSN. from may be past the last
// record: the Reader then waits for it (Read returns 0).
func (l *Log) NewReader(from uint64) (*Reader, error) {
	from = max(from, 1)
	if first := l.FirstLSN(); from < first {
		return nil, fmt.Errorf("%w: read from lsn %d, but the log starts at lsn %d", ErrCompacted, from, first)
	}
	r := &Reader{l: l}
	r.r = replayer{fs: l.opts.FS, maxRecordBytes: l.opts.MaxRecordBytes, next: from, gone: r.gone}
	return r, nil
}

// Next is the LSN of the next record Read returns.
func (r *Reader) Next() uint64 { return r.r.next }

// Read calls fn for the durable records from Next on, at most max of them
// (max ≤ 0: every one durable now), and returns how many it read: 0 when
// none is durable yet. The Entry.Payload passed to fn is only valid until fn
// returns. Read returns fn's error unwrapped (the record fn failed on is
// read again by the next Read), ErrCompacted if the segment it needs next
// was deleted, a *CorruptionError for a record that fails its checks, and
// the log's error once it failed or closed with nothing more durable to
// read (ErrClosed).
func (r *Reader) Read(max int, fn func(lsn uint64, e Entry) error) (int, error) {
	limit := r.l.gc.DurableLSN()
	if r.r.next > limit {
		if err := r.l.gc.Err(); err != nil {
			return 0, err
		}
		return 0, r.l.gc.Closed()
	}
	if max <= 0 {
		max = -1
	}
	return r.read(limit, max, fn)
}

func (r *Reader) read(limit uint64, max int, fn func(lsn uint64, e Entry) error) (int, error) {
	return r.r.read(limit, max, r.segments, fn)
}

// segments is a copy of the log's segments (DeleteBefore replaces the list,
// rotations append to it).
func (r *Reader) segments() []segmentInfo {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return slices.Clone(r.l.segments)
}

// gone explains a segment file that no longer exists: compaction overtook
// the reader, not damage.
func (r *Reader) gone(seg segmentInfo) error {
	if first := r.l.FirstLSN(); first > seg.first {
		return fmt.Errorf("%w: segment %s was deleted before it was read (the log now starts at lsn %d)", ErrCompacted, seg.path, first)
	}
	return nil
}

// Close releases the segment file the Reader has open.
func (r *Reader) Close() error { return r.r.close() }

// replay replays the records of segs from from to limit; segs[0].first <=
// from.
func (r *replayer) replay(segs []segmentInfo, from, limit uint64, fn func(lsn uint64, e Entry) error) error {
	defer r.close()
	r.next = from
	_, err := r.read(limit, -1, func() []segmentInfo { return segs }, fn)
	return err
}

// replayer reads frames in LSN order from r.next on, keeping the segment
// it reads open between calls.
type replayer struct {
	fs             fsys.FS
	maxRecordBytes int
	// gone, if set, explains a segment file that no longer exists.
	gone    func(segmentInfo) error
	br      *bufio.Reader
	payload []byte

	next uint64 // the LSN of the next record to read
	// held: fn failed on record next, which is in payload (heldLen bytes,
	// of type heldType), already read from f.
	held     bool
	heldType uint16
	heldLen  int
	f        fsys.File   // the segment being read; nil before the first
	seg      segmentInfo // its info
	segLSN   uint64      // the LSN of the frame at off in f
	off      int64       // offset in f
}

// read calls fn for the records from r.next up to limit, at most max of
// them (max < 0: no bound), and returns how many it read. segs lists the
// log's segments, asked for only when read needs another one.
func (r *replayer) read(limit uint64, max int, segs func() []segmentInfo, fn func(uint64, Entry) error) (int, error) {
	n := 0
	var fh [frameHeaderSize]byte
	if r.held && r.next <= limit && max != 0 {
		// The record fn failed on last time, read already.
		if err := fn(r.next, Entry{Type: r.heldType, Payload: r.payload[:r.heldLen]}); err != nil {
			return n, err
		}
		r.held = false
		r.next++
		n++
	}
	for r.next <= limit && (max < 0 || n < max) {
		if r.f == nil || r.segLSN != r.next {
			r.held = false
			if err := r.seek(segs()); err != nil {
				return n, err
			}
		}
		if _, err := io.ReadFull(r.br, fh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				// The end of this segment: the next one continues.
				if err := r.following(segs()); err != nil {
					return n, err
				}
				continue
			}
			return n, r.readErr(r.next, "frame header", err)
		}
		h := decodeFrameHeader(fh[:])
		if int64(h.length) > int64(r.maxRecordBytes) {
			return n, r.corrupt(r.next, fmt.Sprintf("frame claims a %d-byte payload, over MaxRecordBytes = %d", h.length, r.maxRecordBytes))
		}
		if h.lsn != r.next {
			return n, r.corrupt(r.next, fmt.Sprintf("frame has lsn %d", h.lsn))
		}
		if cap(r.payload) < int(h.length) {
			r.payload = make([]byte, h.length)
		}
		payload := r.payload[:h.length]
		if _, err := io.ReadFull(r.br, payload); err != nil {
			return n, r.readErr(r.next, "frame payload", err)
		}
		if p := checkFrame(h, fh[:], payload); p != frameOK {
			return n, r.corrupt(r.next, p.String())
		}
		r.off += h.frameBytes()
		r.segLSN = r.next + 1
		if err := fn(r.next, Entry{Type: h.typ, Payload: payload}); err != nil {
			// The next read hands it to fn again, first.
			r.held, r.heldType, r.heldLen = true, h.typ, int(h.length)
			return n, err
		}
		r.next++
		n++
	}
	return n, nil
}

// seek opens the segment of segs that holds r.next and skips the frames
// before it, without checking their checksums (Open checked them).
func (r *replayer) seek(segs []segmentInfo) error {
	r.close()
	if len(segs) == 0 || r.next < segs[0].first {
		first := uint64(0)
		if len(segs) > 0 {
			first = segs[0].first
		}
		return fmt.Errorf("%w: read from lsn %d, but the log starts at lsn %d", ErrCompacted, r.next, first)
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first > r.next }) - 1
	if err := r.open(segs[i]); err != nil {
		return err
	}
	var fh [frameHeaderSize]byte
	for r.segLSN < r.next {
		if _, err := io.ReadFull(r.br, fh[:]); err != nil {
			if errors.Is(err, io.EOF) {
				// r.next is the first record of a segment not listed yet.
				return r.following(segs)
			}
			return r.readErr(r.segLSN, "frame header", err)
		}
		h := decodeFrameHeader(fh[:])
		if int64(h.length) > int64(r.maxRecordBytes) {
			return r.corrupt(r.segLSN, fmt.Sprintf("frame claims a %d-byte payload, over MaxRecordBytes = %d", h.length, r.maxRecordBytes))
		}
		if h.lsn != r.segLSN {
			return r.corrupt(r.segLSN, fmt.Sprintf("frame has lsn %d", h.lsn))
		}
		if _, err := r.br.Discard(int(h.length)); err != nil {
			return r.readErr(r.segLSN, "frame payload", err)
		}
		r.off += h.frameBytes()
		r.segLSN++
	}
	return nil
}

// following opens the segment after the one read to its end: the one of
// segs that starts at r.next.
func (r *replayer) following(segs []segmentInfo) error {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].first >= r.next })
	if i == len(segs) || segs[i].first != r.next {
		seg := r.seg
		if r.gone != nil {
			// Compaction deleted the segment that held r.next.
			if err := r.gone(segmentInfo{first: r.next, path: fmt.Sprintf("of lsn %d", r.next)}); err != nil {
				return err
			}
		}
		if i < len(segs) {
			return &CorruptionError{Segment: segs[i].path, LSN: r.next,
				Reason: fmt.Sprintf("segment starts at lsn %d, expected %d", segs[i].first, r.next)}
		}
		return &CorruptionError{Segment: seg.path, LSN: r.next, Offset: r.off, Reason: "log ends before a durable lsn"}
	}
	return r.open(segs[i])
}

// open opens seg and reads its header.
func (r *replayer) open(seg segmentInfo) error {
	r.close()
	f, err := r.fs.OpenFile(seg.path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && r.gone != nil {
			if gerr := r.gone(seg); gerr != nil {
				return gerr
			}
		}
		return fmt.Errorf("wal: replay: open segment %s: %w", seg.path, err)
	}
	if r.br == nil {
		r.br = bufio.NewReaderSize(f, 64<<10)
	} else {
		r.br.Reset(f)
	}
	r.f, r.seg, r.segLSN, r.off = f, seg, seg.first, 0
	var hdr [segmentHeaderSize]byte
	if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
		return r.readErr(seg.first, "segment header", err)
	}
	first, reason := decodeSegmentHeader(hdr[:])
	if reason == "" && first != seg.first {
		reason = fmt.Sprintf("header says the segment starts at lsn %d", first)
	}
	if reason != "" {
		return r.corrupt(seg.first, reason)
	}
	r.off = segmentHeaderSize
	return nil
}

func (r *replayer) close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

func (r *replayer) corrupt(lsn uint64, reason string) error {
	return &CorruptionError{Segment: r.seg.path, Offset: r.off, LSN: lsn, Reason: reason}
}

func (r *replayer) readErr(lsn uint64, what string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return r.corrupt(lsn, what+" cut short")
	}
	return fmt.Errorf("wal: replay: read segment %s at offset %d: %w", r.seg.path, r.off, err)
}
