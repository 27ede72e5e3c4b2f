package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/tenurehq/tenure/sdk/client"
)

// SnoozeError, returned by a handler (or wrapped in what it returns), ends
// the attempt without using it up: the task runs again after Delay, and
// the next attempt has the same number, with the same budget of retries
// and the same backoff. Snooze makes one. Use it for work that cannot run
// yet: a rate limit, an upstream not ready, a poll that found nothing.
//
// The server bounds snoozes (by default 1000 per task, each at most 24h,
// and not past the task's deadline); a snooze it refuses fails the
// attempt instead, as an error would, with the refusal as its reason.
type SnoozeError struct {
	// Delay is how long the task waits before it may run again.
	Delay time.Duration
	// Reason says why, for people: the snoozed execution keeps it ("" for
	// none).
	Reason string
}

func (e *SnoozeError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("worker: snoozed for %v: %s", e.Delay, e.Reason)
	}
	return fmt.Sprintf("worker: snoozed for %v", e.Delay)
}

// Snooze returns the error that, returned by a handler, runs the task again
// after d without using up an attempt (see SnoozeError):
//
//	if !ready {
//		return nil, worker.Snooze(30 * time.Second)
//	}
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// snooze reports the attempt snoozed (the keeper stopped): the task waits
// for its delay. A snooze the server refuses (the task snoozed too often,
// or a deadline too near) fails the attempt instead.
func (w *Worker) snooze(ctx context.Context, a *attempt, se *SnoozeError) Finish {
	t, lg := &a.task, &a.lg
	w.finishing(a)
	rctx, cancel := reportCtx(ctx)
	defer cancel()
	res, err := w.c.Snooze(rctx, client.SnoozeRequest{TaskID: t.ID, LeaseID: t.LeaseID, Delay: max(se.Delay, 0), Reason: cut(se.Reason)})
	switch {
	case err == nil:
		lg.Info("task snoozed", "until", res.NotBefore, "reason", se.Reason)
		return w.finished(a, Finish{Outcome: OutcomeSnoozed, RetryAt: res.NotBefore})
	case errors.Is(err, client.ErrWrongState):
		cause := fmt.Errorf("the server refused the snooze: %w", err)
		fres, ferr := w.c.Fail(rctx, client.FailRequest{TaskID: t.ID, LeaseID: t.LeaseID, Reason: reason(cause)})
		lg.Warn("snooze refused; the attempt failed instead", "err", err, "fail_err", ferr)
		return w.failed(a, cause, fres, ferr)
	case leaseLost(err):
		lg.Warn("snooze refused: the lease was lost", "err", err)
		return w.finished(a, Finish{Outcome: OutcomeLost, Err: err})
	default:
		lg.Error("reporting the snooze failed; the lease will expire and the task be retried", "err", err)
		return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: err})
	}
}

// Progress is what a handler reports about the attempt it runs
// (ReportProgress): a short message, a share of the work done, or both.
type Progress struct {
	// Message says where the work is ("copying part 3 of 8"). At most 256
	// bytes (the server's default limit).
	Message string
	// Done of Total is the share of the work done, shown as a percentage;
	// Total 0 shows none.
	Done, Total int64
}

// maxProgressBytes is the server's default limit on a progress message.
const maxProgressBytes = 256

// progressEvery is the least time between two heartbeats that a change of
// progress makes early: a handler may report as often as it likes, and
// the server's log gets at most about one record a second per task.
const progressEvery = time.Second

// ReportProgress reports the progress of the attempt that ctx, a handler's
// context, belongs to. It returns at once: the report goes with the lease's
// next heartbeat, which a change of progress brings forward (at most one
// per second), so that the task shows it soon (GetTask, `tenure task get`,
// the dashboard) while the attempt runs. A report the same as the last one
// sent costs nothing. The error says what is wrong with p, or that ctx is
// not a handler's.
func ReportProgress(ctx context.Context, p Progress) error {
	k, _ := ctx.Value(keeperKey{}).(*keeper)
	if k == nil {
		return errors.New("worker: ReportProgress: ctx is not the context of a running handler; pass the handler's ctx")
	}
	switch {
	case len(p.Message) > maxProgressBytes:
		return fmt.Errorf("worker: ReportProgress: the message is %d bytes; the limit is %d", len(p.Message), maxProgressBytes)
	case !utf8.ValidString(p.Message):
		return errors.New("worker: ReportProgress: the message is not valid UTF-8")
	case p.Total < 0 || p.Done < 0 || p.Done > p.Total:
		return fmt.Errorf("worker: ReportProgress: Done %d of Total %d: want 0 <= Done <= Total (Total 0 for no share)", p.Done, p.Total)
	}
	r := client.Progress{Message: p.Message}
	if p.Total > 0 {
		r.Percent, r.HasPercent = uint32(float64(p.Done)*100/float64(p.Total)), true
	}
	k.report(r)
	return nil
}

// Spawn adds tasks to what the attempt that ctx, a handler's context,
// belongs to spawns when it commits: children, and continuations that
// depend on them (DependsOn naming their RequestIDs, task ids, or this
// task). They go with the attempt's Commit (or its Complete, for a
// handler without effects) and are created only if that commit wins, in
// the same record (docs/guides/workflows.md): a handler that fails,
// snoozes or loses its lease spawns nothing. A spawned task without a
// Namespace is in the task's. The error says that ctx is not a handler's.
func Spawn(ctx context.Context, tasks ...client.SubmitRequest) error {
	k, _ := ctx.Value(keeperKey{}).(*keeper)
	if k == nil {
		return errors.New("worker: Spawn: ctx is not the context of a running handler; pass the handler's ctx")
	}
	k.b.mu.Lock()
	k.spawn = append(k.spawn, tasks...)
	k.b.mu.Unlock()
	return nil
}

// takeSpawn returns what the handler asked to spawn, and forgets it.
func (k *keeper) takeSpawn() []client.SubmitRequest {
	if k.b == nil {
		return nil
	}
	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	s := k.spawn
	k.spawn = nil
	return s
}

// keeperKey is the context key of a running handler's keeper.
type keeperKey struct{}

// handlerCtx is a handler's context: the task's, with its keeper as the
// value of keeperKey.
type handlerCtx struct {
	context.Context
	k *keeper
}

func (c *handlerCtx) Value(key any) any {
	if key == (keeperKey{}) {
		return c.k
	}
	return c.Context.Value(key)
}
