package coordinator

import "github.com/tenurehq/tenure/internal/state"

// Observer is told what a coordinator decided while it serves, for metrics
// (package metrics implements it). Its methods run with the coordinator's
// mutex held, on the path of every request: they must be cheap, must not
// block and must not call back into the coordinator. Config.Observer nil
// means none.
type Observer interface {
	// Applied is called once for every record written and applied while
	// serving, after the apply, never for the records replayed at open. t
	// is the task the record touched as the record left it, nil for a
	// record about no task (Fence, TasksPurgedRange) or one that dropped it. An
	// observer ignores record types it does not know.
	Applied(r state.Record, t *state.Task)
	// Refused is called once for every call of action (start, heartbeat,
	// commit, complete, fail, snooze) by a lease that was t's and lost its
	// authority: a duplicate execution prevented. It is called whether or
	// not a TaskCancelled is written for the refusal (one is written once
	// per lease and action; repeats are answered from memory). A lease id
	// t never had is refused without a call.
	Refused(t *state.Task, action state.Action)
}
