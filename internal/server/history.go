package server

import (
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The API's task history (TaskService.GetTaskHistory): one line per
// record that names the task, and one for each record about others that
// created or released it (docs/design/workflows.md).

// by names who asked, for a history entry's detail.
func by(who string) string {
	if who == "" {
		return ""
	}
	return " (asked by " + who + ")"
}

// later writes the time t of a record at at as the time after it ("30s
// later"): the history's details carry no time of day of their own, so a
// reader sees each in one zone, the record's time's (its at, which a
// client shows in the reader's zone).
func later(at, t state.Time) string {
	d := t.Std().Sub(at.Std())
	switch {
	case d == 0:
		return "at once"
	case d < 0:
		return (-d).Round(time.Millisecond).String() + " earlier"
	}
	return d.Round(time.Millisecond).String() + " later"
}

// historyEntryOf is the line of task id's history for h: historyEntry for
// a record about the task, or what a record about others did to it (the
// record that created it with others, or the end of a task it depended
// on: docs/design/workflows.md).
func historyEntryOf(id string, h coordinator.HistoryEntry) *tenurev1.HistoryEntry {
	if h.Record.Task() == id {
		return historyEntry(h)
	}
	var how string
	var tasks []state.TaskCreated
	switch r := h.Record.(type) {
	case *state.TasksSubmitted:
		how, tasks = fmt.Sprintf("submitted in a batch of %d", len(r.Tasks)), r.Tasks
		if r.Workflow != "" {
			how = fmt.Sprintf("submitted in workflow %s (a batch of %d)", r.Workflow, len(r.Tasks))
		}
		if r.Parent != "" {
			how = "spawned by the commit of task " + r.Parent + ", delivered from its partition"
		}
	case *state.TaskCommitted:
		how, tasks = "spawned by the commit of task "+r.TaskID, r.Spawn
	case *state.TaskCompleted:
		how, tasks = "spawned by the completion of task "+r.TaskID, r.Spawn
	case *state.WorkflowCancelled:
		return &tenurev1.HistoryEntry{Lsn: h.LSN, Type: "WorkflowCancelled", At: ts(r.At), RequestedBy: r.By, Reason: r.Reason,
			Detail: "workflow " + r.Workflow + " cancelled" + by(r.By) + withReason(r.Reason) +
				": a task of it that had not ended ended DEAD; one depending on such a task ended by its policy"}
	case *state.WorkflowRetried:
		return &tenurev1.HistoryEntry{Lsn: h.LSN, Type: "WorkflowRetried", At: ts(r.At), RequestedBy: r.By, Reason: r.Reason,
			Detail: "workflow " + r.Workflow + " retried" + by(r.By) + withReason(r.Reason) +
				": a FAILED or DEAD task of it waits again (BLOCKED until its dependencies complete), with a fresh budget of attempts"}
	}
	for i := range tasks {
		if t := &tasks[i]; t.TaskID == id {
			line := historyEntry(coordinator.HistoryEntry{LSN: h.LSN, Record: t})
			line.Type, line.Detail = record.TypeOf(h.Record).String(), how+"; "+line.Detail+dependsOn(t.DependsOn)
			return line
		}
	}
	line := historyEntry(h)
	return &tenurev1.HistoryEntry{Lsn: h.LSN, Type: line.Type, At: line.At, RequestedBy: line.RequestedBy,
		Detail: fmt.Sprintf("task %s, which it depended on (itself or through its dependencies), ended: %s; that released it, or ended it if it failed (dependency_failed)",
			h.Record.Task(), line.Detail)}
}

// withReason is ": reason", or "" for none.
func withReason(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// dependsOn says what a new task depends on ("" for nothing).
func dependsOn(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > 5 {
		return fmt.Sprintf(", depends on %s and %d more", strings.Join(ids[:5], ", "), len(ids)-5)
	}
	return ", depends on " + strings.Join(ids, ", ")
}

// historyEntry turns a record about one task into its line in the task's
// history: its type, when it was written (At), who asked (RequestedBy,
// from its By) and what it did (Detail). The records of a task's life
// (created, leased, running, committed, fired by a schedule) have their
// case in lifeLine, the ends of an attempt or of the task in endLine.
func historyEntry(h coordinator.HistoryEntry) *tenurev1.HistoryEntry {
	e := &tenurev1.HistoryEntry{Lsn: h.LSN, Type: record.TypeOf(h.Record).String()}
	if !lifeLine(e, h.Record) {
		endLine(e, h.Record)
	}
	return e
}

// lifeLine fills e for a record of a task's life; false for another
// record.
func lifeLine(e *tenurev1.HistoryEntry, rec state.Record) bool {
	switch r := rec.(type) {
	case *state.TaskCreated:
		e.RequestedBy = r.By
		e.At = ts(r.CreatedAt)
		e.Detail = fmt.Sprintf("queue %s/%s, %d-byte payload, window %v, up to %d attempts", r.Namespace, r.Queue, len(r.Payload), r.ExecutionWindow, r.Retry.MaxAttempts)
		if r.NotBefore != 0 {
			e.Detail += ", not before " + later(r.CreatedAt, r.NotBefore)
		}
		if r.Deadline != 0 {
			e.Detail += ", deadline " + later(r.CreatedAt, r.Deadline)
		}
	case *state.LeaseGranted:
		e.RequestedBy = r.By
		e.At, e.LeaseId, e.WorkerId, e.Attempt = ts(r.GrantedAt), r.LeaseID, r.WorkerID, r.Attempt
		e.Detail = "lease until " + later(r.GrantedAt, r.LeaseExpiry)
	case *state.LeaseExtended:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "lease extended until " + later(r.At, r.NewLeaseExpiry)
		if p := r.Report; p != nil {
			e.Detail += "; progress: " + p.String()
		}
	case *state.LeaseExpired:
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "lease expired"
		if r.RetryAt != 0 {
			e.Detail += "; retry not before " + later(r.At, r.RetryAt)
		}
	case *state.DependencyResolved:
		e.At = ts(r.At)
		e.Detail = "dependency " + r.Dependency + " (a task of another partition) ended " + r.Outcome.String()
		if r.Outcome == state.EndedGone {
			e.Detail = "dependency " + r.Dependency + " (a task of another partition) no longer exists"
		}
		e.Detail += ": its edge resolved"
	case *state.ExecutionStarted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "execution started"
	case *state.TaskCommitted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = fmt.Sprintf("committed a %d-byte result", len(r.Result))
	case *state.ScheduleFired:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Detail = fmt.Sprintf("submitted by schedule %s of queue %s/%s for its tick at %s", r.Name, r.Namespace, r.Queue, r.Tick)
		if r.Outcome == state.Backfilled {
			e.Detail += " (a backfill" + by(r.By) + ")"
		}
	default:
		return false
	}
	return true
}

// endLine fills e for a record that ends an attempt or the task, or sends
// it back to wait.
func endLine(e *tenurev1.HistoryEntry, rec state.Record) {
	switch r := rec.(type) {
	case *state.TaskCompleted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "completed"
	case *state.TaskFailed:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "failed: " + r.Reason
		switch {
		case r.Permanent:
			e.Detail += " (permanent)"
		case r.RetryAt != 0:
			e.Detail += "; retry not before " + later(r.At, r.RetryAt)
		}
	case *state.TaskSnoozed:
		e.RequestedBy = r.By
		e.At, e.LeaseId, e.Reason = ts(r.At), r.LeaseID, r.Reason
		e.Detail = "snoozed, to run again " + later(r.At, r.NotBefore) + " without using up the attempt"
		if r.Reason != "" {
			e.Detail += ": " + r.Reason
		}
	case *state.TaskCancelled:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "rejected: " + r.Reason
	case *state.TaskDead:
		e.At, e.RequestedBy, e.Reason = ts(r.At), r.By, r.Reason
		e.Detail = "killed: " + r.Reason + by(r.By)
	case *state.TaskDeadlineExceeded:
		e.At = ts(r.At)
		e.Detail = "failed: its deadline passed before a commit (" + state.ReasonDeadlineExceeded + ")"
	case *state.TaskRetried:
		e.At, e.RequestedBy, e.Reason = ts(r.At), r.By, r.Reason
		e.Detail = "retried by an operator: waiting again, with a fresh budget of attempts" + by(r.By)
		if r.Reason != "" {
			e.Detail += ": " + r.Reason
		}
	}
}
