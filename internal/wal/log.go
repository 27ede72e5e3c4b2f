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

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys"
)

// Entry is one record as the log sees it: an opaque type tag and payload.
// Type 0 is reserved.
type Entry struct {
	Type    uint16
	Payload []byte
}

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	Records uint64 // records written
	Batches uint64 // data writes (a batch split by a segment rotation or MaxBatchBytes counts per write)
	Fsyncs  uint64 // fsyncs of segment data (not of new segment headers or directories)
	Bytes   uint64 // frame bytes written
}

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	opts         Options // with defaults
	pendingLimit int

	mu sync.Mutex
	// workCond wakes the writer: pending became non-empty or closing was set.
	workCond sync.Cond
	// spaceCond wakes appenders blocked on a full pending buffer: the writer
	// took it, failed or stopped.
	spaceCond    sync.Cond
	pending      []byte // encoded frames the writer has not taken yet
	pendingFirst uint64 // LSN of the first frame in pending
	pendingCalls int    // Append calls whose frames are in pending
	closing      bool   // Close was called; Append refuses
	stopped      bool   // the writer has exited; nothing more becomes durable
	err          error  // sticky fatal error
	// notify is closed (and replaced) when durable advances or the writer
	// stops; notifyUsed avoids replacing it when nobody waited.
	notify     chan struct{}
	notifyUsed bool
	segments   []segmentInfo // append-only; readers copy the slice header

	lastLSN atomic.Uint64 // last assigned LSN; stored under mu
	durable atomic.Uint64 // last durable LSN; stored under mu

	// missing is what the log lacks of what the tail file says it held;
	// Append refuses while it is set (AcceptMissing clears it).
	missing *Missing

	// Owned by the writer goroutine while it runs, by Close after it exits.
	seg      fsys.File
	segPath  string
	segFirst uint64 // first LSN of the active segment
	segSize  int64
	dirty    bool // written since the last fsync
	// tail is what the tail file says; tailDue means a new segment holds
	// records the tail file does not name yet.
	tail    tailMark
	tailDue bool

	// closingCtx is cancelled by Close (stopWaiting): a round waiting out
	// the CommitInterval starts at once.
	closingCtx  context.Context
	stopWaiting context.CancelFunc

	done      chan struct{} // closed when the writer exits
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
	rec, err := recoverDir(opts)
	if err != nil {
		return nil, err
	}
	l := &Log{
		opts:         opts,
		pendingLimit: pendingBatches * opts.MaxBatchBytes,
		notify:       make(chan struct{}),
		segments:     rec.segments,
		seg:          rec.active,
		segPath:      rec.segments[len(rec.segments)-1].path,
		segFirst:     rec.segments[len(rec.segments)-1].first,
		segSize:      rec.size,
		tail:         rec.tail,
		missing:      rec.missing,
		done:         make(chan struct{}),
	}
	l.closingCtx, l.stopWaiting = context.WithCancel(context.Background())
	l.workCond.L = &l.mu
	l.spaceCond.L = &l.mu
	l.lastLSN.Store(rec.lastLSN)
	l.durable.Store(rec.lastLSN)
	l.activeBytes.Store(rec.size)
	opts.Logger.Info("wal: opened",
		slog.String("dir", opts.Dir), slog.Int("segments", len(rec.segments)),
		slog.Uint64("first_lsn", rec.segments[0].first), slog.Uint64("last_lsn", rec.lastLSN),
		slog.String("sync", opts.Sync.String()))
	if m := rec.missing; m != nil {
		opts.Logger.Error("wal: the log lacks records it held durably; appends are refused until the loss is accepted",
			slog.String("missing", fmt.Sprintf("%d-%d", m.First, m.Last)), slog.String("why", m.String()))
	}
	go l.run()
	return l, nil
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
	need := 0
	for i, e := range entries {
		if len(e.Payload) > l.opts.MaxRecordBytes {
			return 0, fmt.Errorf("%w: entry %d has a %d-byte payload, over the limit Options.MaxRecordBytes = %d",
				ErrTooLarge, i, len(e.Payload), l.opts.MaxRecordBytes)
		}
		if e.Type == 0 {
			return 0, fmt.Errorf("%w: entry %d has type 0, which is reserved", ErrInvalidEntry, i)
		}
		need += frameHeaderSize + len(e.Payload)
	}

	l.mu.Lock()
	for {
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			return 0, err
		}
		if l.closing {
			l.mu.Unlock()
			return 0, ErrClosed
		}
		if m := l.missing; m != nil {
			l.mu.Unlock()
			return 0, fmt.Errorf("%w: records %d-%d: %s; accept their loss first", ErrMissing, m.First, m.Last, m)
		}
		if len(l.pending) == 0 || len(l.pending)+need <= l.pendingLimit {
			break
		}
		l.spaceCond.Wait()
	}
	lsn := l.lastLSN.Load()
	if len(entries) == 0 {
		l.mu.Unlock()
		return lsn, nil
	}
	if len(l.pending) == 0 {
		l.pendingFirst = lsn + 1
	}
	if cap(l.pending)-len(l.pending) < need {
		l.pending = growBytes(l.pending, need)
	}
	// Encoding happens under the lock because the LSN, and so the checksum,
	// is only known here; it is a copy and a hardware CRC, cheap next to the
	// fsync the batch waits for.
	for _, e := range entries {
		lsn++
		l.pending = appendFrame(l.pending, e.Type, lsn, e.Payload)
	}
	l.lastLSN.Store(lsn)
	l.pendingCalls++
	l.workCond.Signal()
	l.mu.Unlock()
	return lsn, nil
}

// Wait blocks until every record with an LSN <= lsn is durable: written and
// fsynced under SyncAlways, written under SyncNone. It returns nil at once if
// that is already so, even after Close or a failure. Otherwise it returns the
// sticky fatal error if the log failed before getting there, ErrClosed if the
// log was closed, an error if lsn was never assigned, or ctx.Err() if ctx is
// done first (the append is not undone: the record may still become
// durable).
func (l *Log) Wait(ctx context.Context, lsn uint64) error {
	if lsn <= l.durable.Load() {
		return nil
	}
	l.mu.Lock()
	for {
		if lsn <= l.durable.Load() {
			l.mu.Unlock()
			return nil
		}
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			return err
		}
		last := l.lastLSN.Load()
		if l.stopped || (l.closing && lsn > last) {
			l.mu.Unlock()
			return ErrClosed
		}
		if lsn > last {
			l.mu.Unlock()
			return fmt.Errorf("wal: wait for lsn %d, but the last assigned lsn is %d", lsn, last)
		}
		ch := l.notify
		l.notifyUsed = true
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
}

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
func (l *Log) LastLSN() uint64 { return l.lastLSN.Load() }

// DurableLSN returns the last durable LSN. Every LSN up to it is durable.
func (l *Log) DurableLSN() uint64 { return l.durable.Load() }

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
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Missing returns the records the log lacks of those its tail file says it
// held durably (doc.go, "The tail file"), nil if it lacks none. While there
// are some, Append refuses with ErrMissing: the owner must refuse to serve,
// or accept the loss with AcceptMissing.
func (l *Log) Missing() *Missing {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.missing == nil {
		return nil
	}
	m := *l.missing
	return &m
}

// AcceptMissing gives up the records Missing names, for good: it cuts the
// last segment where they should start (if bytes that are not valid
// records are there), records the log's end as it is now in the tail
// file, and lets appends continue after LastLSN. It must be called before
// any Append; without missing records it does nothing.
func (l *Log) AcceptMissing() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.missing
	if m == nil {
		return nil
	}
	if l.closing || l.err != nil || len(l.pending) > 0 {
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
	mark := tailMark{segment: l.segFirst, last: l.lastLSN.Load()}
	if err := writeTail(l.opts.FS, l.opts.Dir, mark); err != nil {
		return err
	}
	l.tail = mark
	l.missing = nil
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
		l.mu.Lock()
		l.closing = true
		l.stopWaiting()
		l.workCond.Signal()
		l.spaceCond.Broadcast()
		l.mu.Unlock()
		<-l.done

		err := l.recordCleanEnd()
		if l.seg != nil {
			if cerr := l.seg.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("wal: close segment %s: %w", l.segPath, cerr)
			}
			l.seg = nil
		}
		l.mu.Lock()
		if l.err != nil {
			err = l.err
		}
		l.mu.Unlock()
		l.closeErr = err
	})
	return l.closeErr
}

// recordCleanEnd writes the log's last record into the tail file, once the
// writer stopped with everything durable, so that records lost after a
// clean stop are found missing up to the log's end. If that fails, nothing
// is lost: the tail file names less, and Close reports the error.
func (l *Log) recordCleanEnd() error {
	l.mu.Lock()
	healthy := l.err == nil && l.missing == nil
	l.mu.Unlock()
	durable := l.durable.Load()
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

// run is the writer goroutine, started by Open and stopped by Close (or by a
// fatal error). Each round it takes everything appended since the last one,
// writes it (once per segment and per MaxBatchBytes), fsyncs under
// SyncAlways, then advances DurableLSN. While it writes, new appends pile up
// for the next round, so batches grow with the load. With a CommitInterval
// a round that would start sooner than that after the last one, which
// carried more than one Append call (a sign of concurrent callers), waits
// out the rest first.
func (l *Log) run() {
	defer close(l.done)
	var spare []byte
	var last round // the last round; zero before the first
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closing {
			l.workCond.Wait()
		}
		if d := l.roundWait(last); d > 0 && !l.closing {
			l.mu.Unlock()
			_ = clock.Sleep(l.closingCtx, l.opts.Clock, d) // Close cuts it short
			l.mu.Lock()
		}
		if l.opts.CommitInterval > 0 {
			last = round{start: l.opts.Clock.Now(), calls: l.pendingCalls}
		}
		l.pendingCalls = 0
		if len(l.pending) == 0 {
			// Closing and drained: make SyncNone writes durable too.
			l.mu.Unlock()
			err := l.syncIfDirty()
			l.mu.Lock()
			l.stopLocked(err)
			l.mu.Unlock()
			return
		}
		buf, first := l.pending, l.pendingFirst
		l.pending = spare[:0]
		l.spaceCond.Broadcast()
		l.mu.Unlock()

		if err := l.writeFrames(buf, first); err != nil {
			l.mu.Lock()
			l.pending = nil // never written: nothing after the failure becomes durable
			l.stopLocked(err)
			l.mu.Unlock()
			return
		}
		spare = buf
		if cap(spare) > 2*l.pendingLimit {
			spare = nil // let a buffer grown by one huge append go
		}
	}
}

// round is what the writer remembers of its last round.
type round struct {
	start time.Time // when it started
	calls int       // the Append calls it carried
}

// roundWait is how long a round must wait before it starts, after last:
// what is left of CommitInterval, under SyncAlways, when last carried more
// than one Append call. A caller that waits for each append before the
// next (one client, one request at a time) finds the last round its own,
// and never waits: there is nobody to share an fsync with.
func (l *Log) roundWait(last round) time.Duration {
	if l.opts.CommitInterval == 0 || l.opts.Sync != SyncAlways || last.calls < 2 {
		return 0
	}
	return l.opts.CommitInterval - l.opts.Clock.Now().Sub(last.start)
}

// stopLocked records that the writer has exited, with err if it failed, and
// wakes everyone blocked on it.
func (l *Log) stopLocked(err error) {
	if err != nil && l.err == nil {
		l.err = err
		l.opts.Logger.Error("wal: log failed: it takes nothing more; what is durable is read again by opening the log anew", slog.Any("err", err))
	}
	l.stopped = true
	l.spaceCond.Broadcast()
	l.wakeLocked()
}

func (l *Log) wakeLocked() {
	if l.notifyUsed {
		close(l.notify)
		l.notify = make(chan struct{})
		l.notifyUsed = false
	}
}

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
		lsn += count
		off = end
		l.mu.Lock()
		l.durable.Store(lsn - 1)
		l.wakeLocked()
		l.mu.Unlock()
	}
	return nil
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
