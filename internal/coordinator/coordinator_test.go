package coordinator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

func TestSubmitLeaseComplete(t *testing.T) {
	e := newEnv(t, 1)
	task := e.submit("q")
	if task.State != state.Waiting || task.Namespace != "default" || task.Window != 30*time.Second || task.Retry.MaxAttempts != 3 {
		t.Fatalf("submitted task %+v does not carry the defaults", task)
	}
	l := e.lease("w1", "q")
	if l.TaskID != task.ID || l.Attempt != 1 || string(l.Payload) != "payload" || l.Committed {
		t.Fatalf("lease %+v", l)
	}
	if !l.LeaseExpiry.Equal(epoch.Add(30 * time.Second)) {
		t.Fatalf("lease expiry %v", l.LeaseExpiry)
	}
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, []byte("done")); err != nil {
		t.Fatal(err)
	}
	got := e.get(task.ID)
	if got.State != state.Completed || string(got.Result) != "done" || got.Executions[0].Status != state.ExecDone {
		t.Fatalf("after complete: %s %q %v", got.State, got.Result, got.Executions[0].Status)
	}
	// A network retry of the same completion gets the same answer.
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, []byte("done")); err != nil {
		t.Fatalf("repeated complete: %v", err)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeTaskCompleted}
	if got := e.historyTypes(task.ID); !reflect.DeepEqual(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	e.restart()
}

func TestSubmitIdempotentByRequestID(t *testing.T) {
	e := newEnv(t, 2)
	a, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "order-1"})
	if err != nil || a.Duplicate {
		t.Fatalf("first submit: %v %v", err, a.Duplicate)
	}
	b, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "order-1"})
	if err != nil || !b.Duplicate || b.Task.ID != a.Task.ID {
		t.Fatalf("repeat: %v dup=%v id=%s want %s", err, b.Duplicate, b.Task.ID, a.Task.ID)
	}
	other, err := e.c.Submit(ctx, SubmitRequest{Namespace: "other", Queue: "q", RequestID: "order-1"})
	if err != nil || other.Duplicate {
		t.Fatalf("same request id in another namespace must be a new task: %v %v", err, other.Duplicate)
	}
	res, err := e.c.SubmitBatch(ctx, []SubmitRequest{
		{Queue: "q", RequestID: "x"}, {Queue: "q", RequestID: "x"}, {Queue: "q"}, {Queue: "q", RequestID: "order-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || res[1].Task.ID != res[0].Task.ID || res[2].Duplicate ||
		!res[3].Duplicate || res[3].Task.ID != a.Task.ID {
		t.Fatalf("batch results %+v", res)
	}
	if n := e.c.Stats().Tasks; n != 4 {
		t.Fatalf("%d tasks, want 4", n)
	}
	e.restart()
	if again, _ := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "x"}); !again.Duplicate {
		t.Fatal("request id forgotten after restart")
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t, 3)
	long := strings.Repeat("x", 257)
	tests := []struct {
		name  string
		req   SubmitRequest
		field string
		is    error
	}{
		{"missing queue", SubmitRequest{}, "queue", ErrInvalidArgument},
		{"queue with space", SubmitRequest{Queue: "a b"}, "queue", ErrInvalidArgument},
		{"long request id", SubmitRequest{Queue: "q", RequestID: long}, "request_id", ErrInvalidArgument},
		{"window too short", SubmitRequest{Queue: "q", ExecutionWindow: time.Millisecond}, "execution_window", ErrInvalidArgument},
		{"window negative", SubmitRequest{Queue: "q", ExecutionWindow: -time.Second}, "execution_window", ErrInvalidArgument},
		{"window too long", SubmitRequest{Queue: "q", ExecutionWindow: 25 * time.Hour}, "execution_window", ErrInvalidArgument},
		{"attempts", SubmitRequest{Queue: "q", Retry: state.RetryPolicy{MaxAttempts: 1001}}, "retry_policy.max_attempts", ErrInvalidArgument},
		{"negative backoff", SubmitRequest{Queue: "q", Retry: state.RetryPolicy{InitialBackoff: -1}}, "retry_policy.initial_backoff", ErrInvalidArgument},
		{"multiplier", SubmitRequest{Queue: "q", Retry: state.RetryPolicy{Multiplier: 0.5}}, "retry_policy.backoff_multiplier", ErrInvalidArgument},
		{"max below initial", SubmitRequest{Queue: "q", Retry: state.RetryPolicy{InitialBackoff: time.Minute, MaxBackoff: time.Second}}, "retry_policy.max_backoff", ErrInvalidArgument},
		{"far future", SubmitRequest{Queue: "q", NotBefore: epoch.Add(400 * 24 * time.Hour)}, "not_before", ErrInvalidArgument},
		{"payload", SubmitRequest{Queue: "q", Payload: make([]byte, 1<<20+1)}, "payload", ErrTooLarge},
		{"deadline in the past", SubmitRequest{Queue: "q", Deadline: epoch.Add(-time.Second)}, "deadline", ErrInvalidArgument},
		{"deadline now", SubmitRequest{Queue: "q", Deadline: epoch}, "deadline", ErrInvalidArgument},
		{"deadline too far", SubmitRequest{Queue: "q", Deadline: epoch.Add(400 * 24 * time.Hour)}, "deadline", ErrInvalidArgument},
		{"deadline before not_before", SubmitRequest{Queue: "q", NotBefore: epoch.Add(time.Hour), Deadline: epoch.Add(time.Minute)}, "deadline", ErrInvalidArgument},
		{"deadline within a window of not_before", SubmitRequest{Queue: "q", NotBefore: epoch.Add(time.Hour), Deadline: epoch.Add(time.Hour + 50*time.Millisecond)}, "deadline", ErrInvalidArgument},
		{"deadline within a window of now", SubmitRequest{Queue: "q", Deadline: epoch.Add(50 * time.Millisecond)}, "deadline", ErrInvalidArgument},
		{"deadline and timeout", SubmitRequest{Queue: "q", Deadline: epoch.Add(time.Hour), Timeout: time.Hour}, "timeout", ErrInvalidArgument},
		{"negative timeout", SubmitRequest{Queue: "q", Timeout: -time.Second}, "timeout", ErrInvalidArgument},
		{"timeout below a window", SubmitRequest{Queue: "q", Timeout: 50 * time.Millisecond}, "timeout", ErrInvalidArgument},
		{"timeout before not_before", SubmitRequest{Queue: "q", NotBefore: epoch.Add(time.Hour), Timeout: time.Minute}, "timeout", ErrInvalidArgument},
		{"timeout too long", SubmitRequest{Queue: "q", Timeout: 400 * 24 * time.Hour}, "timeout", ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.Submit(ctx, tt.req)
			if !errors.Is(err, tt.is) {
				t.Fatalf("got %v, want %v", err, tt.is)
			}
			var fe *FieldError
			var le *LimitError
			switch {
			case errors.As(err, &fe):
				if fe.Field != tt.field {
					t.Fatalf("error names field %q, want %q (%v)", fe.Field, tt.field, err)
				}
			case errors.As(err, &le):
				if le.Field != tt.field || le.Limit != 1<<20 || !strings.Contains(err.Error(), "1048576") {
					t.Fatalf("limit error %v", err)
				}
			default:
				t.Fatalf("untyped error %v", err)
			}
		})
	}
	_, err := e.c.SubmitBatch(ctx, []SubmitRequest{{Queue: "q"}, {Queue: ""}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "requests[1].queue" {
		t.Fatalf("batch error %v", err)
	}
	_, err = e.c.SubmitBatch(ctx, []SubmitRequest{{Queue: "q"}, {Queue: "q", Deadline: epoch.Add(-time.Hour)}})
	if !errors.As(err, &fe) || fe.Field != "requests[1].deadline" || !strings.Contains(err.Error(), "in the past") {
		t.Fatalf("batch error %v", err)
	}
	if n := e.c.Stats().Tasks; n != 0 {
		t.Fatalf("rejected submits created %d tasks", n)
	}
	for _, req := range []LeaseRequest{{Queue: "q"}, {WorkerID: "w"}, {WorkerID: "w", Queue: "q", MaxTasks: 1001}, {WorkerID: "w", Queue: "q", Wait: time.Hour}} {
		if _, err := e.c.Lease(ctx, req); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("lease %+v: %v", req, err)
		}
	}
	if _, err := e.c.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := e.c.Commit(ctx, "nope", "l", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("commit unknown: %v", err)
	}
}

func TestLeaseOrderAndDelay(t *testing.T) {
	e := newEnv(t, 4)
	low := e.submit("q")
	high := e.submit("q", func(r *SubmitRequest) { r.Priority = 10 })
	later := e.submit("q", func(r *SubmitRequest) { r.Priority = 99; r.NotBefore = epoch.Add(time.Minute) })
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10})
	if err != nil || len(ls) != 2 || ls[0].TaskID != high.ID || ls[1].TaskID != low.ID {
		t.Fatalf("lease order: %v %+v", err, ls)
	}
	if ls, _ := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q"}); len(ls) != 0 {
		t.Fatal("delayed task leased early")
	}
	e.clock.Advance(time.Minute)
	if l := e.lease("w", "q"); l.TaskID != later.ID {
		t.Fatalf("got %s, want the delayed task", l.TaskID)
	}
}

func TestLongPollWakesOnSubmitAndTimesOut(t *testing.T) {
	e := newEnv(t, 5)
	got := make(chan []Lease)
	go func() {
		ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	e.clock.WaitForTimers(1) // the poll is waiting (no expiry loop runs here)
	task := e.submit("q")
	ls := <-got
	if len(ls) != 1 || ls[0].TaskID != task.ID {
		t.Fatalf("long poll got %+v", ls)
	}
	go func() {
		ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	e.clock.WaitForTimers(1)
	e.clock.Advance(10 * time.Second)
	if ls := <-got; len(ls) != 0 {
		t.Fatalf("timed-out poll got %+v", ls)
	}
}

func TestHeartbeatAndExpiry(t *testing.T) {
	e := newEnv(t, 6)
	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = 10 * time.Second })
	l := e.lease("w", "q")
	e.clock.Advance(8 * time.Second)
	exp, err := e.c.Heartbeat(ctx, l.TaskID, l.LeaseID)
	if err != nil || !exp.Equal(epoch.Add(18*time.Second)) {
		t.Fatalf("heartbeat: %v %v", exp, err)
	}
	e.clock.Advance(9 * time.Second) // 17s: still within the extended lease
	if err := e.c.Start(ctx, l.TaskID, l.LeaseID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second) // 18s: expired
	_, err = e.c.Heartbeat(ctx, l.TaskID, l.LeaseID)
	if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
	got := e.get(task.ID)
	if got.State != state.Waiting || got.Executions[0].Status != state.ExecAborted {
		t.Fatalf("after expiry: %s %s", got.State, got.Executions[0].Status)
	}
	// The retry waits out the backoff (1 s after the first attempt).
	if !got.NotBefore.Std().Equal(epoch.Add(19 * time.Second)) {
		t.Fatalf("not before %v", got.NotBefore)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeLeaseExtended,
		record.TypeExecutionStarted, record.TypeLeaseExpired, record.TypeTaskCancelled}
	if h := e.historyTypes(task.ID); !reflect.DeepEqual(h, want) {
		t.Fatalf("history %v, want %v", h, want)
	}
}

func TestExpiryScan(t *testing.T) {
	e := newEnv(t, 7)
	e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	e.lease("w", "q")
	e.clock.Advance(time.Second)
	n, err := e.c.ExpireDue(ctx)
	if err != nil || n != 1 {
		t.Fatalf("expired %d: %v", n, err)
	}
	if n, _ := e.c.ExpireDue(ctx); n != 0 {
		t.Fatalf("expired %d twice", n)
	}
}

func TestFailRetriesThenFails(t *testing.T) {
	e := newEnv(t, 8)
	task := e.submit("q", func(r *SubmitRequest) {
		r.Retry = state.RetryPolicy{MaxAttempts: 2, InitialBackoff: 5 * time.Second}
	})
	l := e.lease("w", "q")
	res, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "boom", false)
	if err != nil || res.State != state.Waiting || !res.RetryAt.Equal(epoch.Add(5*time.Second)) {
		t.Fatalf("first fail: %+v %v", res, err)
	}
	if ls, _ := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q"}); len(ls) != 0 {
		t.Fatal("leased during backoff")
	}
	e.clock.Advance(5 * time.Second)
	l2 := e.lease("w", "q")
	if l2.Attempt != 2 {
		t.Fatalf("attempt %d", l2.Attempt)
	}
	res, err = e.c.Fail(ctx, l2.TaskID, l2.LeaseID, "boom again", false)
	if err != nil || res.State != state.Failed {
		t.Fatalf("last fail: %+v %v", res, err)
	}
	if got := e.get(task.ID); got.State != state.Failed || got.FailureReason != "boom again" {
		t.Fatalf("task %s %q", got.State, got.FailureReason)
	}
	// A failure by the old lease is a stale action.
	if _, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "late", false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale fail: %v", err)
	}
}

func TestPermanentFailureAndKill(t *testing.T) {
	e := newEnv(t, 9)
	a := e.submit("q")
	l := e.lease("w", "q")
	if res, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "bad input", true); err != nil || res.State != state.Failed {
		t.Fatalf("permanent fail: %+v %v", res, err)
	}
	if err := e.c.Kill(ctx, a.ID, Actor{Reason: "x"}); !errors.Is(err, ErrWrongState) {
		t.Fatalf("kill of failed task: %v", err)
	}
	b := e.submit("q")
	lb := e.lease("w", "q")
	if err := e.c.Kill(ctx, b.ID, Actor{Reason: "operator"}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Complete(ctx, lb.TaskID, lb.LeaseID, nil); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("complete after kill: %v", err)
	}
	if got := e.get(b.ID); got.State != state.Dead || got.FailureReason != "operator" {
		t.Fatalf("killed task %s %q", got.State, got.FailureReason)
	}
}

func TestCommitBoundaryAndFinalisation(t *testing.T) {
	e := newEnv(t, 10)
	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = 10 * time.Second })
	l := e.lease("w1", "q")
	tok, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("r1"))
	if err != nil || tok != (FencingToken{TaskID: task.ID, Attempt: 1}) {
		t.Fatalf("commit: %+v %v", tok, err)
	}
	// A network retry of the commit gets the same answer and no record.
	lsn := e.c.Stats().LastLSN
	if tok2, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("r1")); err != nil || tok2 != tok {
		t.Fatalf("repeated commit: %+v %v", tok2, err)
	}
	if e.c.Stats().LastLSN != lsn {
		t.Fatal("a repeated commit wrote a record")
	}
	if _, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "x", false); !errors.Is(err, ErrWrongState) {
		t.Fatalf("fail after commit: %v", err)
	}
	// The worker dies between commit and complete: the lease expires, and
	// the task stays committed.
	e.clock.Advance(10 * time.Second)
	if n, _ := e.c.ExpireDue(ctx); n != 1 {
		t.Fatal("lease not expired")
	}
	if got := e.get(task.ID); got.State != state.Committed {
		t.Fatalf("committed task went to %s", got.State)
	}
	// The next lease is a finalisation lease carrying the committed result.
	l2 := e.lease("w2", "q")
	if !l2.Committed || string(l2.CommittedResult) != "r1" || l2.Attempt != 2 {
		t.Fatalf("finalisation lease %+v", l2)
	}
	if _, err := e.c.Commit(ctx, l2.TaskID, l2.LeaseID, []byte("r2")); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("commit on a finalisation lease: %v", err)
	}
	if err := e.c.Complete(ctx, l2.TaskID, l2.LeaseID, []byte("ignored")); err != nil {
		t.Fatal(err)
	}
	got := e.get(task.ID)
	if got.State != state.Completed || string(got.Result) != "r1" {
		t.Fatalf("finalised task %s %q", got.State, got.Result)
	}
	if got.Executions[0].Status != state.ExecCommitted || got.Executions[1].Status != state.ExecDone || !got.Executions[1].Finalize {
		t.Fatalf("executions %+v", got.Executions)
	}
	// The first worker comes back and tries to complete: lease lost.
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("stale complete: %v", err)
	}
	e.restart()
}

// TestFM001 reproduces the stalled-worker duplicate execution
// (docs/design/state-machine.md) at library level: worker A leases and stalls past its lease; worker B leases the same
// task and commits. A's commit and completion are rejected, exactly one
// commit exists, and the history shows the expiry and the rejected action.
func TestFM001(t *testing.T) {
	e := newEnv(t, 11)
	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = 5 * time.Second })
	a := e.lease("worker-a", "q")
	e.clock.Advance(5 * time.Second) // A stalls past its lease; the scan expires it
	if n, err := e.c.ExpireDue(ctx); n != 1 || err != nil {
		t.Fatalf("expired %d: %v", n, err)
	}
	e.clock.Advance(time.Second) // the retry backoff passes
	b := e.lease("worker-b", "q")
	if b.TaskID != task.ID || b.Attempt != 2 {
		t.Fatalf("B's lease %+v", b)
	}
	effects := map[string]int{} // an effects ledger keyed by task id
	if _, err := e.c.Commit(ctx, b.TaskID, b.LeaseID, []byte("B")); err != nil {
		t.Fatalf("B commit: %v", err)
	} else {
		effects[b.TaskID]++
	}
	if _, err := e.c.Commit(ctx, a.TaskID, a.LeaseID, []byte("A")); err == nil {
		effects[a.TaskID]++
	} else if !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("A commit: %v, want already committed", err)
	}
	if err := e.c.Complete(ctx, a.TaskID, a.LeaseID, []byte("A")); err == nil {
		t.Fatal("A completed with a stale lease")
	}
	if err := e.c.Complete(ctx, b.TaskID, b.LeaseID, nil); err != nil {
		t.Fatalf("B complete: %v", err)
	}
	if effects[task.ID] != 1 {
		t.Fatalf("%d effects applied, want exactly 1", effects[task.ID])
	}
	got := e.get(task.ID)
	commits := 0
	for _, ex := range got.Executions {
		if ex.CommittedAt != 0 {
			commits++
		}
	}
	if commits != 1 || got.CommittedBy != b.LeaseID || string(got.Result) != "B" {
		t.Fatalf("%d commits, committed by %s, result %q", commits, got.CommittedBy, got.Result)
	}
	h := e.historyTypes(task.ID)
	count := map[record.Type]int{}
	for _, typ := range h {
		count[typ]++
	}
	if count[record.TypeLeaseExpired] != 1 || count[record.TypeTaskCancelled] != 2 || count[record.TypeTaskCommitted] != 1 {
		t.Fatalf("history %v", h)
	}
}

// TestRefusalsRecordedOncePerLeaseAndAction: however often a former lease
// retries, each of its refused actions is recorded once; a lease id the
// task never had is refused without a record, but only once the state the
// answer reveals is durable.
func TestRefusalsRecordedOncePerLeaseAndAction(t *testing.T) {
	e := newEnv(t, 14)
	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	old := e.lease("w", "q")
	e.clock.Advance(time.Second)
	if n, err := e.c.ExpireDue(ctx); n != 1 || err != nil {
		t.Fatalf("expired %d: %v", n, err)
	}
	e.clock.Advance(2 * time.Second) // past the retry backoff
	cur := e.lease("w", "q")
	calls := map[state.Action]func(lease string) error{
		state.ActionStart: func(l string) error { return e.c.Start(ctx, task.ID, l) },
		state.ActionHeartbeat: func(l string) error {
			_, err := e.c.Heartbeat(ctx, task.ID, l)
			return err
		},
		state.ActionCommit: func(l string) error {
			_, err := e.c.Commit(ctx, task.ID, l, []byte("r"))
			return err
		},
		state.ActionComplete: func(l string) error { return e.c.Complete(ctx, task.ID, l, nil) },
		state.ActionFail: func(l string) error {
			_, err := e.c.Fail(ctx, task.ID, l, "boom", false)
			return err
		},
	}
	refuseAll := func(lease string) {
		t.Helper()
		for a, call := range calls {
			if err := call(lease); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("%s by lease %s: %v, want lease lost", a, lease, err)
			}
		}
	}
	before := e.c.Stats().LastLSN
	for range 3 {
		refuseAll(old.LeaseID)
	}
	if n := e.c.Stats().LastLSN - before; n != uint64(len(calls)) {
		t.Errorf("3 rounds of refused calls by a former lease wrote %d records, want %d (one per action)", n, len(calls))
	}
	h, err := e.c.History(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[state.Action]int{}
	for _, he := range h {
		if r, ok := he.Record.(*state.TaskCancelled); ok {
			if r.LeaseID != old.LeaseID {
				t.Errorf("TaskCancelled names lease %s, want the former lease %s", r.LeaseID, old.LeaseID)
			}
			recorded[r.Action]++
		}
	}
	for a := range calls {
		if recorded[a] != 1 {
			t.Errorf("%d TaskCancelled records of a refused %s, want 1", recorded[a], a)
		}
	}

	// A lease id the task never had: refused, nothing written, and each
	// answer waited for the log.
	cl := e.count()
	before = e.c.Stats().LastLSN
	for range 3 {
		refuseAll("never-granted")
	}
	if n := e.c.Stats().LastLSN - before; n != 0 || cl.appends() != 0 {
		t.Errorf("refused calls by a lease the task never had wrote %d records in %d appends, want none", n, cl.appends())
	}
	if cl.waits() != 3*len(calls) {
		t.Errorf("%d refusals waited for the log %d times, want every one", 3*len(calls), cl.waits())
	}
	// The current lease keeps its authority throughout.
	if _, err := e.c.Heartbeat(ctx, task.ID, cur.LeaseID); err != nil {
		t.Fatalf("heartbeat by the current lease: %v", err)
	}
	e.restart()
}

func TestListPaging(t *testing.T) {
	e := newEnv(t, 12)
	var ids []string
	for i := range 25 {
		q := "a"
		if i%2 == 1 {
			q = "b"
		}
		ids = append(ids, e.submit(q).ID)
	}
	var got []string
	after := uint64(0)
	for {
		page, next, err := e.c.List(ctx, ListFilter{Queue: "a", Limit: 5, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range page {
			got = append(got, tk.ID)
		}
		if next == 0 {
			break
		}
		after = next
	}
	var want []string
	for i, id := range ids {
		if i%2 == 0 {
			want = append(want, id)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("paged %d tasks, want %d", len(got), len(want))
	}
	if _, _, err := e.c.List(ctx, ListFilter{Limit: 5000}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("oversized page: %v", err)
	}
}

func TestRestartExpiresPastDueLeases(t *testing.T) {
	e := newEnv(t, 13)
	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	e.lease("w", "q")
	e.close()
	e.clock.Advance(time.Minute) // down for a minute
	e.open()
	if got := e.get(task.ID); got.State != state.Waiting || got.CurrentLease() != nil {
		t.Fatalf("after restart: %s", got.State)
	}
}

func TestIDsAreUniqueAndSortable(t *testing.T) {
	r := newIDRand(newSeededRand(1))
	a := newID(epoch, r)
	b := newID(epoch.Add(time.Millisecond), r)
	if len(a) != 26 || a == b || a >= b {
		t.Fatalf("ids %q %q", a, b)
	}
}

// TestLeaseAppendAppends: LeaseAppend appends the leases Lease would return
// to the slice it is given, and gives it back unchanged when nothing is
// ready.
func TestLeaseAppendAppends(t *testing.T) {
	e := newEnv(t, 21)
	a, b := e.submit("q"), e.submit("q")
	kept := Lease{TaskID: "kept"}
	out, err := e.c.LeaseAppend(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 5}, []Lease{kept})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0].TaskID != "kept" || out[1].TaskID != a.ID || out[2].TaskID != b.ID || out[1].LeaseID == "" {
		t.Fatalf("LeaseAppend: %+v, want the kept lease then leases of %s and %s", out, a.ID, b.ID)
	}
	out, err = e.c.LeaseAppend(ctx, LeaseRequest{WorkerID: "w", Queue: "q"}, out[:1])
	if err != nil || len(out) != 1 || out[0].TaskID != "kept" {
		t.Fatalf("LeaseAppend with nothing ready: %+v, %v; want the kept lease alone", out, err)
	}
}

// repeatingIDs is an id source whose first two ids' random bits are the
// same: a broken source, for which a batch must still get distinct ids.
type repeatingIDs struct{ off int }

func (r *repeatingIDs) Read(p []byte) (int, error) {
	for i := range p {
		if r.off < 2*idRandBytes {
			p[i] = 7
		} else {
			p[i] = byte(r.off / idRandBytes)
		}
		r.off++
	}
	return len(p), nil
}

// TestBatchIDsDistinctFromABrokenSource: a batch never gives two tasks the
// same id, even when the source repeats itself.
func TestBatchIDsDistinctFromABrokenSource(t *testing.T) {
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(ctx, l, Config{Clock: clock.NewFake(epoch), Rand: &repeatingIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close(); l.Close() }()
	res, err := c.SubmitBatchIDs(ctx, []SubmitRequest{{Queue: "q"}, {Queue: "q"}, {Queue: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].ID == res[1].ID || res[1].ID == res[2].ID || res[0].ID == res[2].ID {
		t.Fatalf("ids %s, %s, %s: want three distinct", res[0].ID, res[1].ID, res[2].ID)
	}
}
