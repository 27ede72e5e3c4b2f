package coordinator

// The coordinator's side of the linearizability model: the model itself
// (one task's state machine for porcupine, the recorder, the resolution
// of calls that got no answer) is internal/lincheck, shared with
// e2e/linearizability_test.go. Here the coordinator's answers and
// final state are converted to its types.

import (
	"errors"
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tenurehq/tenure/internal/lincheck"
	"github.com/tenurehq/tenure/internal/state"
)

// errKind maps a coordinator error to its kind in an output; ok is false
// for an error after which the outcome is unknown (unavailable, ctx).
func errKind(err error) (kind string, ok bool) {
	switch {
	case err == nil:
		return "", true
	case errors.Is(err, ErrNotFound):
		return lincheck.NotFound, true
	case errors.Is(err, ErrLeaseLost):
		return lincheck.LeaseLost, true
	case errors.Is(err, ErrAlreadyCommitted):
		return lincheck.AlreadyCommitted, true
	case errors.Is(err, ErrWrongState):
		return lincheck.WrongState, true
	}
	return "", false
}

// getOutput is the output of a Get that returned t.
func getOutput(t *state.Task) lincheck.Out {
	out := lincheck.Out{State: t.State.String(), Attempt: t.Attempt, CommittedBy: t.CommittedBy, Result: string(t.Result)}
	if cur := t.CurrentLease(); cur != nil {
		out.CurLease = cur.LeaseID
	}
	return out
}

// resolvePending resolves the calls that got no answer from the final
// state (lincheck.Resolve), converting the coordinator's tasks.
func resolvePending(pending []porcupine.Operation, final []*state.Task) []porcupine.Operation {
	tasks := make([]lincheck.Task, 0, len(final))
	for _, t := range final {
		lt := lincheck.Task{ID: t.ID, RequestID: t.RequestID, Payload: string(t.Payload), State: t.State.String()}
		for _, e := range t.Executions {
			status := ""
			switch e.Status {
			case state.ExecDone:
				status = lincheck.ExecDone
			case state.ExecAborted:
				status = lincheck.ExecAborted
			case state.ExecSnoozed:
				status = lincheck.ExecSnoozed
			}
			lt.Executions = append(lt.Executions, lincheck.Execution{LeaseID: e.LeaseID, WorkerID: e.WorkerID, Attempt: e.Attempt,
				Committed: t.CommittedBy != "" && t.CommittedBy == e.LeaseID, Finalize: e.Finalize, Status: status, Reason: e.Reason})
		}
		tasks = append(tasks, lt)
	}
	return lincheck.Resolve(pending, tasks)
}

// checkHistory checks ops with porcupine. On a violation it returns an
// error that shows the first task whose operations are not linearizable
// and, with visualise, names a temporary file holding porcupine's
// visualisation of the history.
func checkHistory(ops []porcupine.Operation, timeout time.Duration, visualise bool) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(lincheck.Model, ops, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	msg := fmt.Sprintf("porcupine: history of %d operations is %s", len(ops), res)
	if visualise {
		if name := lincheck.Visualise(info, "tenure-linearizability-*.html"); name != "" {
			msg += "; visualisation: " + name
		}
	}
	if res == porcupine.Illegal {
		msg += "\n" + lincheck.Explain(ops)
	}
	return res, errors.New(msg)
}
