package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// Entry is one record as a log sees it: an opaque type tag and payload.
// Type 0 is reserved.
type Entry struct {
	Type    uint16
	Payload []byte
}

// The errors of both logs. A log's own package re-exports them (wal.ErrClosed
// is ErrClosed), and the core returns them wrapped in the log's name
// ("wal: log closed").
var (
	// ErrClosed is returned by Append after Close, and by Wait for an LSN
	// that did not become durable before Close.
	ErrClosed = errors.New("log closed")
	// ErrTooLarge is returned by Check for a payload over MaxRecordBytes.
	ErrTooLarge = errors.New("record too large")
	// ErrInvalidEntry is returned by Check for an entry of type 0, which is
	// reserved.
	ErrInvalidEntry = errors.New("invalid entry")
)

// Writer is the log's side of the round loop. The core calls it from its
// writer goroutine only, one call at a time.
type Writer interface {
	// Take is called under the core's lock when records first..first+n-1
	// are queued (n ≥ 1): it moves the first of them, at least one and at
	// most n, off the log's queue into the round it will write, and
	// returns how many it took and their bytes, as Append counted them.
	Take(first, n uint64) (took uint64, bytes int)
	// Write writes the round Take made, records first..first+n-1, outside
	// the lock. It may report a part durable before the rest (Advance);
	// once it returns nil the whole round is durable. An error is fatal.
	Write(first, n uint64) error
	// Drain is called once, when the log closes with nothing queued: it
	// makes what Write wrote durable if it is not yet (the file WAL's
	// fsync under SyncNone). An error is fatal.
	Drain() error
}

// Core is the group-commit core of one log. Its methods are safe for
// concurrent use; New makes it, Start starts its writer.
type Core struct {
	opts         Options // with defaults
	w            Writer
	errClosed    error // ErrClosed in the log's name
	pendingLimit int

	mu sync.Mutex
	// work wakes the writer: something was queued or Close was called.
	work sync.Cond
	// space wakes appenders blocked on a full queue: the writer took a
	// round, failed or stopped.
	space        sync.Cond
	taken        uint64 // the last LSN the writer took; the queue is taken+1..last
	pendingBytes int    // bytes of the queue, as Append counted them
	pendingCalls int    // Append calls with records in the queue
	started      bool
	closing      bool  // Close was called; Append refuses
	stopped      bool  // the writer has exited; nothing more becomes durable
	err          error // sticky fatal error
	// notify is closed (and replaced) when the durable LSN advances or the
	// writer stops; notifyUsed avoids replacing it when nobody waited.
	notify     chan struct{}
	notifyUsed bool

	last    atomic.Uint64 // last assigned LSN; stored under mu
	durable atomic.Uint64 // last durable LSN; stored under mu

	// closingCtx is cancelled by Close: a round waiting out the commit
	// interval starts at once.
	closingCtx  context.Context
	stopWaiting context.CancelFunc
	done        chan struct{} // closed when the writer exits
}

// New checks opts and returns a core whose writer is not started yet: a
// log checks its options with New before it opens anything, and calls
// Start once it knows where it ends.
func New(opts Options) (*Core, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Core{
		opts:         opts,
		errClosed:    fmt.Errorf("%s: %w", opts.Name, ErrClosed),
		pendingLimit: PendingBatches * opts.MaxBatchBytes,
		notify:       make(chan struct{}),
		done:         make(chan struct{}),
	}
	c.work.L = &c.mu
	c.space.L = &c.mu
	c.closingCtx, c.stopWaiting = context.WithCancel(context.Background())
	return c, nil
}

// Start starts the writer goroutine, which runs until Close or a fatal
// error, for a log whose last record (durable, all of them) is last: the
// next Append gets last+1. Start must be called once, before any other
// method but Check.
func (c *Core) Start(last uint64, w Writer) {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		panic("groupcommit: Start called twice")
	}
	c.started, c.w, c.taken = true, w, last
	c.last.Store(last)
	c.durable.Store(last)
	c.mu.Unlock()
	go c.run()
}

// Check checks entries for Append and returns the bytes of their payloads:
// an error wrapping ErrTooLarge for a payload over MaxRecordBytes, or
// ErrInvalidEntry for type 0. A log calls it before it prepares a call's
// entries for its queue.
func (c *Core) Check(entries []Entry) (payloadBytes int, err error) {
	for i, e := range entries {
		if len(e.Payload) > c.opts.MaxRecordBytes {
			return 0, fmt.Errorf("%s: %w: entry %d has a %d-byte payload, over the limit Options.MaxRecordBytes = %d",
				c.opts.Name, ErrTooLarge, i, len(e.Payload), c.opts.MaxRecordBytes)
		}
		if e.Type == 0 {
			return 0, fmt.Errorf("%s: %w: entry %d has type 0, which is reserved", c.opts.Name, ErrInvalidEntry, i)
		}
		payloadBytes += len(e.Payload)
	}
	return payloadBytes, nil
}

// Append assigns the next n LSNs and calls add(first) under the core's lock
// to queue the records first..first+n-1, which take bytes of the queue
// (as the log counts them; Take gives them back), and returns the last
// LSN. add must not block or call the core. n = 0 queues nothing and
// returns LastLSN. Append blocks while the queue is full (PendingBatches ×
// MaxBatchBytes), unless it is empty. It returns the sticky fatal error
// once the log has failed, ErrClosed after Close, or Admit's error; then
// nothing was appended and add was not called.
func (c *Core) Append(n, bytes int, add func(first uint64)) (lastLSN uint64, err error) {
	c.mu.Lock()
	for {
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if c.closing {
			c.mu.Unlock()
			return 0, c.errClosed
		}
		if c.opts.Admit != nil {
			if err := c.opts.Admit(); err != nil {
				c.mu.Unlock()
				return 0, err
			}
		}
		if c.taken == c.last.Load() || c.pendingBytes+bytes <= c.pendingLimit {
			break
		}
		c.space.Wait()
	}
	last := c.last.Load()
	if n == 0 {
		c.mu.Unlock()
		return last, nil
	}
	add(last + 1)
	last += uint64(n)
	c.last.Store(last)
	c.pendingBytes += bytes
	c.pendingCalls++
	c.work.Signal()
	c.mu.Unlock()
	return last, nil
}

// Wait blocks until every LSN up to lsn is durable. It returns nil at once
// if that is already so, even after Close or a failure. Otherwise it
// returns the sticky fatal error if the log failed before getting there,
// ErrClosed if it was closed, an error if lsn was never assigned, or
// ctx.Err() if ctx is done first (the append is not undone: the record may
// still become durable).
func (c *Core) Wait(ctx context.Context, lsn uint64) error {
	if lsn <= c.durable.Load() {
		return nil
	}
	c.mu.Lock()
	for {
		if lsn <= c.durable.Load() {
			c.mu.Unlock()
			return nil
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return err
		}
		last := c.last.Load()
		if c.stopped || (c.closing && lsn > last) {
			c.mu.Unlock()
			return c.errClosed
		}
		if lsn > last {
			c.mu.Unlock()
			return fmt.Errorf("%s: wait for lsn %d, but the last assigned lsn is %d", c.opts.Name, lsn, last)
		}
		ch := c.notify
		c.notifyUsed = true
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
	}
}

// Advance records that every LSN up to lsn is durable and wakes the
// waiters. Only Writer.Write calls it, for a part of its round that is
// durable before the rest; the core advances to the round's end itself.
func (c *Core) Advance(lsn uint64) {
	if lsn <= c.durable.Load() {
		return
	}
	c.mu.Lock()
	if lsn > c.taken {
		c.mu.Unlock()
		panic(fmt.Sprintf("groupcommit: internal error: lsn %d reported durable, but the writer took only up to %d", lsn, c.taken))
	}
	c.durable.Store(lsn)
	c.wakeLocked()
	c.mu.Unlock()
}

// LastLSN returns the last assigned LSN.
func (c *Core) LastLSN() uint64 { return c.last.Load() }

// DurableLSN returns the last durable LSN. Every LSN up to it is durable.
func (c *Core) DurableLSN() uint64 { return c.durable.Load() }

// Err returns the sticky fatal error, nil while the log is healthy.
func (c *Core) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Closed returns ErrClosed, in the log's name, once Close was called; nil
// before.
func (c *Core) Closed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.errClosed
	}
	return nil
}

// Idle reports whether the log is open, healthy and has nothing queued.
func (c *Core) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closing && c.err == nil && c.taken == c.last.Load()
}

// Close stops taking appends and returns once the writer has written (and
// drained) everything appended before it, or has failed, and exited. It
// may be called again, and before Start.
func (c *Core) Close() {
	c.mu.Lock()
	c.closing = true
	c.stopWaiting()
	if !c.started {
		c.stopped = true
		c.mu.Unlock()
		return
	}
	c.work.Signal()
	c.space.Broadcast()
	c.mu.Unlock()
	<-c.done
}

// run is the writer goroutine, started by Start and stopped by Close (or by
// a fatal error). Each round it takes what Writer.Take takes of the queue,
// writes it, and advances the durable LSN; meanwhile new appends queue up
// for the next round.
func (c *Core) run() {
	defer close(c.done)
	var last round // the last round; zero before the first
	for {
		c.mu.Lock()
		for c.taken == c.last.Load() && !c.closing {
			c.work.Wait()
		}
		if d := c.roundWait(last); d > 0 && !c.closing {
			c.mu.Unlock()
			_ = clock.Sleep(c.closingCtx, c.opts.Clock, d) // Close cuts it short
			c.mu.Lock()
		}
		if c.opts.CommitInterval > 0 {
			last = round{start: c.opts.Clock.Now(), calls: c.pendingCalls}
		}
		c.pendingCalls = 0
		queued := c.last.Load() - c.taken
		if queued == 0 {
			// Closing, with everything written: make it durable.
			c.mu.Unlock()
			err := c.w.Drain()
			c.mu.Lock()
			c.stopLocked(err)
			c.mu.Unlock()
			return
		}
		first := c.taken + 1
		n, bytes := c.w.Take(first, queued)
		if n < 1 || n > queued {
			c.mu.Unlock()
			panic(fmt.Sprintf("groupcommit: internal error: Take took %d of the %d records queued", n, queued))
		}
		c.taken += n
		c.pendingBytes -= bytes
		c.space.Broadcast()
		c.mu.Unlock()

		if err := c.w.Write(first, n); err != nil {
			c.mu.Lock()
			c.stopLocked(err)
			c.mu.Unlock()
			return
		}
		c.Advance(first + n - 1)
	}
}

// round is what the writer remembers of its last round.
type round struct {
	start time.Time // when it started
	calls int       // the Append calls it carried
}

// roundWait is how long a round must wait before it starts, after last:
// what is left of CommitInterval when last carried more than one Append
// call. A caller that waits for each append before the next (one client,
// one request at a time) finds the last round its own, and never waits:
// there is nobody to share a write with.
func (c *Core) roundWait(last round) time.Duration {
	if c.opts.CommitInterval == 0 || last.calls < 2 {
		return 0
	}
	return c.opts.CommitInterval - c.opts.Clock.Now().Sub(last.start)
}

// stopLocked records that the writer has exited, with err if it failed,
// and wakes everyone blocked on it.
func (c *Core) stopLocked(err error) {
	if err != nil && c.err == nil {
		c.err = err
		if c.opts.Failed != nil {
			c.opts.Failed(err)
		}
	}
	c.stopped = true
	c.space.Broadcast()
	c.wakeLocked()
}

func (c *Core) wakeLocked() {
	if c.notifyUsed {
		close(c.notify)
		c.notify = make(chan struct{})
		c.notifyUsed = false
	}
}
