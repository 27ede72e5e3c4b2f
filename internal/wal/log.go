package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/groupcommit"
)

// Entry is one record as the log sees it: an opaque type tag and payload.
// Type 0 is reserved. It is the group-commit core's, shared with the
// cluster's log.
type Entry = groupcommit.Entry

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	Records uint64 // records written
	Batches uint64 // data writes (a batch split by a segment rotation or MaxBatchBytes counts per write)
	Fsyncs  uint64 // fsyncs of segment data (not of new segment headers or directories)
	Bytes   uint64 // frame bytes written
}

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	opts Options // with defaults
	// gc is the group-commit core: LSNs, the queue of frames for the
	// writer, the round loop, DurableLSN and its waiters, the sticky error.
	gc *groupcommit.Core
	// pending holds the encoded frames the writer has not taken yet (the
	// core's queue); gc's lock guards it.
	pending []byte

	// mu guards segments (DeleteBefore replaces the list, rotations append
	// to it; readers copy it) and orders AcceptMissing.
	mu       sync.Mutex
	segments []segmentInfo

	// missing is what the log lacks of what the tail file says it held;
	// Append refuses while it is set (AcceptMissing clears it).
	missing atomic.Pointer[Missing]

	// Owned by the writer goroutine while it runs, by Close after it exits.
	round    []byte // the frames of the round being written (Take, Write)
	spare    []byte // the last round's buffer, for the next queue
	seg      fsys.File
	segPath  string
	segFirst uint64 // first LSN of the active segment
	segSize  int64
	dirty    bool // written since the last fsync
	// published is the writer's scratch for the entries it hands
	// Options.Tail.
	published []Entry
	// tail is what the tail file says; tailDue means a new segment holds
	// records the tail file does not name yet.
	tail    tailMark
	tailDue bool

	closeOnce sync.Once
	closeErr  error

	records, batches, fsyncs, bytes atomic.Uint64
	// activeBytes is segSize, for Disk.
	activeBytes atomic.Int64
}

// Open recovers the log in opts.Dir (creating it if needed) and starts its
// writer goroutine, which runs until Close. A torn write at the tail of the
// last segment is truncated and logged; any other damage returns a
// *CorruptionError (a damaged tail file a *TailError) and leaves the files
// untouched. A log that ends before what its tail file says it held opens
// with Missing set, appends refused until AcceptMissing. See the package
// documentation for the rules.
func Open(opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	l := &Log{opts: opts}
	interval := opts.CommitInterval
	if opts.Sync != SyncAlways {
		interval = 0 // nothing to share: a write costs no fsync
	}
	gc, err := groupcommit.New(groupcommit.Options{
		Name:           "wal",
		MaxRecordBytes: opts.MaxRecordBytes,
		MaxBatchBytes:  opts.MaxBatchBytes,
		CommitInterval: interval,
		Clock:          opts.Clock,
		Admit:          l.admit,
		Failed: func(err error) {
			opts.Logger.Error("wal: log failed: it takes nothing more; what is durable is read again by opening the log anew", slog.Any("err", err))
		},
	})
	if err != nil {
		return nil, err
	}
	rec, err := recoverDir(opts)
	if err != nil {
		return nil, err
	}
	l.gc = gc
	l.segments = rec.segments
	l.seg = rec.active
	l.segPath = rec.segments[len(rec.segments)-1].path
	l.segFirst = rec.segments[len(rec.segments)-1].first
	l.segSize = rec.size
	l.tail = rec.tail
	l.missing.Store(rec.missing)
	l.activeBytes.Store(rec.size)
	opts.Logger.Info("wal: opened",
		slog.String("dir", opts.Dir), slog.Int("segments", len(rec.segments)),
		slog.Uint64("first_lsn", rec.segments[0].first), slog.Uint64("last_lsn", rec.lastLSN),
		slog.String("sync", opts.Sync.String()))
	if m := rec.missing; m != nil {
		opts.Logger.Error("wal: the log lacks records it held durably; appends are refused until the loss is accepted",
			slog.String("missing", fmt.Sprintf("%d-%d", m.First, m.Last)), slog.String("why", m.String()))
	}
	gc.Start(rec.lastLSN, writer{l})
	return l, nil
}

// admit refuses appends while records are missing (the core asks it under
// its lock before each Append).
func (l *Log) admit() error {
	if m := l.missing.Load(); m != nil {
		return fmt.Errorf("%w: records %d-%d: %s; accept their loss first", ErrMissing, m.First, m.Last, m)
	}
	return nil
}

// Append assigns the next dense LSNs to entries, in order, queues their
// frames for the writer and returns the LSN of the last one. The records are
// NOT durable yet: call Wait (or use AppendSync) before acting on them. LSN
// order is call order. An empty entries appends nothing and returns LastLSN.
//
// Append copies the payloads; the caller may reuse them at once. It blocks
// only while more than 4×MaxBatchBytes are queued for the writer
// (backpressure). It returns the sticky fatal error once the log has failed,
// ErrClosed after Close, ErrTooLarge for a payload over MaxRecordBytes and
// ErrInvalidEntry for type 0; then nothing was appended.
func (l *Log) Append(entries []Entry) (lastLSN uint64, err error) {
	payload, err := l.gc.Check(entries)
	if err != nil {
		return 0, err
	}
	need := payload + len(entries)*frameHeaderSize
	return l.gc.Append(len(entries), need, func(lsn uint64) {
		if len(l.pending)+need > cap(l.pending) {
			l.pending = growBytes(l.pending, need)
		}
		// Encoding happens under the core's lock because the LSN, and so
		// the checksum, is only known here; it is a copy and a hardware
		// CRC, cheap next to the fsync the batch waits for.
		for _, e := range entries {
			l.pending = appendFrame(l.pending, e.Type, lsn, e.Payload)
			lsn++
		}
	})
}

// Wait blocks until every record with an LSN <= lsn is durable: written and
// fsynced under SyncAlways, written under SyncNone. It returns nil at once if
// that is already so, even after Close or a failure. Otherwise it returns the
// sticky fatal error if the log failed before getting there, ErrClosed if the
// log was closed, an error if lsn was never assigned, or ctx.Err() if ctx is
// done first (the append is not undone: the record may still become
// durable).
func (l *Log) Wait(ctx context.Context, lsn uint64) error { return l.gc.Wait(ctx, lsn) }

// AppendSync is Append followed by Wait for its last LSN.
func (l *Log) AppendSync(ctx context.Context, entries []Entry) (lastLSN uint64, err error) {
	lsn, err := l.Append(entries)
	if err != nil {
		return 0, err
	}
	return lsn, l.Wait(ctx, lsn)
}

// LastLSN returns the last assigned LSN (0 on a log that never held a
// record).
func (l *Log) LastLSN() uint64 { return l.gc.LastLSN() }

// DurableLSN returns the last durable LSN. Every LSN up to it is durable.
func (l *Log) DurableLSN() uint64 { return l.gc.DurableLSN() }

// FirstLSN returns the LSN the oldest segment on disk starts at: the first
// record still on disk, or, while that segment holds no record yet, the LSN
// the next record will get (1 on a fresh log). It is never 0, and
// Replay(FirstLSN(), ...) is always valid.
func (l *Log) FirstLSN() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segments[0].first
}

// Err returns the sticky fatal error, nil while the log is healthy. Once it
// is set the Log accepts nothing more; the owner must Close it and Open the
// directory again, which recovers whatever reached the disk.
func (l *Log) Err() error { return l.gc.Err() }

// Missing returns the records the log lacks of those its tail file says it
// held durably (doc.go, "The tail file"), nil if it lacks none. While there
// are some, Append refuses with ErrMissing: the owner must refuse to serve,
// or accept the loss with AcceptMissing.
func (l *Log) Missing() *Missing {
	m := l.missing.Load()
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// AcceptMissing gives up the records Missing names, for good: it cuts the
// last segment where they should start (if bytes that are not valid
// records are there), records the log's end as it is now in the tail
// file, and lets appends continue after LastLSN. It must be called before
// any Append; without missing records it does nothing.
func (l *Log) AcceptMissing() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.missing.Load()
	if m == nil {
		return nil
	}
	if !l.gc.Idle() {
		return fmt.Errorf("wal: AcceptMissing on a log that is closing, failed or has appends")
	}
	if m.truncate >= 0 {
		if err := l.seg.Truncate(m.truncate); err != nil {
			return ioError("truncate the damaged end of segment", l.segPath, err)
		}
		if err := l.seg.Sync(); err != nil {
			return ioError("fsync segment", l.segPath, err)
		}
		l.segSize = m.truncate
		l.activeBytes.Store(m.truncate)
	}
	mark := tailMark{segment: l.segFirst, last: l.gc.LastLSN()}
	if err := writeTail(l.opts.FS, l.opts.Dir, mark); err != nil {
		return err
	}
	l.tail = mark
	l.missing.Store(nil)
	l.opts.Logger.Warn("wal: accepted the loss of the records the log lacked; appends continue after its last record",
		slog.String("lost", fmt.Sprintf("%d-%d", m.First, m.Last)), slog.Uint64("last_lsn", mark.last))
	return nil
}

// Stats returns the counters since Open.
func (l *Log) Stats() Stats {
	return Stats{
		Records: l.records.Load(),
		Batches: l.batches.Load(),
		Fsyncs:  l.fsyncs.Load(),
		Bytes:   l.bytes.Load(),
	}
}

// Disk is what a Log holds on disk.
type Disk struct {
	Segments int   // segment files
	Bytes    int64 // their total size
}

// Disk returns the segments on disk and their size.
func (l *Log) Disk() Disk {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := Disk{Segments: len(l.segments), Bytes: l.activeBytes.Load()}
	for _, s := range l.segments[:len(l.segments)-1] {
		d.Bytes += s.bytes
	}
	return d
}

// Close stops accepting appends, writes and fsyncs everything appended before
// it (under either sync policy), stops the writer, records the log's last
// record in the tail file and closes the segment. It returns the sticky
// fatal error if the log failed. Calling it again returns
// the same result. Append after Close returns ErrClosed; so does Wait for an
// LSN that is not durable.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.gc.Close()
		err := l.recordCleanEnd()
		if l.seg != nil {
			if cerr := l.seg.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("wal: close segment %s: %w", l.segPath, cerr)
			}
			l.seg = nil
		}
		if gerr := l.gc.Err(); gerr != nil {
			err = gerr
		}
		l.closeErr = err
	})
	return l.closeErr
}

// recordCleanEnd writes the log's last record into the tail file, once the
// writer stopped with everything durable, so that records lost after a
// clean stop are found missing up to the log's end. If that fails, nothing
// is lost: the tail file names less, and Close reports the error.
func (l *Log) recordCleanEnd() error {
	healthy := l.gc.Err() == nil && l.missing.Load() == nil
	durable := l.gc.DurableLSN()
	if !healthy || l.seg == nil || durable <= l.tail.last {
		return nil
	}
	mark := tailMark{segment: l.segFirst, last: durable}
	if err := writeTail(l.opts.FS, l.opts.Dir, mark); err != nil {
		return fmt.Errorf("%w (every record is durable; the tail file names lsn %d, not the log's last, %d)", err, l.tail.last, durable)
	}
	l.tail = mark
	return nil
}

// writer is the log's side of the group-commit core's round loop
// (groupcommit.Writer). Each round writes the frames appended since the
// last one (once per segment and per MaxBatchBytes) and fsyncs them under
// SyncAlways; the core advances DurableLSN.
type writer struct{ *Log }

// Take takes every frame queued.
func (w writer) Take(_, n uint64) (uint64, int) {
	w.round, w.pending = w.pending, w.spare[:0]
	return n, len(w.round)
}

// Write writes the round's frames.
func (w writer) Write(first, _ uint64) error {
	if err := w.writeFrames(w.round, first); err != nil {
		return err
	}
	w.spare, w.round = w.round, nil
	if cap(w.spare) > 2*groupcommit.PendingBatches*w.opts.MaxBatchBytes {
		w.spare = nil // let a buffer grown by one huge append go
	}
	return nil
}

// Drain makes SyncNone writes durable too, at Close.
func (w writer) Drain() error { return w.syncIfDirty() }

// writeFrames writes the frames in buf, whose first LSN is first, advancing
// DurableLSN after each write (and fsync).
func (l *Log) writeFrames(buf []byte, first uint64) error {
	off, lsn := 0, first
	for off < len(buf) {
		n := frameLen(buf, off, lsn)
		if l.segSize > segmentHeaderSize && l.segSize+int64(n) > l.opts.SegmentBytes {
			if err := l.rotate(lsn); err != nil {
				return err
			}
		}
		end, count := off+n, uint64(1)
		for end < len(buf) {
			n := frameLen(buf, end, lsn+count)
			if end-off+n > l.opts.MaxBatchBytes || l.segSize+int64(end-off+n) > l.opts.SegmentBytes {
				break
			}
			end += n
			count++
		}
		if err := l.write(buf[off:end], int(count)); err != nil {
			return err
		}
		l.records.Add(count)
		if l.opts.Sync == SyncAlways || l.tailDue {
			// The tail file must name only durable records: under
			// SyncNone too, the first records of a new segment are
			// fsynced before it names them.
			if err := l.sync(); err != nil {
				return err
			}
		}
		if l.tailDue {
			if err := l.recordNewSegment(lsn + count - 1); err != nil {
				return err
			}
		}
		l.gc.Advance(lsn + count - 1)
		if t := l.opts.Tail; t != nil && t.Watched() {
			l.publish(t, buf[off:end], lsn)
		}
		lsn += count
		off = end
	}
	return nil
}

// publish tells t of the records in frames, durable now, whose first LSN is
// first; the writer goroutine calls it after DurableLSN moved past them.
func (l *Log) publish(t Tail, frames []byte, first uint64) {
	l.published = l.published[:0]
	for off := 0; off < len(frames); {
		h := decodeFrameHeader(frames[off:])
		body := off + frameHeaderSize
		l.published = append(l.published, Entry{Type: h.typ, Payload: frames[body : body+int(h.length)]})
		off = body + int(h.length)
	}
	t.Publish(first, l.published)
	clear(l.published) // keep no payload alive
}

// recordNewSegment writes the tail file once the first records of a new
// segment, up to last, are durable, before they are reported durable: a
// deleted newest segment that held acknowledged records is then always
// found missing.
func (l *Log) recordNewSegment(last uint64) error {
	mark := tailMark{segment: l.segFirst, last: last}
	if err := writeTail(l.opts.FS, l.opts.Dir, mark); err != nil {
		return err
	}
	l.tail, l.tailDue = mark, false
	return nil
}

// frameLen returns the size of the frame at off in buf, asserting that it is
// the frame with the LSN the writer expects (the encoder's side of the pair
// of checks; recovery and Replay are the reader's).
func frameLen(buf []byte, off int, lsn uint64) int {
	h := decodeFrameHeader(buf[off:])
	if h.lsn != lsn || off+int(h.frameBytes()) > len(buf) {
		panic(fmt.Sprintf("wal: internal error: pending frame at %d has lsn %d, length %d; want lsn %d within %d bytes",
			off, h.lsn, h.length, lsn, len(buf)))
	}
	return int(h.frameBytes())
}

// write writes b, which holds records frames, to the active segment.
func (l *Log) write(b []byte, records int) error {
	var start time.Time
	if l.opts.Observer != nil {
		start = l.opts.Clock.Now()
	}
	n, err := l.seg.Write(b)
	if l.opts.Observer != nil && err == nil {
		l.opts.Observer.Wrote(records, l.opts.Clock.Now().Sub(start))
	}
	l.batches.Add(1)
	l.bytes.Add(uint64(n))
	l.segSize += int64(n)
	l.activeBytes.Store(l.segSize)
	l.dirty = true
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return ioError("write segment", l.segPath, err)
	}
	return nil
}

// sync fsyncs the active segment. A failed fsync is never retried: the
// kernel may have dropped the dirty pages and cleared the error, so a retry
// that succeeds proves nothing.
func (l *Log) sync() error {
	l.fsyncs.Add(1)
	var start time.Time
	if l.opts.Observer != nil {
		start = l.opts.Clock.Now()
	}
	if err := l.seg.Sync(); err != nil {
		return ioError("fsync segment", l.segPath, err)
	}
	if l.opts.Observer != nil {
		l.opts.Observer.Synced(l.opts.Clock.Now().Sub(start))
	}
	l.dirty = false
	return nil
}

func (l *Log) syncIfDirty() error {
	if !l.dirty {
		return nil
	}
	return l.sync()
}

// rotate seals the active segment (fsynced under either policy, so that only
// the last segment can ever have a torn tail) and starts a new one at first.
func (l *Log) rotate(first uint64) error {
	if err := l.syncIfDirty(); err != nil {
		return err
	}
	if err := l.seg.Close(); err != nil {
		l.seg = nil
		return fmt.Errorf("wal: close segment %s: %w", l.segPath, err)
	}
	l.seg = nil
	f, path, err := createSegment(l.opts.FS, l.opts.Dir, first)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.segments[len(l.segments)-1].bytes = l.segSize
	l.segments = append(l.segments, segmentInfo{first: first, path: path})
	l.activeBytes.Store(segmentHeaderSize)
	l.mu.Unlock()
	l.seg, l.segPath, l.segFirst, l.segSize, l.dirty = f, path, first, segmentHeaderSize, false
	l.tailDue = true
	return nil
}

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
