package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

const sec = Time(time.Second)

func created(id string) *TaskCreated {
	return &TaskCreated{
		TaskID: id, Namespace: "default", Queue: "q", Payload: []byte("p"),
		ExecutionWindow: 10 * time.Second,
		Retry:           RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2},
		CreatedAt:       1 * sec,
	}
}

func granted(id, lease string, attempt uint32, at Time) *LeaseGranted {
	return &LeaseGranted{TaskID: id, LeaseID: lease, WorkerID: "w", Attempt: attempt, GrantedAt: at, LeaseExpiry: at + 10*sec}
}

// run applies records in order, failing the test on the first error and
// checking the invariants after every record.
func run(t *testing.T, recs ...Record) *State {
	t.Helper()
	return runOn(t, New(), recs...)
}

func TestApplyHappyPaths(t *testing.T) {
	tests := []struct {
		name      string
		recs      []Record
		state     TaskState
		statuses  []ExecStatus
		result    string
		notBefore Time
	}{
		{"created", []Record{created("a")}, Waiting, nil, "", 0},
		{"leased", []Record{created("a"), granted("a", "l1", 1, 2*sec)}, Leased, []ExecStatus{ExecLeased}, "", 0},
		{"started", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&ExecutionStarted{TaskID: "a", LeaseID: "l1", At: 3 * sec}}, Leased, []ExecStatus{ExecInProgress}, "", 0},
		{"commit then complete", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskCommitted{TaskID: "a", LeaseID: "l1", Result: []byte("r"), At: 3 * sec},
			&TaskCompleted{TaskID: "a", LeaseID: "l1", At: 4 * sec}}, Completed, []ExecStatus{ExecDone}, "r", 0},
		{"complete without commit", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskCompleted{TaskID: "a", LeaseID: "l1", Result: []byte("r"), At: 4 * sec}}, Completed, []ExecStatus{ExecDone}, "r", 0},
		{"fail retries", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskFailed{TaskID: "a", LeaseID: "l1", Reason: "boom", RetryAt: 5 * sec, At: 3 * sec}}, Waiting, []ExecStatus{ExecAborted}, "", 5 * sec},
		{"fail permanent", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskFailed{TaskID: "a", LeaseID: "l1", Reason: "boom", Permanent: true, At: 3 * sec}}, Failed, []ExecStatus{ExecAborted}, "", 0},
		{"fail out of attempts", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskFailed{TaskID: "a", LeaseID: "l1", RetryAt: 4 * sec, At: 3 * sec},
			granted("a", "l2", 2, 5*sec),
			&TaskFailed{TaskID: "a", LeaseID: "l2", At: 6 * sec}}, Failed, []ExecStatus{ExecAborted, ExecAborted}, "", 4 * sec},
		{"expiry returns to waiting", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec, RetryAt: 13 * sec}}, Waiting, []ExecStatus{ExecAborted}, "", 13 * sec},
		{"expiry on last attempt fails", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec},
			granted("a", "l2", 2, 13*sec),
			&LeaseExpired{TaskID: "a", LeaseID: "l2", At: 23 * sec}}, Failed, []ExecStatus{ExecAborted, ExecAborted}, "", 0},
		{"committed expiry keeps commit", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskCommitted{TaskID: "a", LeaseID: "l1", Result: []byte("r"), At: 3 * sec},
			&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec}}, Committed, []ExecStatus{ExecCommitted}, "r", 0},
		{"finalisation lease completes", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskCommitted{TaskID: "a", LeaseID: "l1", Result: []byte("r"), At: 3 * sec},
			&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec},
			granted("a", "l2", 2, 13*sec),
			&TaskCompleted{TaskID: "a", LeaseID: "l2", Result: []byte("ignored"), At: 14 * sec}}, Completed, []ExecStatus{ExecCommitted, ExecDone}, "r", 0},
		{"finalisation beyond max attempts", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec},
			granted("a", "l2", 2, 13*sec),
			&TaskCommitted{TaskID: "a", LeaseID: "l2", Result: []byte("r"), At: 14 * sec},
			&LeaseExpired{TaskID: "a", LeaseID: "l2", At: 23 * sec},
			granted("a", "l3", 3, 24*sec)}, Committed, []ExecStatus{ExecAborted, ExecCommitted, ExecLeased}, "r", 0},
		{"kill waiting", []Record{created("a"), &TaskDead{TaskID: "a", Reason: "admin", At: 2 * sec}}, Dead, nil, "", 0},
		{"kill leased", []Record{created("a"), granted("a", "l1", 1, 2*sec), &TaskDead{TaskID: "a", Reason: "admin", At: 3 * sec}},
			Dead, []ExecStatus{ExecAborted}, "", 0},
		{"cancel changes nothing", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskCancelled{TaskID: "a", LeaseID: "stale", At: 3 * sec}}, Leased, []ExecStatus{ExecLeased}, "", 0},
		{"extend", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 30 * sec, At: 11 * sec},
			&TaskCompleted{TaskID: "a", LeaseID: "l1", At: 25 * sec}}, Completed, []ExecStatus{ExecDone}, "", 0},
		{"snooze waits without an attempt", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 9 * sec, At: 3 * sec}}, Waiting, []ExecStatus{ExecSnoozed}, "", 9 * sec},
		{"snoozed then completed", []Record{created("a"), granted("a", "l1", 1, 2*sec),
			&TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 4 * sec, At: 3 * sec},
			granted("a", "l2", 1, 4*sec),
			&TaskSnoozed{TaskID: "a", LeaseID: "l2", NotBefore: 6 * sec, At: 5 * sec},
			granted("a", "l3", 1, 6*sec),
			&TaskCompleted{TaskID: "a", LeaseID: "l3", Result: []byte("r"), At: 7 * sec}},
			Completed, []ExecStatus{ExecSnoozed, ExecSnoozed, ExecDone}, "r", 6 * sec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := run(t, tt.recs...)
			task := s.Task("a")
			if task.State != tt.state {
				t.Fatalf("state %s, want %s", task.State, tt.state)
			}
			var got []ExecStatus
			for _, e := range task.Executions {
				got = append(got, e.Status)
			}
			if !reflect.DeepEqual(got, tt.statuses) {
				t.Fatalf("executions %v, want %v", got, tt.statuses)
			}
			if string(task.Result) != tt.result {
				t.Fatalf("result %q, want %q", task.Result, tt.result)
			}
			if task.NotBefore != tt.notBefore {
				t.Fatalf("not before %v, want %v", task.NotBefore, tt.notBefore)
			}
			if len(task.LSNs()) != len(tt.recs) {
				t.Fatalf("history has %d lsns, want %d", len(task.LSNs()), len(tt.recs))
			}
		})
	}
}

func TestApplyPreconditions(t *testing.T) {
	base := []Record{created("a"), granted("a", "l1", 1, 2*sec)}
	committed := append(append([]Record{}, base...), &TaskCommitted{TaskID: "a", LeaseID: "l1", At: 3 * sec})
	expired := append(append([]Record{}, base...), &LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec, RetryAt: 13 * sec})
	due := []Record{withDeadline(created("a"), 20*sec)}
	dueLeased := append(append([]Record{}, due...), granted("a", "l1", 1, 2*sec))
	tests := []struct {
		name   string
		prefix []Record
		bad    Record
		want   string
	}{
		{"duplicate task", []Record{created("a")}, created("a"), "already exists"},
		{"duplicate request id", []Record{func() Record { r := created("a"); r.RequestID = "r"; return r }()},
			func() Record { r := created("b"); r.RequestID = "r"; return r }(), "request id"},
		{"zero attempts", nil, func() Record { r := created("a"); r.Retry.MaxAttempts = 0; return r }(), "attempt"},
		{"multiplier below one", nil, func() Record { r := created("a"); r.Retry.Multiplier = 0.5; return r }(), "retry policy"},
		{"max below initial backoff", nil, func() Record { r := created("a"); r.Retry.MaxBackoff = 0; return r }(), "retry policy"},
		{"lease unknown task", nil, granted("x", "l1", 1, 2*sec), "does not exist"},
		{"lease twice", base, granted("a", "l2", 2, 3*sec), "cannot be leased"},
		{"lease wrong attempt", []Record{created("a")}, granted("a", "l1", 2, 2*sec), "does not follow"},
		{"lease before not_before", []Record{func() Record { r := created("a"); r.NotBefore = 5 * sec; return r }()},
			granted("a", "l1", 1, 2*sec), "not schedulable before"},
		{"lease id in use", []Record{created("a"), created("b"), granted("a", "l1", 1, 2*sec)}, granted("b", "l1", 1, 2*sec), "already in use"},
		{"extend expired", base, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 40 * sec, At: 12 * sec}, "expired"},
		{"extend backwards", base, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 11 * sec, At: 3 * sec}, "not after"},
		{"extend foreign lease", base, &LeaseExtended{TaskID: "a", LeaseID: "lx", NewLeaseExpiry: 40 * sec, At: 3 * sec}, "not the current lease"},
		{"expire early", base, &LeaseExpired{TaskID: "a", LeaseID: "l1", At: 3 * sec}, "not expired"},
		{"expire unleased", []Record{created("a")}, &LeaseExpired{TaskID: "a", LeaseID: "l1", At: 3 * sec}, "no current lease"},
		{"start twice", append(append([]Record{}, base...), &ExecutionStarted{TaskID: "a", LeaseID: "l1", At: 3 * sec}),
			&ExecutionStarted{TaskID: "a", LeaseID: "l1", At: 4 * sec}, "not LEASED"},
		{"commit after expiry time", base, &TaskCommitted{TaskID: "a", LeaseID: "l1", At: 12 * sec}, "expired"},
		{"commit twice", committed, &TaskCommitted{TaskID: "a", LeaseID: "l1", At: 4 * sec}, "already committed"},
		{"commit stale lease", base, &TaskCommitted{TaskID: "a", LeaseID: "l0", At: 3 * sec}, "not the current lease"},
		{"complete expired", base, &TaskCompleted{TaskID: "a", LeaseID: "l1", At: 12 * sec}, "expired"},
		{"fail after commit", committed, &TaskFailed{TaskID: "a", LeaseID: "l1", At: 4 * sec}, "only an uncommitted"},
		{"fail foreign lease", base, &TaskFailed{TaskID: "a", LeaseID: "lx", At: 4 * sec}, "not the current lease"},
		{"kill terminal", []Record{created("a"), &TaskDead{TaskID: "a", At: 2 * sec}}, &TaskDead{TaskID: "a", At: 3 * sec}, "already DEAD"},
		{"fence below", []Record{&Fence{Epoch: 3}}, &Fence{Epoch: 2}, "below"},
		{"refusal of an unknown action", expired, &TaskCancelled{TaskID: "a", LeaseID: "l1", Action: lastAction + 1, At: 13 * sec}, "action 7 is unknown"},
		{"snooze after commit", committed, &TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 5 * sec, At: 4 * sec}, "only an uncommitted"},
		{"snooze foreign lease", base, &TaskSnoozed{TaskID: "a", LeaseID: "lx", NotBefore: 5 * sec, At: 4 * sec}, "not the current lease"},
		{"snooze after expiry time", base, &TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 15 * sec, At: 12 * sec}, "expired before the snooze"},
		{"snooze into the past", base, &TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 3 * sec, At: 4 * sec}, "before the snooze"},
		{"snooze an unleased task", []Record{created("a")}, &TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 5 * sec, At: 4 * sec}, "no current lease"},
		{"lease after a snooze skips its attempt", append(append([]Record{}, base...), &TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 4 * sec, At: 3 * sec}),
			granted("a", "l2", 2, 4*sec), "attempt 2 does not follow attempt 0"},
		{"report above 100 percent", base, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 13 * sec, At: 3 * sec,
			Report: &Report{Percent: 101, HasPercent: true}}, "percent 101 is above 100"},
		{"report percent without HasPercent", base, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 13 * sec, At: 3 * sec,
			Report: &Report{Percent: 5}}, "without HasPercent"},
		{"report moves the expiry back", base, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 11 * sec, At: 3 * sec,
			Report: &Report{Message: "m"}}, "before the current expiry"},
		{"tracestate without traceparent", nil, func() Record { r := created("a"); r.Trace.State = "v=1"; return r }(), "tracestate without traceparent"},
		{"refusal for no task", nil, &TaskCancelled{TaskID: "a", LeaseID: "l1", Action: ActionHeartbeat, At: 13 * sec}, "does not exist"},
		{"refusal of a lease never granted", expired, &TaskCancelled{TaskID: "a", LeaseID: "lx", Action: ActionHeartbeat, At: 13 * sec}, "never the task's"},
		{"refusal of the current lease", base, &TaskCancelled{TaskID: "a", LeaseID: "l1", Action: ActionCommit, At: 3 * sec}, "is the current lease"},
		{"negative deadline", nil, withDeadline(created("a"), -1), "deadline -1 is negative"},
		{"lease at the deadline", due, granted("a", "l1", 1, 20*sec), "deadline 1970-01-01T00:00:20Z has passed"},
		{"lease beyond the deadline", due, granted("a", "l1", 1, 15*sec), "after the task's deadline"},
		{"extend beyond the deadline", dueLeased, &LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 21 * sec, At: 3 * sec}, "after the task's deadline"},
		{"deadline not passed", dueLeased, &TaskDeadlineExceeded{TaskID: "a", At: 20*sec - 1}, "has not passed"},
		{"deadline of no task", nil, &TaskDeadlineExceeded{TaskID: "a", At: 20 * sec}, "does not exist"},
		{"deadline of a task without one", base, &TaskDeadlineExceeded{TaskID: "a", At: 20 * sec}, "no deadline"},
		{"deadline of a committed task", append(append([]Record{}, dueLeased...), &TaskCommitted{TaskID: "a", LeaseID: "l1", At: 3 * sec}),
			&TaskDeadlineExceeded{TaskID: "a", At: 20 * sec}, "task is COMMITTED"},
		{"deadline of a finished task", append(append([]Record{}, due...), &TaskDead{TaskID: "a", At: 3 * sec}),
			&TaskDeadlineExceeded{TaskID: "a", At: 20 * sec}, "task is DEAD"},
		{"refusal recorded twice", append(append([]Record{}, expired...), &TaskCancelled{TaskID: "a", LeaseID: "l1", Action: ActionFail, At: 13 * sec}),
			&TaskCancelled{TaskID: "a", LeaseID: "l1", Action: ActionFail, At: 14 * sec}, "already recorded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := run(t, tt.prefix...)
			before := s.Export()
			err := s.Apply(s.LastLSN()+1, tt.bad)
			var ae *ApplyError
			if !errors.As(err, &ae) || !errors.Is(err, ErrPrecondition) {
				t.Fatalf("got %v, want an ApplyError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			if ae.LSN != s.LastLSN()+1 {
				t.Fatalf("error names lsn %d, want %d", ae.LSN, s.LastLSN()+1)
			}
			if !reflect.DeepEqual(before, s.Export()) {
				t.Fatal("a rejected record changed the state")
			}
			if err := s.Invariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestApplyRejectsLSNGap(t *testing.T) {
	s := New()
	if err := s.Apply(2, created("a")); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("gap accepted: %v", err)
	}
}

func TestSchedulableOrder(t *testing.T) {
	mk := func(id string, prio int32, notBefore Time) Record {
		r := created(id)
		r.Priority, r.NotBefore = prio, notBefore
		return r
	}
	s := run(t,
		mk("low-old", 0, 0), mk("high", 5, 0), mk("low-new", 0, 0),
		mk("delayed-high", 9, 50*sec), mk("high9", 9, 0))
	q := QueueKey{"default", "q"}
	ids := func(ts []*Task) (out []string) {
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	got := ids(s.Schedulable(q, 10*sec, 10))
	want := []string{"high9", "high", "low-old", "low-new"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("at 10s: %v, want %v", got, want)
	}
	if at, ok := s.NextReady(q); !ok || at != 50*sec {
		t.Fatalf("next ready %v %v", at, ok)
	}
	got = ids(s.Schedulable(q, 50*sec, 2))
	if want := []string{"delayed-high", "high9"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("at 50s: %v, want %v", got, want)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredAndScan(t *testing.T) {
	s := run(t, created("a"), created("b"), created("c"),
		granted("a", "la", 1, 1*sec), granted("b", "lb", 1, 5*sec), granted("c", "lc", 1, 3*sec))
	exp := s.Expired(13*sec, 10)
	got := map[string]bool{}
	for _, t := range exp {
		got[t.ID] = true
	}
	if !reflect.DeepEqual(got, map[string]bool{"a": true, "c": true}) {
		t.Fatalf("expired at 13s: %v", got)
	}
	if at, ok := s.NextExpiry(); !ok || at != 11*sec {
		t.Fatalf("next expiry %v", at)
	}
	var scanned []string
	s.Scan(1, func(t *Task) bool { scanned = append(scanned, t.ID); return true })
	if !reflect.DeepEqual(scanned, []string{"b", "c"}) {
		t.Fatalf("scan after lsn 1: %v", scanned)
	}
}

func TestTransitionPanicsOnIllegalMove(t *testing.T) {
	s := run(t, created("a"), &TaskDead{TaskID: "a", At: 2 * sec})
	defer func() {
		if recover() == nil {
			t.Fatal("illegal transition did not panic")
		}
	}()
	s.transition(s.Task("a"), Completed)
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 2}
	for n, want := range map[uint32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		if got := p.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestSchedulableAfterClockJumpBack(t *testing.T) {
	r := created("a")
	r.NotBefore = 10 * sec
	s := run(t, r)
	q := QueueKey{"default", "q"}
	if got := s.Schedulable(q, 20*sec, 1); len(got) != 1 {
		t.Fatal("task not schedulable after its not_before")
	}
	if got := s.Schedulable(q, 5*sec, 1); len(got) != 0 {
		t.Fatal("task schedulable before its not_before after the clock went back")
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
	if got := s.Schedulable(q, 10*sec, 1); len(got) != 1 {
		t.Fatal("task lost after the clock came forward again")
	}
}

// TestRefusalIsNoUpdate: a TaskCancelled that names its action joins the
// task's history and its lease's refused actions, but does not move
// UpdatedAt, which retention measures from. One without an action (from an
// older log) keeps its old meaning: it did count as an update.
func TestRefusalIsNoUpdate(t *testing.T) {
	s := run(t, created("a"), granted("a", "l1", 1, 2*sec),
		&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec, RetryAt: 13 * sec},
		granted("a", "l2", 2, 14*sec),
		&TaskCompleted{TaskID: "a", LeaseID: "l2", At: 15 * sec},
		&TaskCancelled{TaskID: "a", LeaseID: "l1", Reason: "heartbeat by a lease without authority", Action: ActionHeartbeat, At: 20 * sec},
		&TaskCancelled{TaskID: "a", LeaseID: "l2", Reason: "fail by a lease without authority", Action: ActionFail, At: 21 * sec},
		&TaskCancelled{TaskID: "a", LeaseID: "l1", Reason: "commit by a lease without authority", Action: ActionCommit, At: 22 * sec})
	task := s.Task("a")
	if task.UpdatedAt != 15*sec {
		t.Errorf("UpdatedAt %v after refusals, want the completion's %v", task.UpdatedAt, Time(15*sec))
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8}; !reflect.DeepEqual(task.LSNs(), want) {
		t.Errorf("history %v, want %v", task.LSNs(), want)
	}
	if got, want := task.Executions[0].Refused, ActionHeartbeat.set()|ActionCommit.set(); got != want {
		t.Errorf("first lease's refused actions %#x, want %#x", got, want)
	}
	if got, want := task.Executions[1].Refused, ActionFail.set(); got != want {
		t.Errorf("second lease's refused actions %#x, want %#x", got, want)
	}

	old := &TaskCancelled{TaskID: "a", LeaseID: "anything", Reason: "lease lost", At: 30 * sec}
	if err := s.Apply(s.LastLSN()+1, old); err != nil {
		t.Fatalf("a TaskCancelled without an action: %v", err)
	}
	if task.UpdatedAt != 30*sec || task.Executions[0].Refused != ActionHeartbeat.set()|ActionCommit.set() {
		t.Errorf("a TaskCancelled without an action: UpdatedAt %v, refused %#x; want it to count as an update and nothing else", task.UpdatedAt, task.Executions[0].Refused)
	}
}

func TestActionNames(t *testing.T) {
	for a := ActionStart; a <= lastAction; a++ {
		if got, ok := ParseAction(a.String()); !ok || got != a {
			t.Errorf("ParseAction(%q) = %v, %v", a.String(), got, ok)
		}
	}
	if _, ok := ParseAction("unknown"); ok {
		t.Error("ParseAction accepts the unknown action")
	}
	if got := Action(9).String(); got != "Action(9)" {
		t.Errorf("Action(9).String() = %q", got)
	}
}

// TestSizes keeps the per-task memory as documented: an Execution is 96
// bytes and a Progress 208, size classes of the allocator; a Task is 136
// bytes, and a full slab chunk of them a whole number of pages.
func TestSizes(t *testing.T) {
	if n := unsafe.Sizeof(Execution{}); n != 96 {
		t.Errorf("Execution is %d bytes, want 96", n)
	}
	if n := unsafe.Sizeof(Task{}); n != 136 {
		t.Errorf("Task is %d bytes, want 136", n)
	}
	if n := unsafe.Sizeof(Progress{}); n != 208 {
		t.Errorf("Progress is %d bytes, want 208", n)
	}
	if n := unsafe.Sizeof(Task{}) << chunkBits; n%8192 != 0 {
		t.Errorf("a full slab chunk is %d bytes, not a whole number of 8 KiB pages", n)
	}
}

// TestSchedulableInLeaseOrder checks Schedulable against the lease order
// itself (priority, then creation) on queues of random priorities and
// not-before times, with the clock going back to a time before some
// promoted tasks are due: it returns the first n tasks due at that time,
// and the heaps keep their invariants.
func TestSchedulableInLeaseOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	q := QueueKey{"default", "q"}
	for round := range 200 {
		var recs []Record
		n := 1 + r.IntN(300)
		for i := range n {
			c := created(fmt.Sprintf("t%d-%d", round, i))
			c.Priority = int32(r.IntN(4))
			if r.IntN(4) == 0 {
				c.NotBefore = Time(1+r.IntN(20)) * sec
			}
			recs = append(recs, c)
		}
		s := run(t, recs...)
		// Promote everything, then ask at an earlier time.
		s.Schedulable(q, 100*sec, 0)
		s.Schedulable(q, 100*sec, 1)
		now := Time(r.IntN(25)) * sec
		var due []*Task
		for _, rec := range recs {
			if tk := s.Task(rec.(*TaskCreated).TaskID); tk.NotBefore <= now {
				due = append(due, tk)
			}
		}
		slices.SortFunc(due, func(a, b *Task) int {
			if s.before(a, b) {
				return -1
			}
			return 1
		})
		want := 1 + r.IntN(80)
		got := s.Schedulable(q, now, want)
		if len(got) != min(want, len(due)) {
			t.Fatalf("round %d: %d tasks, want %d", round, len(got), min(want, len(due)))
		}
		for i := range got {
			if got[i] != due[i] {
				t.Fatalf("round %d: task %d is %s, want %s", round, i, got[i].ID, due[i].ID)
			}
		}
		if err := s.Invariants(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestSnoozeKeepsTheAttemptBudget: a task of one attempt snoozed three
// times still has its one attempt: each lease after a snooze has attempt
// number 1, the retry budget is untouched, and a failure of the last lease
// fails it (no attempt left), not earlier.
func TestSnoozeKeepsTheAttemptBudget(t *testing.T) {
	c := created("a")
	c.Retry.MaxAttempts = 1
	recs := []Record{c}
	at := 2 * sec
	for i := range 3 {
		lease := fmt.Sprintf("l%d", i)
		recs = append(recs, granted("a", lease, 1, at),
			&TaskSnoozed{TaskID: "a", LeaseID: lease, NotBefore: at + 2*sec, Reason: "later", At: at + sec})
		at += 2 * sec
	}
	s := run(t, recs...)
	task := s.Task("a")
	if task.Attempt != 0 || !task.AttemptsLeft() || task.State != Waiting {
		t.Fatalf("after 3 snoozes: attempt %d, attempts left %v, %s; want attempt 0, an attempt left, WAITING", task.Attempt, task.AttemptsLeft(), task.State)
	}
	for i, e := range task.Executions {
		if e.Attempt != 1 || e.Status != ExecSnoozed || e.Reason != "later" || e.FinishedAt == 0 {
			t.Fatalf("execution %d: %+v; want attempt 1, SNOOZED, reason and finish time", i, e)
		}
	}
	s = run(t, append(recs, granted("a", "l3", 1, at), &TaskFailed{TaskID: "a", LeaseID: "l3", Reason: "boom", At: at + sec})...)
	if task := s.Task("a"); task.State != Failed || task.Attempt != 1 || len(task.Executions) != 4 {
		t.Fatalf("after the failure: %s, attempt %d, %d executions; want FAILED, attempt 1, 4 executions", task.State, task.Attempt, len(task.Executions))
	}
}

// TestReportsAndTraces: a heartbeat's progress report is the lease's last
// one, may leave the expiry where it is, and ends with the lease; a trace
// context stays beside its task until the task leaves the state, and
// shares the task's packed allocation.
func TestReportsAndTraces(t *testing.T) {
	c := created("a")
	c.Trace = TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "congo=t61rcWkgMzE"}
	s := run(t, c, created("b"), granted("a", "l1", 1, 2*sec),
		&LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 12 * sec, At: 3 * sec, Report: &Report{Message: "copying", Percent: 10, HasPercent: true}},
		&LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 12 * sec, At: 4 * sec, Report: &Report{Message: "still copying"}},
		&LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 15 * sec, At: 5 * sec})
	a := s.Task("a")
	if got, ok := s.ReportOf(a); !ok || got != (LastReport{Report: Report{Message: "still copying"}, At: 4 * sec}) {
		t.Fatalf("report %+v, %v; want the second one", got, ok)
	}
	if a.CurrentLease().LeaseExpiry != 15*sec {
		t.Fatalf("expiry %v, want 15s", a.CurrentLease().LeaseExpiry)
	}
	if got := s.TraceOf(a); got != c.Trace {
		t.Fatalf("trace %+v, want %+v", got, c.Trace)
	}
	if got := s.TraceOf(s.Task("b")); got != (TraceContext{}) {
		t.Fatalf("task b has trace %+v, want none", got)
	}
	// One allocation holds the id and the trace context.
	base := uintptr(unsafe.Pointer(unsafe.StringData(a.ID)))
	if p := uintptr(unsafe.Pointer(unsafe.StringData(s.TraceOf(a).Parent))); p != base+uintptr(len(a.ID)) {
		t.Fatalf("the traceparent is not packed after the task id")
	}
	for _, tail := range [][]Record{
		{&TaskCompleted{TaskID: "a", LeaseID: "l1", At: 6 * sec}},
		{&TaskSnoozed{TaskID: "a", LeaseID: "l1", NotBefore: 7 * sec, At: 6 * sec}},
		{&LeaseExpired{TaskID: "a", LeaseID: "l1", At: 16 * sec}},
		{&TaskDead{TaskID: "a", At: 6 * sec}},
	} {
		s := New()
		for _, r := range append([]Record{c, created("b"), granted("a", "l1", 1, 2*sec),
			&LeaseExtended{TaskID: "a", LeaseID: "l1", NewLeaseExpiry: 15 * sec, At: 3 * sec, Report: &Report{Message: "m"}}}, tail...) {
			if err := s.Apply(s.LastLSN()+1, r); err != nil {
				t.Fatal(err)
			}
		}
		if r, ok := s.ReportOf(s.Task("a")); ok {
			t.Errorf("after %T: report %+v kept without a lease", tail[0], r)
		}
		if err := s.Invariants(); err != nil {
			t.Fatal(err)
		}
	}
	s = run(t, c, granted("a", "l1", 1, 2*sec), &TaskCompleted{TaskID: "a", LeaseID: "l1", At: 3 * sec},
		&TasksPurged{Before: 10 * sec, At: 10 * sec})
	if len(s.traces) != 0 {
		t.Fatalf("a purged task's trace context is kept: %v", s.traces)
	}
}
