package worker

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// errLost is the cause of a task context ended because the lease was lost.
type errLost struct{ why string }

func (e errLost) Error() string { return "worker: lease lost: " + e.why }

// margin is how long before the known expiry the worker gives a lease up:
// a tenth of the window, at most 2s, so network delay cannot make it act on
// a lease the server already expired.
func margin(window time.Duration) time.Duration { return min(window/10, 2*time.Second) }

// beater heartbeats the leases of a Worker's running tasks. One goroutine
// (run) keeps them in a heap ordered by their next event (a heartbeat due,
// or the local deadline) and sleeps on one timer until the earliest; each
// heartbeat call runs in a goroutine of its own, so a slow call delays no
// other lease. A task costs an entry in the heap, not a goroutine and
// timers of its own.
type beater struct {
	c    *client.Client
	mu   sync.Mutex
	h    keeperHeap
	wake chan struct{} // cap 1: the earliest event moved earlier
	quit chan struct{}
	done chan struct{}
}

func newBeater(c *client.Client) *beater {
	return &beater{c: c, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// keeper heartbeats one lease, from keepLease until stop, and ends the
// task's context (lose) when the lease is lost.
type keeper struct {
	b      *beater
	ctx    context.Context // the task's; heartbeat calls run under it
	lose   context.CancelCauseFunc
	t      *client.LeasedTask
	lg     *logger
	window time.Duration
	every  time.Duration
	safety time.Duration

	// Guarded by b.mu.
	idx        int       // index in b.h; -1 when not scheduled
	due        time.Time // next event: min(beatAt, deadline), or deadline while a heartbeat is out
	beatAt     time.Time
	deadline   time.Time
	inflight   bool               // a heartbeat call is out
	cancelCall context.CancelFunc // ends the call out
	stopped    bool
	idle       chan struct{} // made by stop while a call is out; closed when it ends
	// pending is the handler's last progress report not yet sent (nil:
	// none); sent is the last one a heartbeat delivered (valid with
	// hasSent); lastBeat is when the last heartbeat was sent.
	pending  *client.Progress
	sent     client.Progress
	hasSent  bool
	lastBeat time.Time
	// spawn holds the tasks the handler asked to spawn with its commit
	// (Spawn), until the commit or completion takes them.
	spawn []client.SubmitRequest
}

// keepLease starts heartbeating t's lease every HeartbeatEvery × window.
// The lease counts as lost, and ctx is ended through lose, when a heartbeat
// is refused, or when the local deadline passes without a successful
// heartbeat. The local deadline is measured on this process's monotonic
// clock: from the lease's
// arrival at received, the lease's remaining time (by the wall-clock
// expiry, never more than one window) less the margin; after a heartbeat
// sent at s, min(s + window, the new expiry) less the margin, because the
// server extends from its own now, which is after s. k is the keeper to
// use (it lives in the task's attempt, to save an allocation).
func (w *Worker) keepLease(k *keeper, ctx context.Context, lose context.CancelCauseFunc, t *client.LeasedTask, received time.Time, lg *logger) {
	left := t.LeaseExpiry.Sub(received)
	window := t.ExecutionWindow
	if window <= 0 {
		window = left
	}
	*k = keeper{
		b: w.beats, ctx: ctx, lose: lose, t: t, lg: lg,
		window: window,
		every:  max(time.Duration(float64(window)*w.opts.HeartbeatEvery), time.Millisecond),
		safety: margin(window),
		idx:    -1,
	}
	k.beatAt = received.Add(k.every)
	k.deadline = received.Add(min(left, window) - k.safety)
	k.due = earlier(k.beatAt, k.deadline)
	b := w.beats
	b.mu.Lock()
	heap.Push(&b.h, k)
	first := b.h[0] == k
	b.mu.Unlock()
	if first {
		b.signal()
	}
}

// stop ends the heartbeats and waits until no heartbeat is in flight, so a
// later Complete or Fail is the lease's last call. It may be called more
// than once.
func (k *keeper) stop() {
	b := k.b
	b.mu.Lock()
	if !k.stopped {
		k.stopped = true
		if k.idx >= 0 {
			heap.Remove(&b.h, k.idx)
		}
		if k.inflight {
			k.idle = make(chan struct{})
			k.cancelCall()
		}
	}
	idle := k.idle
	b.mu.Unlock()
	if idle != nil {
		<-idle
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (b *beater) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run handles the leases' events until stop. Start it before the first
// keepLease.
//
// It keeps one timer, and sets a new one only when the earliest event is
// before the timer's time: an early wake-up costs a look at the heap, a new
// timer an allocation, and while tasks come and go (each new lease is the
// earliest event of an otherwise empty heap) the timer set for an earlier
// lease still fires before the new one's event.
func (b *beater) run() {
	defer close(b.done)
	var timer *time.Timer // nil: none set
	var timerAt time.Time // when the timer was set to fire
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		now := time.Now()
		for len(b.h) > 0 && !b.h[0].due.After(now) {
			k := b.h[0]
			switch {
			case !now.Before(k.deadline):
				heap.Pop(&b.h)
				// Under b.mu, so that a stop that returns has seen either no
				// loss or the loss: the task's ctx ends before stop returns.
				k.lose(errLost{why: fmt.Sprintf("no successful heartbeat before the lease's expiry (less a %v safety margin)", k.safety)})
			case k.ctx.Err() != nil:
				// The task's ctx ended (shutdown past the grace): no more
				// heartbeats; the task stops its keeper soon.
				heap.Pop(&b.h)
			default:
				k.inflight = true
				// The call is not given the deadline as a context deadline
				// (a timer per call): the deadline stays the keeper's next
				// event, and when it passes, run ends the task's ctx, and
				// with it the call.
				cctx, cancel := context.WithCancel(k.ctx)
				k.cancelCall = cancel
				k.due = k.deadline
				k.lastBeat = now
				heap.Fix(&b.h, 0)
				go k.heartbeat(cctx, now, k.pending)
			}
		}
		var next time.Time // the earliest event; zero: none
		if len(b.h) > 0 {
			next = b.h[0].due
		}
		b.mu.Unlock()
		if !next.IsZero() && (timer == nil || next.Before(timerAt)) {
			if timer != nil {
				timer.Stop()
			}
			timer, timerAt = time.NewTimer(next.Sub(now)), next
			if !time.Now().Before(next) {
				// The clock passed next since now was read, so the timer
				// may fire late: handle the event at once instead.
				continue
			}
		}
		var fired <-chan time.Time
		if timer != nil {
			fired = timer.C
		}
		select {
		case <-b.quit:
			return
		case <-fired:
			timer = nil
		case <-b.wake:
		}
	}
}

// stopRun ends run; every keeper must have been stopped.
func (b *beater) stopRun() {
	close(b.quit)
	<-b.done
}

// heartbeat makes one heartbeat call, sent at sent with the progress report
// rep (nil: none), and schedules what follows from its answer.
func (k *keeper) heartbeat(ctx context.Context, sent time.Time, rep *client.Progress) {
	res, err := k.b.c.Heartbeat(ctx, client.HeartbeatRequest{TaskID: k.t.ID, LeaseID: k.t.LeaseID, Progress: rep})
	exp := res.LeaseExpiry
	b := k.b
	b.mu.Lock()
	k.inflight = false
	k.cancelCall()
	if k.stopped {
		if k.idle != nil {
			close(k.idle)
		}
		b.mu.Unlock()
		return
	}
	if k.idx < 0 {
		// Lost meanwhile: the deadline passed while the call was out.
		b.mu.Unlock()
		return
	}
	retry := false
	switch {
	case err == nil:
		k.deadline = sent.Add(min(k.window, exp.Sub(sent)) - k.safety)
		k.beatAt = time.Now().Add(k.every)
		if rep != nil {
			k.sent, k.hasSent = *rep, true
			if k.pending == rep {
				k.pending = nil
			}
		}
		if k.pending != nil {
			// A newer report came while the call was out.
			k.beatAt = earlier(k.beatAt, sent.Add(progressEvery))
		}
	case leaseLost(err):
		heap.Remove(&b.h, k.idx)
		k.lose(errLost{why: err.Error()})
		b.mu.Unlock()
		return
	case k.ctx.Err() != nil:
		heap.Remove(&b.h, k.idx)
		b.mu.Unlock()
		return
	default:
		// Try again soon; the deadline ends the lease if this goes on.
		retry = true
		k.beatAt = time.Now().Add(k.every / 2)
	}
	k.due = earlier(k.beatAt, k.deadline)
	deadline := k.deadline
	heap.Fix(&b.h, k.idx)
	first := b.h[0] == k
	b.mu.Unlock()
	if first {
		b.signal()
	}
	if retry {
		k.lg.Warn("heartbeat failed; retrying", "err", err)
		return
	}
	k.lg.Debug("heartbeat: lease extended", "lease_expiry", exp, "local_deadline", deadline)
}

// report makes r the lease's pending progress report and brings the next
// heartbeat forward to carry it: to now, or to a second after the last one
// (progressEvery), so that a handler reporting often costs at most a
// heartbeat a second. A report the same as the one pending, or as the last
// one sent, changes nothing.
func (k *keeper) report(r client.Progress) {
	b := k.b
	b.mu.Lock()
	if k.stopped || k.idx < 0 || k.pending != nil && *k.pending == r || k.pending == nil && k.hasSent && k.sent == r {
		b.mu.Unlock()
		return
	}
	k.pending = &r
	first := false
	if !k.inflight {
		at := time.Now()
		if !k.lastBeat.IsZero() {
			at = later(at, k.lastBeat.Add(progressEvery))
		}
		if at.Before(k.beatAt) {
			k.beatAt = at
			k.due = earlier(k.beatAt, k.deadline)
			heap.Fix(&b.h, k.idx)
			first = b.h[0] == k
		}
	}
	b.mu.Unlock()
	if first {
		b.signal()
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keeperHeap orders keepers by their next event (container/heap).
type keeperHeap []*keeper

func (h keeperHeap) Len() int           { return len(h) }
func (h keeperHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h keeperHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *keeperHeap) Push(x any) {
	k := x.(*keeper)
	k.idx = len(*h)
	*h = append(*h, k)
}
func (h *keeperHeap) Pop() any {
	old := *h
	n := len(old)
	k := old[n-1]
	old[n-1] = nil
	k.idx = -1
	*h = old[:n-1]
	return k
}
