package state

import (
	"reflect"
	"strings"
	"testing"
)

func withDeadline(r *TaskCreated, d Time) *TaskCreated { r.Deadline = d; return r }

// TestDeadlineFailsWaitingTask: a WAITING task fails at its deadline with
// attempts left, leaves its queue and the deadline index, and counts as a
// failure of its queue.
func TestDeadlineFailsWaitingTask(t *testing.T) {
	s := run(t, withDeadline(created("a"), 20*sec), created("b"))
	if d, ok := s.Deadline("a"); !ok || d != 20*sec {
		t.Fatalf("Deadline(a) = %v, %v; want 20s", d, ok)
	}
	if _, ok := s.Deadline("b"); ok {
		t.Fatal("a task submitted without a deadline has one")
	}
	if d, ok := s.NextDeadline(); !ok || d != 20*sec {
		t.Fatalf("NextDeadline = %v, %v; want 20s", d, ok)
	}
	if got := s.PastDeadline(20*sec-1, 10); len(got) != 0 {
		t.Fatalf("past deadline before it: %v", got)
	}
	if got := s.PastDeadline(20*sec, 10); len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("past deadline at it: %v", got)
	}
	s = runOn(t, s, &TaskDeadlineExceeded{TaskID: "a", At: 21 * sec})
	a := s.Task("a")
	if a.State != Failed || a.FailureReason != ReasonDeadlineExceeded || !a.AttemptsLeft() {
		t.Fatalf("task %s (%q), attempts left %v; want FAILED (deadline_exceeded) with attempts left", a.State, a.FailureReason, a.AttemptsLeft())
	}
	if a.UpdatedAt != 21*sec || len(a.LSNs()) != 2 {
		t.Fatalf("updated at %v, history %v: the record must touch the task", a.UpdatedAt, a.LSNs())
	}
	if _, ok := s.Deadline("a"); ok {
		t.Fatal("a FAILED task keeps its deadline")
	}
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("NextDeadline after the only deadline was exceeded")
	}
	if got := s.Schedulable(QueueKey{"default", "q"}, 30*sec, 10); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("schedulable %v, want only b", got)
	}
	st, _ := s.Queue(QueueKey{"default", "q"}, 21*sec)
	if st.LastMinute[EventFailed] != 1 || st.Tasks[Failed] != 1 {
		t.Fatalf("queue counts %d failures and %d FAILED tasks, want 1 and 1", st.LastMinute[EventFailed], st.Tasks[Failed])
	}
}

// TestDeadlineFailsLeasedTask: a LEASED task fails at its deadline; its
// lease is aborted and dropped, so its holder has no authority left.
func TestDeadlineFailsLeasedTask(t *testing.T) {
	g := granted("a", "l1", 1, 2*sec)
	g.LeaseExpiry = 15 * sec // capped at the deadline
	s := run(t, withDeadline(created("a"), 15*sec), g, &ExecutionStarted{TaskID: "a", LeaseID: "l1", At: 3 * sec},
		&TaskDeadlineExceeded{TaskID: "a", At: 15 * sec})
	a := s.Task("a")
	if a.State != Failed || a.FailureReason != ReasonDeadlineExceeded || a.CurrentLease() != nil {
		t.Fatalf("task %s (%q), lease %v; want FAILED (deadline_exceeded) without a lease", a.State, a.FailureReason, a.CurrentLease())
	}
	e := a.Executions[0]
	if e.Status != ExecAborted || e.Reason != ReasonLeaseDeadline || e.FinishedAt != 15*sec {
		t.Fatalf("execution %s (%q) finished at %v; want ABORTED (deadline exceeded) at 15s", e.Status, e.Reason, e.FinishedAt)
	}
	if _, ok := s.NextExpiry(); ok || s.byLease("l1") != nil {
		t.Fatal("the lease is still indexed")
	}
	if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: "a", LeaseID: "l1", At: 16 * sec}); err == nil {
		t.Fatal("the aborted lease completed its task")
	}
}

// TestCommitEndsDeadline: past the commit boundary the deadline no longer
// applies: the task is finalised, by a lease granted after the deadline and
// as long as it needs.
func TestCommitEndsDeadline(t *testing.T) {
	g := granted("a", "l1", 1, 2*sec)
	g.LeaseExpiry = 5 * sec
	final := granted("a", "l2", 2, 30*sec)
	final.LeaseExpiry = 90 * sec
	s := run(t, withDeadline(created("a"), 5*sec), g,
		&TaskCommitted{TaskID: "a", LeaseID: "l1", Result: []byte("r"), At: 4 * sec})
	if _, ok := s.Deadline("a"); ok {
		t.Fatal("a COMMITTED task keeps its deadline")
	}
	s = runOn(t, s, &LeaseExpired{TaskID: "a", LeaseID: "l1", At: 5 * sec}, final,
		&TaskCompleted{TaskID: "a", LeaseID: "l2", At: 31 * sec})
	if a := s.Task("a"); a.State != Completed || string(a.Result) != "r" {
		t.Fatalf("task %s with result %q, want COMPLETED with r", a.State, a.Result)
	}
}

// TestRetryAfterDeadline: an operator's retry of a task its deadline failed
// runs it again without the deadline (which has passed).
func TestRetryAfterDeadline(t *testing.T) {
	s := run(t, withDeadline(created("a"), 5*sec), &TaskDeadlineExceeded{TaskID: "a", At: 5 * sec},
		&TaskRetried{TaskID: "a", By: "ops", At: 60 * sec}, granted("a", "l1", 1, 61*sec))
	if a := s.Task("a"); a.State != Leased || a.FailureReason != "" {
		t.Fatalf("task %s (%q), want LEASED", a.State, a.FailureReason)
	}
	if _, ok := s.Deadline("a"); ok {
		t.Fatal("a retried task has its passed deadline again")
	}
}

// TestDeadlinesInImage: an Image carries each task's deadline, and the
// Loader restores the index from it; it refuses deadlines a state cannot
// hold.
func TestDeadlinesInImage(t *testing.T) {
	g := granted("b", "l1", 1, 2*sec)
	g.LeaseExpiry = 8 * sec
	s := run(t, withDeadline(created("a"), 20*sec), withDeadline(created("b"), 8*sec), g, created("c"))
	img := s.Image()
	if want := []Time{20 * sec, 8 * sec, 0}; !reflect.DeepEqual(img.Deadlines, want) {
		t.Fatalf("image deadlines %v, want %v", img.Deadlines, want)
	}
	l := NewLoader(img.LastLSN, img.Epoch)
	for _, q := range img.Queues {
		if err := l.AddQueue(q); err != nil {
			t.Fatal(err)
		}
	}
	for i, task := range img.Tasks {
		if err := l.Add(task.Clone(), task.LeaseIndex(), img.Beside(i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.State()
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Invariants(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Export(), got.Export()) {
		t.Fatalf("restored deadlines %v, want %v", got.Export().Deadlines, s.Export().Deadlines)
	}
	if d, ok := got.NextDeadline(); !ok || d != 8*sec {
		t.Fatalf("restored NextDeadline = %v, %v; want 8s", d, ok)
	}

	for _, tc := range []struct {
		name     string
		i        int
		deadline Time
		want     string
	}{
		{"negative", 0, -5, "negative"},
		{"lease beyond it", 1, 7 * sec, "after the deadline"},
	} {
		l := NewLoader(img.LastLSN, img.Epoch)
		var err error
		for i, task := range img.Tasks {
			d := img.Deadlines[i]
			if i == tc.i {
				d = tc.deadline
			}
			if err = l.Add(task.Clone(), task.LeaseIndex(), Beside{Deadline: d}); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	done := run(t, withDeadline(created("a"), 20*sec), &TaskDead{TaskID: "a", At: 2 * sec}).Image()
	l = NewLoader(done.LastLSN, done.Epoch)
	if err := l.Add(done.Tasks[0].Clone(), -1, Beside{Deadline: 20 * sec}); err == nil || !strings.Contains(err.Error(), "DEAD task has a deadline") {
		t.Errorf("a DEAD task with a deadline: got %v", err)
	}
}

// TestInvariantsCatchDeadlineDamage: the invariants see a lease that
// outlives its task's deadline and a finished task left in the index.
func TestInvariantsCatchDeadlineDamage(t *testing.T) {
	g := granted("a", "l1", 1, 2*sec)
	g.LeaseExpiry = 8 * sec
	s := run(t, withDeadline(created("a"), 8*sec), g, withDeadline(created("b"), 9*sec))
	s.Task("a").CurrentLease().LeaseExpiry = 9 * sec
	if err := s.Invariants(); err == nil || !strings.Contains(err.Error(), "after the deadline") {
		t.Errorf("lease beyond the deadline: %v", err)
	}
	s.Task("a").CurrentLease().LeaseExpiry = 8 * sec
	s.Task("b").State = Dead
	if err := s.Invariants(); err == nil || !strings.Contains(err.Error(), "DEAD but has a deadline") {
		t.Errorf("finished task in the index: %v", err)
	}
}
