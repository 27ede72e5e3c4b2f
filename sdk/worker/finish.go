package worker

import (
	"errors"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// Outcome is how one leased attempt ended for this worker, as Finish
// says.
type Outcome uint8

const (
	// OutcomeCompleted: the task completed (with this attempt's result, or
	// on a finalisation lease with the committed one).
	OutcomeCompleted Outcome = iota + 1
	// OutcomeRetrying: the attempt failed and the server scheduled a retry
	// (Finish.RetryAt).
	OutcomeRetrying
	// OutcomeFailed: the task failed for good: the handler's error was
	// Permanent, or this was its last attempt.
	OutcomeFailed
	// OutcomeLost: the lease was lost (it expired, the task was killed,
	// another attempt committed) before this worker's report landed;
	// nothing of this attempt counts.
	OutcomeLost
	// OutcomeUnreported: the report to the server failed (or, with
	// Options.Effects, the effects did); the lease expires and the server
	// decides what follows.
	OutcomeUnreported
	// OutcomeSnoozed: the handler snoozed the task (Snooze): it runs again
	// at Finish.RetryAt, and this attempt did not count.
	OutcomeSnoozed
)

var outcomeNames = [...]string{"", "completed", "retrying", "failed", "lost", "unreported", "snoozed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Finish is the end of one leased attempt, as a Middleware's next answers
// it: the server's answer to the attempt's report, not a guess from the
// handler's error.
type Finish struct {
	Outcome Outcome
	// Err is why the attempt did not complete: the handler's error for
	// OutcomeRetrying and OutcomeFailed, the refusal or failed call for
	// OutcomeLost and OutcomeUnreported. Nil for OutcomeCompleted.
	Err error
	// RetryAt is when the retry may be leased (OutcomeRetrying), or when
	// the snoozed task runs again (OutcomeSnoozed).
	RetryAt time.Time
	// Took is the time from the lease's arrival to the end of the attempt's
	// report.
	Took time.Duration
}

// finished is f, the end of a's attempt, with the time it took.
func (w *Worker) finished(a *attempt, f Finish) Finish {
	f.Took = time.Since(a.received)
	return f
}

// failed is the end of an attempt whose failure the server answered with
// res (or refused with err): retried, failed for good, or not reported.
func (w *Worker) failed(a *attempt, cause error, res client.FailResult, err error) Finish {
	switch {
	case err != nil && leaseLost(err):
		return w.finished(a, Finish{Outcome: OutcomeLost, Err: err})
	case err != nil:
		return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: errors.Join(cause, err)})
	case res.State == client.TaskStateWaiting:
		return w.finished(a, Finish{Outcome: OutcomeRetrying, Err: cause, RetryAt: res.RetryAt})
	default:
		return w.finished(a, Finish{Outcome: OutcomeFailed, Err: cause})
	}
}
