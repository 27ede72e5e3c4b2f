package state

import (
	"slices"
	"strings"
	"testing"
)

// dependent is created(id) depending on deps.
func dependent(id string, deps ...string) *TaskCreated {
	r := created(id)
	r.DependsOn = deps
	return r
}

// done is a lease of id and its completion at at.
func done(id string, at Time) []Record {
	return []Record{granted(id, "l-"+id, 1, at-sec), &TaskCompleted{TaskID: id, LeaseID: "l-" + id, Result: []byte("r-" + id), At: at}}
}

// failedFor is a lease of id and its permanent failure at at.
func failedFor(id string, at Time) []Record {
	return []Record{granted(id, "l-"+id, 1, at-sec), &TaskFailed{TaskID: id, LeaseID: "l-" + id, Reason: "boom", Permanent: true, At: at}}
}

func states(t *testing.T, s *State, want map[string]TaskState) {
	t.Helper()
	for id, st := range want {
		if got := s.Task(id); got == nil || got.State != st {
			t.Fatalf("task %s is %v, want %s", id, got, st)
		}
	}
}

func apply(t *testing.T, s *State, recs ...Record) {
	t.Helper()
	runOn(t, s, recs...)
}

// TestJoinReleasedOnceAfterAll: in a diamond a → (b, c) → d, d is BLOCKED
// and unleasable until both b and c completed, and is released by the last
// of them, whose record its history names once.
func TestJoinReleasedOnceAfterAll(t *testing.T) {
	s := run(t, created("a"), dependent("b", "a"), dependent("c", "a"), dependent("d", "b", "c"))
	states(t, s, map[string]TaskState{"a": Waiting, "b": Blocked, "c": Blocked, "d": Blocked})
	if err := s.Apply(s.LastLSN()+1, granted("b", "x", 1, 2*sec)); err == nil || !strings.Contains(err.Error(), "BLOCKED") {
		t.Fatalf("a lease of a BLOCKED task applied: %v", err)
	}
	apply(t, s, done("a", 3*sec)...)
	states(t, s, map[string]TaskState{"b": Waiting, "c": Waiting, "d": Blocked})
	if got := s.Task("b").NotBefore; got != 3*sec {
		t.Fatalf("b is due from %s, want its release at %s", got, 3*sec)
	}
	if got := s.Graph(s.Task("d")).BlockedOn(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("d is blocked on %v", got)
	}
	apply(t, s, done("c", 5*sec)...)
	states(t, s, map[string]TaskState{"d": Blocked})
	apply(t, s, done("b", 7*sec)...)
	states(t, s, map[string]TaskState{"d": Waiting})
	last := s.LastLSN()
	if h := s.Task("d").LSNs(); len(h) != 2 || h[1] != last {
		t.Fatalf("d's history %v, want its creation and the completion at %d", h, last)
	}
	if got := s.Schedulable(QueueKey{"default", "q"}, 8*sec, 10); len(got) != 1 || got[0].ID != "d" {
		t.Fatalf("schedulable %v, want d alone", got)
	}
}

// TestDependencyFailure: under the default policy a failed dependency
// ends its dependents DEAD, and theirs in turn; under RUN the dependent
// runs once every dependency has ended.
func TestDependencyFailure(t *testing.T) {
	anyway := dependent("r", "a")
	anyway.OnDependencyFailure = DepRun
	s := run(t, created("a"), created("b"), dependent("d", "a", "b"), dependent("e", "d"), anyway)
	apply(t, s, failedFor("a", 3*sec)...)
	states(t, s, map[string]TaskState{"d": Dead, "e": Dead, "r": Waiting, "b": Waiting})
	if got := s.Task("d").FailureReason; got != "dependency_failed: task a is FAILED" {
		t.Fatalf("d's failure reason %q", got)
	}
	if got := s.Task("e").FailureReason; got != "dependency_failed: task d is DEAD" {
		t.Fatalf("e's failure reason %q", got)
	}
	if got := s.Graph(s.Task("r")).Edges; got[0].State != EdgeFailed {
		t.Fatalf("r's edge %v", got)
	}
	// b ending later touches nothing: d's edge to it stays pending.
	apply(t, s, done("b", 5*sec)...)
	states(t, s, map[string]TaskState{"d": Dead})
}

// TestDependencyEndedBeforeCreation: an edge to a task that has ended is
// resolved at creation.
func TestDependencyEndedBeforeCreation(t *testing.T) {
	s := run(t, created("a"), created("f"))
	apply(t, s, done("a", 2*sec)...)
	apply(t, s, failedFor("f", 3*sec)...)
	runAnyway := dependent("r", "f")
	runAnyway.OnDependencyFailure = DepRun
	apply(t, s, dependent("x", "a"), dependent("y", "f"), runAnyway, dependent("z", "a", "f"))
	states(t, s, map[string]TaskState{"x": Waiting, "y": Dead, "r": Waiting, "z": Dead})
}

// TestTasksSubmittedAllOrNothing: a record that creates several tasks
// creates all of them or, when one does not apply, none; a task may depend
// only on tasks before it.
func TestTasksSubmittedAllOrNothing(t *testing.T) {
	s := run(t, created("old"))
	wf := &TasksSubmitted{Workflow: "w1", At: 2 * sec, Tasks: []TaskCreated{*created("a"), *dependent("b", "a", "old"), *dependent("c", "b")}}
	apply(t, s, wf)
	states(t, s, map[string]TaskState{"a": Waiting, "b": Blocked, "c": Blocked})
	w := s.Workflow(WorkflowKey{"default", "w1"})
	if w == nil || w.Len() != 3 || w.Final() {
		t.Fatalf("workflow %+v", w)
	}
	for i, id := range []string{"a", "b", "c"} {
		if k := s.OrderKey(s.Task(id)); k.LSN != s.LastLSN() || k.Seq != uint16(i) {
			t.Fatalf("task %s has order key %+v", id, k)
		}
	}
	for name, bad := range map[string][]TaskCreated{
		"forward reference": {*dependent("p", "q"), *created("q")},
		"duplicate id":      {*created("p"), *created("p")},
		"other namespace":   {*created("p"), func() TaskCreated { r := created("q"); r.Namespace = "other"; return *r }()},
		"self":              {*dependent("p", "p")},
	} {
		before := s.Len()
		err := s.Apply(s.LastLSN()+1, &TasksSubmitted{Workflow: "w2", Tasks: bad, At: 3 * sec})
		if err == nil || s.Len() != before || s.Workflow(WorkflowKey{"default", "w2"}) != nil {
			t.Fatalf("%s: applied (%v), %d tasks from %d", name, err, s.Len(), before)
		}
	}
}

// TestSpawn: a commit's spawn creates its tasks in the same record, in
// the parent's workflow; a child that depends on a COMMITTED parent waits
// for its completion, on a completed one it is released at once; a
// finalisation spawns nothing.
func TestSpawn(t *testing.T) {
	s := run(t, &TasksSubmitted{Workflow: "w", At: sec, Tasks: []TaskCreated{*created("p"), *created("q")}})
	apply(t, s, granted("p", "lp", 1, 2*sec), &TaskCommitted{TaskID: "p", LeaseID: "lp", At: 3 * sec,
		Spawn: []TaskCreated{*created("c1"), *created("c2"), *dependent("k", "c1", "c2", "p")}})
	states(t, s, map[string]TaskState{"p": Committed, "c1": Waiting, "k": Blocked})
	w := s.Workflow(WorkflowKey{"default", "w"})
	if w.Len() != 5 || s.Graph(s.Task("k")).Parent != "p" || s.Graph(s.Task("k")).Workflow != "w" {
		t.Fatalf("workflow of %d tasks, k %+v", w.Len(), s.Graph(s.Task("k")))
	}
	if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: "p", LeaseID: "lp", At: 4 * sec, Spawn: []TaskCreated{*created("c3")}}); err == nil {
		t.Fatal("a finalising completion spawned")
	}
	apply(t, s, &TaskCompleted{TaskID: "p", LeaseID: "lp", At: 4 * sec})
	apply(t, s, done("c1", 5*sec)...)
	apply(t, s, done("c2", 6*sec)...)
	states(t, s, map[string]TaskState{"k": Waiting})
	apply(t, s, granted("q", "lq", 1, 7*sec), &TaskCompleted{TaskID: "q", LeaseID: "lq", At: 8 * sec,
		Spawn: []TaskCreated{*dependent("after-q", "q")}})
	states(t, s, map[string]TaskState{"after-q": Waiting})
}

// TestRetryWithDependencies: a task a failed dependency ended is retried
// only once the dependency can run again, and is BLOCKED on it then.
func TestRetryWithDependencies(t *testing.T) {
	s := run(t, created("a"), dependent("d", "a"))
	apply(t, s, failedFor("a", 2*sec)...)
	states(t, s, map[string]TaskState{"d": Dead})
	if why := s.RetryRefusal(s.Task("d")); !strings.Contains(why, "retry it first") {
		t.Fatalf("retry refusal %q", why)
	}
	if err := s.Apply(s.LastLSN()+1, &TaskRetried{TaskID: "d", At: 3 * sec}); err == nil {
		t.Fatal("a task whose dependency is FAILED was retried")
	}
	apply(t, s, &TaskRetried{TaskID: "a", At: 3 * sec}, &TaskRetried{TaskID: "d", At: 3 * sec})
	states(t, s, map[string]TaskState{"a": Waiting, "d": Blocked})
	apply(t, s, granted("a", "l2", 2, 4*sec), &TaskCompleted{TaskID: "a", LeaseID: "l2", At: 5 * sec})
	states(t, s, map[string]TaskState{"d": Waiting})
}

// TestBlockedKillDeadlineAndPurge: a BLOCKED task can be killed or fail at
// its deadline (ending its dependents), and a workflow goes with its last
// task.
func TestBlockedKillDeadlineAndPurge(t *testing.T) {
	timed := dependent("t", "a")
	timed.Deadline = 5 * sec
	s := run(t, &TasksSubmitted{Workflow: "w", At: sec, Tasks: []TaskCreated{*created("a"), *timed, *dependent("u", "t"), *dependent("v", "a")}})
	apply(t, s, &TaskDeadlineExceeded{TaskID: "t", At: 5 * sec}, &TaskDead{TaskID: "v", At: 5 * sec, Reason: "no"})
	states(t, s, map[string]TaskState{"t": Failed, "u": Dead, "v": Dead, "a": Waiting})
	apply(t, s, done("a", 6*sec)...)
	w := s.Workflow(WorkflowKey{"default", "w"})
	if !w.Final() || w.Counts()[Dead] != 2 {
		t.Fatalf("workflow counts %v", w.Counts())
	}
	apply(t, s, &TasksPurged{Before: 10 * sec, At: 10 * sec})
	if s.Workflow(WorkflowKey{"default", "w"}) != nil || len(s.graph) != 0 {
		t.Fatalf("the workflow or %d nodes outlived their tasks", len(s.graph))
	}
}
