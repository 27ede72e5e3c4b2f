package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// errLost is the cause of a task context ended because the lease was lost.
type errLost struct{ why string }

func (e errLost) Error() string { return "worker: lease lost: " + e.why }

// keeper heartbeats one lease from a goroutine of its own, from keepLease
// until stop, and ends the task's context (lose) when the lease is lost.
type keeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the heartbeats and waits until no heartbeat is in flight, so a
// later Complete or Fail is the lease's last call. It may be called more
// than once.
func (k *keeper) stop() {
	k.cancel()
	<-k.done
}

// margin is how long before the known expiry the worker gives a lease up:
// a tenth of the window, at most 2s, so network delay cannot make it act on
// a lease the server already expired.
func margin(window time.Duration) time.Duration { return min(window/10, 2*time.Second) }

// keepLease starts heartbeating t's lease every HeartbeatEvery × window.
// The lease counts as lost, and ctx is ended through lose, when a heartbeat
// is refused, or when the local deadline passes without a successful
// heartbeat. The local deadline is measured on this process's monotonic
// clock: from the lease's arrival, the lease's remaining time (by the
// wall-clock expiry, never more than one window) less the margin; after a
// heartbeat sent at s, min(s + window, the new expiry) less the margin,
// because the server extends from its own now, which is after s.
func (w *Worker) keepLease(ctx context.Context, lose context.CancelCauseFunc, t *Task, received time.Time, lg *slog.Logger) *keeper {
	hctx, cancel := context.WithCancel(ctx)
	k := &keeper{cancel: cancel, done: make(chan struct{})}
	window := t.ExecutionWindow
	if window <= 0 {
		window = time.Until(t.LeaseExpiry)
	}
	every := max(time.Duration(float64(window)*w.opts.HeartbeatEvery), time.Millisecond)
	safety := margin(window)
	deadline := received.Add(min(time.Until(t.LeaseExpiry), window) - safety)
	go func() {
		defer close(k.done)
		beat := time.NewTimer(every)
		defer beat.Stop()
		expire := time.NewTimer(time.Until(deadline))
		defer expire.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-expire.C:
				lose(errLost{why: fmt.Sprintf("no successful heartbeat before the lease's expiry (less a %v safety margin)", safety)})
				return
			case <-beat.C:
			}
			sent := time.Now()
			cctx, cancelCall := context.WithDeadline(hctx, deadline)
			exp, err := w.c.Heartbeat(cctx, t.ID, t.LeaseID)
			cancelCall()
			switch {
			case err == nil:
				deadline = sent.Add(min(window, exp.Sub(sent)) - safety)
				expire.Reset(time.Until(deadline))
				beat.Reset(every)
			case leaseLost(err):
				lose(errLost{why: err.Error()})
				return
			case hctx.Err() != nil:
				return
			default:
				// Try again soon; the expire timer ends the lease if this
				// goes on.
				lg.Warn("heartbeat failed; retrying", "err", err)
				beat.Reset(every / 2)
			}
		}
	}()
	return k
}
