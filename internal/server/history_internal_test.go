package server

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/state"
)

// TestEveryTaskRecordHasAHistoryLine: every record type the statetest
// generator makes that names a task (and so is in the task's history) has
// a line in the API's task history: its type's name, its time, a detail
// saying what it did, and who asked where the record says.
func TestEveryTaskRecordHasAHistoryLine(t *testing.T) {
	t.Parallel()
	names := func(r state.Record) bool { return r.Task() != "" }
	seen := firstOfEachType(t, 50, names, func(name string, r state.Record) {
		r = askedBy(r)
		e := historyEntry(coordinator.HistoryEntry{LSN: 7, Record: r})
		if e.Type != name || e.Lsn != 7 {
			t.Errorf("the history line of a %s says type %q, LSN %d", name, e.Type, e.Lsn)
		}
		if e.Detail == "" || e.At == nil {
			t.Errorf("a %s names a task, so it is in the task's history, but its line there has no detail or no time: "+
				"add a case for *state.%s to lifeLine or endLine (historyEntry, internal/server/history.go) that sets At and says what it did in Detail", name, reflect.TypeOf(r).Elem().Name())
		}
		if by, ok := byOf(r); ok && e.RequestedBy != by {
			t.Errorf("the history line of a %s by %q says requested_by %q: set RequestedBy from its By in its case of lifeLine or endLine (internal/server/history.go)", name, by, e.RequestedBy)
		}
	})
	if len(seen) == 0 {
		t.Fatal("the generator made no record that names a task")
	}
}

// TestHistoryOfRecordsAboutOthers: a task's history lines for records that
// name other tasks say what they did to it: created it in a batch or a
// spawn, or released (or ended) it as a dependency ended.
func TestHistoryOfRecordsAboutOthers(t *testing.T) {
	t.Parallel()
	b := state.TaskCreated{TaskID: "b", Namespace: "n", Queue: "q", DependsOn: []string{"a"}, By: "alice", CreatedAt: 5}
	for _, c := range []struct {
		r    state.Record
		typ  string
		says []string
	}{
		{&state.TasksSubmitted{Workflow: "w", Tasks: []state.TaskCreated{{TaskID: "a"}, b}, By: "alice", At: 5}, "TasksSubmitted",
			[]string{"submitted in workflow w (a batch of 2)", "queue n/q", "depends on a"}},
		{&state.TaskCompleted{TaskID: "p", Spawn: []state.TaskCreated{b}, By: "alice", At: 5}, "TaskCompleted",
			[]string{"spawned by the completion of task p", "depends on a"}},
		{&state.TaskCompleted{TaskID: "a", By: "alice", At: 5}, "TaskCompleted",
			[]string{"task a, which it depended on", "completed", "released it"}},
		{&state.WorkflowCancelled{Namespace: "n", Workflow: "w", Reason: "wrong input", By: "alice", At: 5}, "WorkflowCancelled",
			[]string{"workflow w cancelled (asked by alice): wrong input", "ended DEAD"}},
		{&state.WorkflowRetried{Namespace: "n", Workflow: "w", By: "alice", At: 5}, "WorkflowRetried",
			[]string{"workflow w retried (asked by alice)", "waits again"}},
	} {
		e := historyEntryOf("b", coordinator.HistoryEntry{LSN: 9, Record: c.r})
		if e.Type != c.typ || e.Lsn != 9 || e.At == nil || e.RequestedBy != "alice" || e.LeaseId != "" {
			t.Errorf("%s: %+v", c.typ, e)
		}
		for _, s := range c.says {
			if !strings.Contains(e.Detail, s) {
				t.Errorf("%s: detail %q does not say %q", c.typ, e.Detail, s)
			}
		}
	}
}
