package server_test

// Bad input over the API: every malformed or out-of-limit request gets the
// right Connect code and a message that names the field or says what to do;
// the server keeps serving and no earlier task is lost.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// badCase is one bad request and what must come back.
type badCase struct {
	name string
	// Either a raw JSON request (procedure and body) ...
	procedure string
	body      string
	// ... or a call through the Connect protobuf client.
	call func(ctx context.Context) error

	code connect.Code
	// mention are substrings the message must contain (case-insensitive):
	// the field, the limit, or what to do.
	mention []string
	// after checks that the request changed nothing.
	after func(t *testing.T)
}

func (c badCase) run(t *testing.T, e *apiEnv) {
	var code, msg string
	if c.call != nil {
		err := c.call(apiCtx(t))
		if err == nil {
			t.Fatalf("call succeeded, want %v", c.code)
		}
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("error %v is not a *connect.Error", err)
		}
		code, msg = ce.Code().String(), ce.Message()
	} else {
		status, body := e.postJSON(t, c.procedure, c.body)
		if status == http.StatusOK {
			t.Fatalf("POST %s %.200s: 200 %.300s, want %v", c.procedure, c.body, body, c.code)
		}
		var eb connectErrorBody
		if err := json.Unmarshal(body, &eb); err != nil {
			t.Fatalf("POST %s: the error body is not Connect's JSON error (%v): %d %.300s", c.procedure, err, status, body)
		}
		code, msg = eb.Code, eb.Message
	}
	t.Logf("%s: %s", code, msg)
	if code != c.code.String() {
		t.Errorf("code %q (message %q), want %q", code, msg, c.code.String())
	}
	for _, m := range c.mention {
		if !strings.Contains(strings.ToLower(msg), strings.ToLower(m)) {
			t.Errorf("message %q does not mention %q", msg, m)
		}
	}
	if c.after != nil {
		c.after(t)
	}
}

// badInput is what the bad requests of TestAPIBadInput meet: good tasks
// that none of them may lose or change, and a task leased by a holder, for
// the foreign-lease cases.
type badInput struct {
	e         *apiEnv
	good      map[string][]byte // payloads by task id
	heldID    string
	heldLease *tenurev1.LeasedTask
	foreign   string // a made-up lease id
	big       string // a 2 MiB payload, base64
}

func newBadInput(t *testing.T) *badInput {
	t.Helper()
	e := newAPIEnv(t)
	b := &badInput{e: e, good: map[string][]byte{}, foreign: "made-up-lease-0001",
		big: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xab}, 2<<20))}
	for i := range 5 {
		payload := []byte(fmt.Sprintf("good-%d\x00\xff", i))
		task := e.submit(t, &tenurev1.SubmitRequest{Queue: "good", Payload: payload})
		b.good[task.GetTaskId()] = payload
	}
	held := e.submit(t, &tenurev1.SubmitRequest{Queue: "held", ExecutionWindow: durationpb.New(time.Hour)})
	b.heldLease = e.leaseOne(t, "holder", "held")
	if b.heldLease == nil || b.heldLease.GetTaskId() != held.GetTaskId() {
		t.Fatalf("leasing the held task: got %v", b.heldLease)
	}
	b.heldID = held.GetTaskId()
	return b
}

// emptyQueue checks that queue holds no task (a failed batch created none).
func (b *badInput) emptyQueue(queue string) func(t *testing.T) {
	return func(t *testing.T) {
		if n := b.e.countQueue(t, queue); n != 0 {
			t.Errorf("queue %s holds %d tasks after a failed batch, want 0", queue, n)
		}
	}
}

// TestAPIBadInput: each bad request of the groups below is refused with
// its code and a message naming what to fix; max_attempts 0 takes the
// default; a stale commit is refused; and afterwards nothing was lost or
// changed (unharmed).
func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	b := newBadInput(t)
	e := b.e
	cases := slices.Concat(b.malformed(), b.outOfLimits(), b.unknownTasks(), b.foreignLeases(), b.batches(), listing())
	t.Run("bad", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, e)
			})
		}

		t.Run("max attempts 0 takes the default", func(t *testing.T) {
			t.Parallel()
			status, body := e.postJSON(t, submitProc, `{"queue":"attempts-default","retryPolicy":{"maxAttempts":0}}`)
			if status != http.StatusOK {
				t.Fatalf("Submit with max_attempts 0: %d %s, want 200", status, body)
			}
			var resp struct {
				Task struct {
					RetryPolicy struct {
						MaxAttempts int `json:"maxAttempts"`
					} `json:"retryPolicy"`
				} `json:"task"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatalf("decoding %s: %v", body, err)
			}
			if got := resp.Task.RetryPolicy.MaxAttempts; got < 1 {
				t.Errorf("max_attempts 0 became %d, want the default (>= 1)", got)
			}
		})

		t.Run("stale commit after another lease committed", func(t *testing.T) {
			t.Parallel()
			staleCommit(t, e)
		})
	})
	b.unharmed(t)
}

// unharmed checks that the server still serves and that the bad requests
// lost or changed nothing: the good tasks are as they were, the holder
// still holds its task and completes it, and a new task goes all the way
// through.
func (b *badInput) unharmed(t *testing.T) {
	e := b.e
	// The server still serves, and nothing was lost or changed.
	resp, err := e.hc.Get(e.url + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d after the bad requests, want 200", resp.StatusCode)
	}
	for id, payload := range b.good {
		resp, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Errorf("GetTask(%s) after the bad requests: %v", id, err)
			continue
		}
		got := resp.Msg.GetTask()
		if !bytes.Equal(got.GetPayload(), payload) || got.GetState() != tenurev1.TaskState_TASK_STATE_WAITING {
			t.Errorf("task %s = payload %q %v, want payload %q WAITING", id, got.GetPayload(), got.GetState(), payload)
		}
	}
	if n := e.countQueue(t, "good"); n != len(b.good) {
		t.Errorf("queue b.good holds %d tasks, want %d", n, len(b.good))
	}

	// The foreign leases changed nothing: the holder still holds the task
	// and can complete it.
	got, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: b.heldID}))
	if err != nil {
		t.Fatalf("GetTask(held): %v", err)
	}
	if st, l := got.Msg.GetTask().GetState(), got.Msg.GetTask().GetLeaseId(); st != tenurev1.TaskState_TASK_STATE_LEASED || l != b.heldLease.GetLeaseId() {
		t.Errorf("held task is %v with lease %q, want LEASED by %q", st, l, b.heldLease.GetLeaseId())
	}
	if _, err := e.worker.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: b.heldID, LeaseId: b.heldLease.GetLeaseId(), Result: []byte("done")})); err != nil {
		t.Errorf("Complete by the real holder: %v", err)
	}

	// A new task still goes all the way through.
	task := e.submit(t, &tenurev1.SubmitRequest{Queue: "after", Payload: []byte("after")})
	lt := e.leaseOne(t, "after-worker", "after")
	if lt == nil || lt.GetTaskId() != task.GetTaskId() || !bytes.Equal(lt.GetPayload(), []byte("after")) {
		t.Fatalf("leasing the new task: got %v", lt)
	}
	if _, err := e.worker.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(), Result: []byte("ok")})); err != nil {
		t.Fatalf("Complete of the new task: %v", err)
	}
	final, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: task.GetTaskId()}))
	if err != nil {
		t.Fatalf("GetTask(new): %v", err)
	}
	if st := final.Msg.GetTask().GetState(); st != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Errorf("new task is %v, want COMPLETED", st)
	}
}

// malformed: requests the API cannot read or that lack what they need.
func (b *badInput) malformed() []badCase {
	return []badCase{
		{name: "malformed JSON", procedure: submitProc, body: `{"queue":`, code: connect.CodeInvalidArgument, mention: []string{"json"}},
		{name: "missing queue", procedure: submitProc, body: `{"payload":"aGk="}`, code: connect.CodeInvalidArgument, mention: []string{"queue", "required"}},
		{name: "empty body", procedure: submitProc, body: ``, code: connect.CodeInvalidArgument, mention: []string{"queue"}},
		{name: "unknown field", procedure: submitProc, body: `{"queue":"q","bogus":1}`, code: connect.CodeInvalidArgument, mention: []string{"bogus"}},
		{name: "wrong type", procedure: submitProc, body: `{"queue":5}`, code: connect.CodeInvalidArgument, mention: []string{"queue"}},
		{name: "payload not base64", procedure: submitProc, body: `{"queue":"q","payload":"!!not base64!!"}`, code: connect.CodeInvalidArgument, mention: []string{"payload"}},
		{name: "queue with a space", procedure: submitProc, body: `{"queue":"a b"}`, code: connect.CodeInvalidArgument, mention: []string{"queue"}},
		{name: "missing queue via protobuf", call: func(ctx context.Context) error {
			_, err := b.e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Payload: []byte("x")}))
			return err
		}, code: connect.CodeInvalidArgument, mention: []string{"queue"}},
	}
}

// outOfLimits: durations, sizes and counts out of range.
func (b *badInput) outOfLimits() []badCase {
	return []badCase{
		{name: "negative execution window", procedure: submitProc, body: `{"queue":"q","executionWindow":"-5s"}`, code: connect.CodeInvalidArgument, mention: []string{"execution_window", "negative"}},
		{name: "negative initial backoff", procedure: submitProc, body: `{"queue":"q","retryPolicy":{"initialBackoff":"-1s"}}`, code: connect.CodeInvalidArgument, mention: []string{"retry_policy.initial_backoff"}},
		{name: "negative max backoff", procedure: submitProc, body: `{"queue":"q","retryPolicy":{"maxBackoff":"-1s"}}`, code: connect.CodeInvalidArgument, mention: []string{"retry_policy.max_backoff"}},
		{name: "negative lease wait", procedure: leaseProc, body: `{"workerId":"w","queue":"q","wait":"-1s"}`, code: connect.CodeInvalidArgument, mention: []string{"wait"}},
		{name: "execution window 50ms", procedure: submitProc, body: `{"queue":"q","executionWindow":"0.050s"}`, code: connect.CodeInvalidArgument, mention: []string{"execution_window", "100ms"}},
		{name: "execution window 25h", procedure: submitProc, body: `{"queue":"q","executionWindow":"90000s"}`, code: connect.CodeInvalidArgument, mention: []string{"execution_window", "24h"}},
		{name: "max attempts 1001", procedure: submitProc, body: `{"queue":"q","retryPolicy":{"maxAttempts":1001}}`, code: connect.CodeInvalidArgument, mention: []string{"max_attempts", "1000"}},
		{name: "backoff multiplier 0.5", procedure: submitProc, body: `{"queue":"q","retryPolicy":{"backoffMultiplier":0.5}}`, code: connect.CodeInvalidArgument, mention: []string{"backoff_multiplier"}},
		{name: "not_before too far ahead", procedure: submitProc, body: `{"queue":"q","notBefore":"2999-01-01T00:00:00Z"}`, code: connect.CodeInvalidArgument, mention: []string{"not_before"}},
		{name: "deadline in the past", procedure: submitProc, body: `{"queue":"deadline-a","deadline":"2000-01-01T00:00:00Z"}`, code: connect.CodeInvalidArgument, mention: []string{"deadline", "in the past"}, after: b.emptyQueue("deadline-a")},
		{name: "deadline too far ahead", procedure: submitProc, body: `{"queue":"deadline-b","deadline":"2999-01-01T00:00:00Z"}`, code: connect.CodeInvalidArgument, mention: []string{"deadline", "ahead"}, after: b.emptyQueue("deadline-b")},
		{name: "deadline and timeout", procedure: submitProc, body: `{"queue":"deadline-c","deadline":"2999-01-01T00:00:00Z","timeout":"60s"}`, code: connect.CodeInvalidArgument, mention: []string{"timeout", "exclude"}, after: b.emptyQueue("deadline-c")},
		{name: "zero timeout", procedure: submitProc, body: `{"queue":"deadline-d","timeout":"0s"}`, code: connect.CodeInvalidArgument, mention: []string{"timeout", "positive"}, after: b.emptyQueue("deadline-d")},
		{name: "negative timeout", procedure: submitProc, body: `{"queue":"deadline-e","timeout":"-1s"}`, code: connect.CodeInvalidArgument, mention: []string{"timeout", "negative"}, after: b.emptyQueue("deadline-e")},
		{name: "timeout before not_before", procedure: submitProc, body: `{"queue":"deadline-f","timeout":"60s","notBefore":"` + time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339) + `"}`, code: connect.CodeInvalidArgument, mention: []string{"timeout", "not_before"}, after: b.emptyQueue("deadline-f")},
		{name: "batch with a deadline in the past", procedure: submitBatchProc,
			body: `{"requests":[{"queue":"deadline-g"},{"queue":"deadline-g","deadline":"2000-01-01T00:00:00Z"}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"requests[1].deadline"}, after: b.emptyQueue("deadline-g")},
		{name: "2 MiB payload", procedure: submitProc, body: `{"queue":"q","payload":"` + b.big + `"}`, code: connect.CodeResourceExhausted, mention: []string{"payload", "1048576"}},
		{name: "2 MiB result", call: func(ctx context.Context) error {
			_, err := b.e.worker.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: b.heldID, LeaseId: b.heldLease.GetLeaseId(), Result: make([]byte, 2<<20)}))
			return err
		}, code: connect.CodeResourceExhausted, mention: []string{"result", "1048576"}},
		{name: "lease without worker_id", procedure: leaseProc, body: `{"queue":"q"}`, code: connect.CodeInvalidArgument, mention: []string{"worker_id"}},
		{name: "lease without queue", procedure: leaseProc, body: `{"workerId":"w"}`, code: connect.CodeInvalidArgument, mention: []string{"queue"}},
		// worker.proto: max_tasks is 0..100.
		{name: "lease max_tasks 1001", procedure: leaseProc, body: `{"workerId":"w","queue":"max-tasks","maxTasks":1001}`, code: connect.CodeInvalidArgument, mention: []string{"max_tasks", "1000"}},
		{name: "lease wait over 30s", procedure: leaseProc, body: `{"workerId":"w","queue":"long-wait","wait":"60s"}`, code: connect.CodeInvalidArgument, mention: []string{"wait", "30s"}},
	}
}

// unknownTasks: calls about tasks that do not exist.
func (b *badInput) unknownTasks() []badCase {
	return []badCase{
		{name: "get unknown task", procedure: getProc, body: `{"taskId":"no-such-task-1"}`, code: connect.CodeNotFound, mention: []string{"no-such-task-1"}},
		{name: "kill unknown task", procedure: killProc, body: `{"taskId":"no-such-task-2","reason":"r"}`, code: connect.CodeNotFound, mention: []string{"no-such-task-2"}},
		{name: "history of unknown task", procedure: historyProc, body: `{"taskId":"no-such-task-3"}`, code: connect.CodeNotFound, mention: []string{"no-such-task-3"}},
		{name: "commit unknown task", procedure: commitProc, body: `{"taskId":"no-such-task-4","leaseId":"l"}`, code: connect.CodeNotFound, mention: []string{"no-such-task-4"}},
		{name: "get without task_id", procedure: getProc, body: `{}`, code: connect.CodeInvalidArgument, mention: []string{"task_id"}},
		{name: "commit unknown task via protobuf", call: func(ctx context.Context) error {
			_, err := b.e.worker.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: "no-such-task-5", LeaseId: "l"}))
			return err
		}, code: connect.CodeNotFound, mention: []string{"no-such-task-5"}},
	}
}

// foreignLeases: a foreign lease on a real, leased task.
func (b *badInput) foreignLeases() []badCase {
	return []badCase{
		{name: "commit with a b.foreign lease", procedure: commitProc, body: fmt.Sprintf(`{"taskId":%q,"leaseId":%q,"result":"eA=="}`, b.heldID, b.foreign), code: connect.CodeFailedPrecondition, mention: []string{"lease lost", "do not apply"}},
		{name: "heartbeat with a b.foreign lease", procedure: heartbeatProc, body: fmt.Sprintf(`{"taskId":%q,"leaseId":%q}`, b.heldID, b.foreign), code: connect.CodeFailedPrecondition, mention: []string{"lease lost"}},
		{name: "complete with a b.foreign lease", call: func(ctx context.Context) error {
			_, err := b.e.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: b.heldID, LeaseId: b.foreign}))
			return err
		}, code: connect.CodeFailedPrecondition, mention: []string{"lease lost"}},
		{name: "fail with a b.foreign lease", call: func(ctx context.Context) error {
			_, err := b.e.worker.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: b.heldID, LeaseId: b.foreign, Reason: "r", Permanent: true}))
			return err
		}, code: connect.CodeFailedPrecondition, mention: []string{"lease lost"}},
		{name: "start with a b.foreign lease", call: func(ctx context.Context) error {
			_, err := b.e.worker.Start(ctx, connect.NewRequest(&tenurev1.StartRequest{TaskId: b.heldID, LeaseId: b.foreign}))
			return err
		}, code: connect.CodeFailedPrecondition, mention: []string{"lease lost"}},
	}
}

// batches: one bad item fails the call and creates nothing.
func (b *badInput) batches() []badCase {
	return []badCase{
		{name: "batch with a task without queue", procedure: submitBatchProc,
			body: `{"requests":[{"queue":"batch-a","payload":"eA=="},{"queue":"batch-a"},{"payload":"eA=="}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"requests[2].queue"}, after: b.emptyQueue("batch-a")},
		{name: "batch with a negative window", procedure: submitBatchProc,
			body: `{"requests":[{"queue":"batch-b"},{"queue":"batch-b","executionWindow":"-1s"},{"queue":"batch-b"}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"[1].execution_window"}, after: b.emptyQueue("batch-b")},
		{name: "batch with a window out of range", procedure: submitBatchProc,
			body: `{"requests":[{"queue":"batch-c"},{"queue":"batch-c","executionWindow":"0.050s"}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"[1].execution_window"}, after: b.emptyQueue("batch-c")},
		{name: "batch with a 2 MiB payload", procedure: submitBatchProc,
			body: `{"requests":[{"queue":"batch-d"},{"queue":"batch-d","payload":"` + b.big + `"}]}`,
			code: connect.CodeResourceExhausted, mention: []string{"[1].payload", "1048576"}, after: b.emptyQueue("batch-d")},
		{name: "batch of 1001 via protobuf", call: func(ctx context.Context) error {
			reqs := make([]*tenurev1.SubmitRequest, 1001)
			for i := range reqs {
				reqs[i] = &tenurev1.SubmitRequest{Queue: "batch-e"}
			}
			_, err := b.e.tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs}))
			return err
		}, code: connect.CodeInvalidArgument, mention: []string{"1000"}, after: b.emptyQueue("batch-e")},
		{name: "empty batch", procedure: submitBatchProc, body: `{"requests":[]}`, code: connect.CodeInvalidArgument, mention: []string{"at least one"}},
	}
}

// listing: bad paging and filters.
func listing() []badCase {
	return []badCase{
		{name: "bad page token", procedure: listProc, body: `{"pageToken":"not-a-token"}`, code: connect.CodeInvalidArgument, mention: []string{"page_token", "next_page_token"}},
		{name: "page size 1001", procedure: listProc, body: `{"pageSize":1001}`, code: connect.CodeInvalidArgument, mention: []string{"page_size", "1000"}},
		{name: "negative page size", procedure: listProc, body: `{"pageSize":-1}`, code: connect.CodeInvalidArgument, mention: []string{"page_size"}},
		{name: "unknown state", procedure: listProc, body: `{"state":99}`, code: connect.CodeInvalidArgument, mention: []string{"state"}},
	}
}

// staleCommit: lease A expires, lease B commits, then A's Commit is refused
// with already_exists.
func staleCommit(t *testing.T, e *apiEnv) {
	const queue = "stale"
	task := e.submit(t, &tenurev1.SubmitRequest{
		Queue:           queue,
		ExecutionWindow: durationpb.New(200 * time.Millisecond),
		RetryPolicy: &tenurev1.RetryPolicy{
			MaxAttempts:    1000,
			InitialBackoff: durationpb.New(time.Millisecond),
			MaxBackoff:     durationpb.New(time.Millisecond),
		},
	})
	a := e.leaseOne(t, "worker-a", queue)
	if a == nil || a.GetTaskId() != task.GetTaskId() {
		t.Fatalf("lease A: got %v", a)
	}
	// B leases once A's lease expired, and commits within its own window;
	// a slow machine may need a few tries.
	committed := false
	for try := 0; try < 50 && !committed; try++ {
		b := e.leaseOne(t, "worker-b", queue)
		if b == nil {
			continue
		}
		_, err := e.worker.Commit(apiCtx(t), connect.NewRequest(&tenurev1.CommitRequest{TaskId: b.GetTaskId(), LeaseId: b.GetLeaseId(), Result: []byte("b")}))
		switch {
		case err == nil:
			committed = true
		case connect.CodeOf(err) == connect.CodeFailedPrecondition: // B's own lease ran out first
		default:
			t.Fatalf("commit by lease B: %v", err)
		}
	}
	if !committed {
		t.Fatal("no lease B managed to commit within its window in 50 tries")
	}
	badCase{
		procedure: commitProc,
		body:      fmt.Sprintf(`{"taskId":%q,"leaseId":%q,"result":"YQ=="}`, a.GetTaskId(), a.GetLeaseId()),
		code:      connect.CodeAlreadyExists,
		mention:   []string{"already committed", "do not apply"},
	}.run(t, e)
	got, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: task.GetTaskId()}))
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if r := got.Msg.GetTask().GetResult(); !bytes.Equal(r, []byte("b")) {
		t.Errorf("result %q after the stale commit, want B's %q", r, "b")
	}
}
