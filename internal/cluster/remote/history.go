package remote

import (
	"fmt"
	"strings"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
)

// history rebuilds the records of a task's history from the API's summary
// of each (package server's historyEntry) and from the task t, read after
// the history, for the data a summary only describes.
func history(entries []*tenurev1.HistoryEntry, t *state.Task) ([]coordinator.HistoryEntry, error) {
	out := make([]coordinator.HistoryEntry, len(entries))
	committed := false
	for i, e := range entries {
		r, err := rebuild(e, t, committed)
		if err != nil {
			return nil, fmt.Errorf("history entry %d (lsn %d, %s) of task %q: %w", i, e.GetLsn(), e.GetType(), t.ID, err)
		}
		if _, ok := r.(*state.TaskCommitted); ok {
			committed = true
		}
		out[i] = coordinator.HistoryEntry{LSN: e.GetLsn(), Record: r}
	}
	return out, nil
}

// rebuild rebuilds one record. committed says whether the task committed
// before it.
func rebuild(e *tenurev1.HistoryEntry, t *state.Task, committed bool) (state.Record, error) {
	id, at, lease, detail := t.ID, stateTime(e.GetAt()), e.GetLeaseId(), e.GetDetail()
	switch e.GetType() {
	case record.TypeTaskCreated.String():
		// "queue NS/Q, N-byte payload, window W, up to K attempts[, not
		// before T]": the rest is the task's, which never changes.
		r := &state.TaskCreated{
			TaskID:          id,
			Namespace:       t.Namespace,
			Queue:           t.Queue,
			Payload:         t.Payload,
			ExecutionWindow: t.Window,
			Retry:           t.Retry,
			RequestID:       t.RequestID,
			Priority:        t.Priority,
			CreatedAt:       at,
		}
		if _, nb, ok := strings.Cut(detail, ", not before "); ok {
			var err error
			if r.NotBefore, err = parseTime(nb); err != nil {
				return nil, err
			}
		}
		return r, nil
	case record.TypeLeaseGranted.String():
		exp, err := timeAfter(detail, "lease until ")
		if err != nil {
			return nil, err
		}
		return &state.LeaseGranted{TaskID: id, LeaseID: lease, WorkerID: e.GetWorkerId(), Attempt: e.GetAttempt(), LeaseExpiry: exp, GrantedAt: at}, nil
	case record.TypeLeaseExtended.String():
		exp, err := timeAfter(detail, "lease extended until ")
		if err != nil {
			return nil, err
		}
		return &state.LeaseExtended{TaskID: id, LeaseID: lease, NewLeaseExpiry: exp, At: at}, nil
	case record.TypeLeaseExpired.String():
		r := &state.LeaseExpired{TaskID: id, LeaseID: lease, At: at}
		if _, retry, ok := strings.Cut(detail, "; retry not before "); ok {
			var err error
			if r.RetryAt, err = parseTime(retry); err != nil {
				return nil, err
			}
		}
		return r, nil
	case record.TypeExecutionStarted.String():
		return &state.ExecutionStarted{TaskID: id, LeaseID: lease, At: at}, nil
	case record.TypeTaskCommitted.String():
		// Only one commit ever succeeds: its result is the task's.
		return &state.TaskCommitted{TaskID: id, LeaseID: lease, Result: t.Result, At: at}, nil
	case record.TypeTaskCompleted.String():
		r := &state.TaskCompleted{TaskID: id, LeaseID: lease, At: at}
		if !committed {
			// Commit and done in one record: the task's result. A
			// completion that finalised an earlier commit passed a result
			// the API does not carry.
			r.Result = t.Result
		}
		return r, nil
	case record.TypeTaskFailed.String():
		return failed(id, lease, at, detail, t)
	case record.TypeTaskCancelled.String():
		reason, ok := strings.CutPrefix(detail, "rejected: ")
		if !ok {
			return nil, fmt.Errorf("detail %q does not give the reason", detail)
		}
		return &state.TaskCancelled{TaskID: id, LeaseID: lease, Reason: reason, At: at, Action: refusedAction(reason)}, nil
	case record.TypeTaskDead.String():
		reason, ok := strings.CutPrefix(detail, "killed: ")
		if !ok {
			return nil, fmt.Errorf("detail %q does not give the reason", detail)
		}
		return &state.TaskDead{TaskID: id, Reason: reason, At: at}, nil
	}
	return nil, fmt.Errorf("record type %q is not one of a task's", e.GetType())
}

// refusedAction is the action of a TaskCancelled, which the API's summary
// gives only as the first word of the reason the coordinator writes
// ("heartbeat by a lease without authority"). A record written before
// records named their action has a reason of the same shape, and is
// rebuilt with the action its reason names.
func refusedAction(reason string) state.Action {
	word, _, _ := strings.Cut(reason, " ")
	a, _ := state.ParseAction(word)
	return a
}

// failed rebuilds a TaskFailed from "failed: REASON" followed by
// " (permanent)", "; retry not before T" or nothing. The reason is the
// one the failed execution keeps, so a reason that itself ends like a
// suffix is not mistaken for one.
func failed(id, lease string, at state.Time, detail string, t *state.Task) (state.Record, error) {
	rest, ok := strings.CutPrefix(detail, "failed: ")
	if !ok {
		return nil, fmt.Errorf("detail %q does not give the reason", detail)
	}
	r := &state.TaskFailed{TaskID: id, LeaseID: lease, At: at}
	suffix := ""
	known := false
	for _, x := range t.Executions {
		if x.LeaseID == lease && x.Status == state.ExecAborted && strings.HasPrefix(rest, x.Reason) {
			r.Reason, suffix, known = x.Reason, rest[len(x.Reason):], true
			break
		}
	}
	if !known {
		r.Reason, suffix = rest, ""
		if reason, ok := strings.CutSuffix(rest, " (permanent)"); ok {
			r.Reason, suffix = reason, " (permanent)"
		} else if i := strings.LastIndex(rest, "; retry not before "); i >= 0 {
			if _, err := parseTime(rest[i+len("; retry not before "):]); err == nil {
				r.Reason, suffix = rest[:i], rest[i:]
			}
		}
	}
	switch {
	case suffix == "":
	case suffix == " (permanent)":
		r.Permanent = true
	case strings.HasPrefix(suffix, "; retry not before "):
		var err error
		if r.RetryAt, err = parseTime(strings.TrimPrefix(suffix, "; retry not before ")); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("detail %q does not end as a failure's does", detail)
	}
	return r, nil
}

// timeAfter parses the time that follows prefix in detail.
func timeAfter(detail, prefix string) (state.Time, error) {
	s, ok := strings.CutPrefix(detail, prefix)
	if !ok {
		return 0, fmt.Errorf("detail %q does not start with %q", detail, prefix)
	}
	return parseTime(s)
}

// parseTime inverts state.Time.String.
func parseTime(s string) (state.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q in the detail: %w", s, err)
	}
	if t.IsZero() {
		return 0, nil
	}
	return state.TimeOf(t), nil
}
