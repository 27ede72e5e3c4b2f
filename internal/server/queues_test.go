package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

func (e *apiEnv) queues() tenurev1connect.QueueServiceClient {
	return tenurev1connect.NewQueueServiceClient(e.hc, e.url)
}

func (e *apiEnv) getQueue(t *testing.T, queue string) *tenurev1.Queue {
	t.Helper()
	resp, err := e.queues().GetQueue(apiCtx(t), connect.NewRequest(&tenurev1.GetQueueRequest{Queue: queue}))
	if err != nil {
		t.Fatalf("GetQueue(%s): %v", queue, err)
	}
	return resp.Msg.GetQueue()
}

// failOne leases one task of queue and fails it for good.
func (e *apiEnv) failOne(t *testing.T, queue string) string {
	t.Helper()
	l := e.leaseOne(t, "w", queue)
	if l == nil {
		t.Fatalf("nothing to lease in %s", queue)
	}
	if _, err := e.worker.Fail(apiCtx(t), connect.NewRequest(&tenurev1.FailRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(), Reason: "boom", Permanent: true})); err != nil {
		t.Fatal(err)
	}
	return l.GetTaskId()
}

// TestQueueStatisticsAndControls drives the queue API end to end on an
// embedded node: statistics follow the tasks, a pause stops leases (but
// not submits) until resume, retry brings a FAILED task back, and the bulk
// actions change what their filter selects and say how many.
func TestQueueStatisticsAndControls(t *testing.T) {
	e := newAPIEnv(t)
	failed, held := queueStatistics(t, e)
	pauseAndResume(t, e, held)
	retryFailed(t, e, failed)
	bulkActions(t, e)
}

// queueStatistics submits five tasks to queue emails, fails one,
// completes one and holds a lease on one, and checks the queue's
// statistics and listing; it returns the failed task and the held lease.
func queueStatistics(t *testing.T, e *apiEnv) (failed string, held *tenurev1.LeasedTask) {
	ctx := apiCtx(t)
	for range 5 {
		e.submit(t, &tenurev1.SubmitRequest{Queue: "emails", Payload: []byte("x")})
	}
	failed = e.failOne(t, "emails")
	done := e.leaseOne(t, "w", "emails")
	if _, err := e.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: done.GetTaskId(), LeaseId: done.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	held = e.leaseOne(t, "w", "emails")

	q := e.getQueue(t, "emails")
	c := q.GetTasks()
	if c.GetWaiting() != 2 || c.GetLeased() != 1 || c.GetCompleted() != 1 || c.GetFailed() != 1 || q.GetActiveLeases() != 1 {
		t.Fatalf("counts %v, %d leases; want 2 waiting, 1 leased, 1 completed, 1 failed, 1 lease", c, q.GetActiveLeases())
	}
	if h := q.GetLastHour(); h.GetSubmitted() != 5 || h.GetCompleted() != 1 || h.GetFailed() != 1 {
		t.Fatalf("last hour %v", h)
	}
	if q.GetOldestWaitingAge() == nil || len(q.GetPerMinute()) != 60 || q.GetPartitions() != 1 {
		t.Fatalf("oldest waiting age %v, %d per-minute buckets, %d partitions", q.GetOldestWaitingAge(), len(q.GetPerMinute()), q.GetPartitions())
	}
	list, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil || len(list.Msg.GetQueues()) != 1 || list.Msg.GetQueues()[0].GetQueue() != "emails" {
		t.Fatalf("ListQueues: %v, %v", list, err)
	}
	return failed, held
}

// pauseAndResume: a paused queue leases nothing but takes submits; the
// pause says who and why; a lease held before it still completes; a
// long-poll waiting on the paused queue gets a task once it resumes.
func pauseAndResume(t *testing.T, e *apiEnv, held *tenurev1.LeasedTask) {
	ctx := apiCtx(t)
	// Pause: no lease, submits still accepted; the pause says who and why.
	p, err := e.queues().PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: "emails", Reason: "incident 42", RequestedBy: "ops@host"}))
	if err != nil || !p.Msg.GetChanged() || !p.Msg.GetQueue().GetPaused() || p.Msg.GetQueue().GetPause().GetRequestedBy() != "ops@host" {
		t.Fatalf("PauseQueue: %v, %v", p, err)
	}
	again, err := e.queues().PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: "emails"}))
	if err != nil || again.Msg.GetChanged() {
		t.Fatalf("second PauseQueue: %v, %v (want no change)", again, err)
	}
	e.submit(t, &tenurev1.SubmitRequest{Queue: "emails"})
	lr, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "emails"}))
	if err != nil || len(lr.Msg.GetTasks()) != 0 {
		t.Fatalf("lease from a paused queue: %v, %v", lr, err)
	}
	// The lease held before the pause still completes.
	if _, err := e.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: held.GetTaskId(), LeaseId: held.GetLeaseId()})); err != nil {
		t.Fatalf("completing a lease held across the pause: %v", err)
	}
	// A long-poll waiting on the paused queue gets a task once it resumes.
	got := make(chan *tenurev1.LeaseResponse, 1)
	go func() {
		r, err := e.worker.Lease(context.Background(), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "emails", Wait: durationpb.New(25 * time.Second)}))
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- r.Msg
	}()
	if _, err := e.queues().ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Queue: "emails", RequestedBy: "ops@host"})); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r == nil || len(r.GetTasks()) != 1 {
		t.Fatalf("long-poll across the resume: %v", r)
	}
}

// retryFailed: the FAILED task waits again, its history says who asked.
func retryFailed(t *testing.T, e *apiEnv, failed string) {
	ctx := apiCtx(t)
	// Retry: the FAILED task waits again, its history says who asked.
	rt, err := e.tasks.RetryTask(ctx, connect.NewRequest(&tenurev1.RetryTaskRequest{TaskId: failed, Reason: "fixed", RequestedBy: "ops@host"}))
	if err != nil || rt.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_WAITING || len(rt.Msg.GetTask().GetExecutions()) != 1 {
		t.Fatalf("RetryTask: %v, %v", rt, err)
	}
	h, err := e.tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: failed}))
	if err != nil {
		t.Fatal(err)
	}
	last := h.Msg.GetEntries()[len(h.Msg.GetEntries())-1]
	if last.GetType() != "TaskRetried" || last.GetRequestedBy() != "ops@host" || last.GetReason() != "fixed" {
		t.Fatalf("last history entry %v", last)
	}
}

// bulkActions: kill what waits, then retry what is dead, then purge what
// is finished; each says how many it changed and skipped.
func bulkActions(t *testing.T, e *apiEnv) {
	ctx := apiCtx(t)
	// Bulk: kill what waits, then retry what is dead, then purge what is
	// finished.
	k, err := e.tasks.KillTasks(ctx, connect.NewRequest(&tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{Queue: "emails", State: tenurev1.TaskState_TASK_STATE_WAITING}}))
	// Waiting: the retried task and two of the three others (the
	// long-poll leased one).
	if err != nil || k.Msg.GetChanged() != 3 {
		t.Fatalf("KillTasks: %v, %v (want the 3 waiting tasks killed)", k, err)
	}
	r, err := e.tasks.RetryTasks(ctx, connect.NewRequest(&tenurev1.RetryTasksRequest{Filter: &tenurev1.TaskFilter{Queue: "emails"}}))
	if err != nil || r.Msg.GetChanged() != 3 || r.Msg.GetSkipped() != 3 {
		t.Fatalf("RetryTasks: %v, %v (want 3 retried; the 2 completed and the leased one skipped)", r, err)
	}
	pg, err := e.tasks.PurgeTasks(ctx, connect.NewRequest(&tenurev1.PurgeTasksRequest{Filter: &tenurev1.TaskFilter{Namespace: "default"}}))
	if err != nil || pg.Msg.GetChanged() != 2 || pg.Msg.GetSkipped() != 4 {
		t.Fatalf("PurgeTasks: %v, %v (want the 2 completed purged, 4 unfinished skipped)", pg, err)
	}
	if n := e.countQueue(t, "emails"); n != 4 {
		t.Fatalf("%d tasks left, want 4", n)
	}
}

// TestQueueControlsBadInput: each bad request is a clear error and changes
// nothing.
func TestQueueControlsBadInput(t *testing.T) {
	e := newAPIEnv(t)
	done := e.submit(t, &tenurev1.SubmitRequest{Queue: "q"})
	l := e.leaseOne(t, "w", "q")
	if _, err := e.worker.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	waiting := e.submit(t, &tenurev1.SubmitRequest{Queue: "q"})
	unchanged := func(t *testing.T) {
		q := e.getQueue(t, "q")
		if q.GetPaused() || q.GetTasks().GetCompleted() != 1 || q.GetTasks().GetWaiting() != 1 {
			t.Fatalf("the queue changed: %v", q)
		}
	}
	ctx := apiCtx(t)
	for _, c := range queueBadCalls(ctx, e, done.GetTaskId(), waiting.GetTaskId()) {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if connect.CodeOf(err) != c.code {
				t.Fatalf("got %v, want code %v", err, c.code)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not mention %q", err, m)
				}
			}
			unchanged(t)
		})
	}
	// All is explicit consent: it kills the one waiting task.
	k, err := e.tasks.KillTasks(ctx, connect.NewRequest(&tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{All: true}}))
	if err != nil || k.Msg.GetChanged() != 1 || k.Msg.GetSkipped() != 1 {
		t.Fatalf("KillTasks all: %v, %v", k, err)
	}
}

// badCall is a call that must fail with code, its message mentioning
// each of mention.
type badCall struct {
	name    string
	call    func() error
	code    connect.Code
	mention []string
}

// queueBadCalls are the bad calls of TestQueueControlsBadInput, about
// queue q of e, which holds task done (COMPLETED) and task waiting.
func queueBadCalls(ctx context.Context, e *apiEnv, done, waiting string) []badCall {
	return []badCall{
		{"pause of an unknown queue", func() error {
			_, err := e.queues().PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: "nope"}))
			return err
		}, connect.CodeNotFound, []string{`"nope"`, "tenure queues"}},
		{"resume of an unknown queue", func() error {
			_, err := e.queues().ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Queue: "nope"}))
			return err
		}, connect.CodeNotFound, []string{`"nope"`}},
		{"get of an unknown queue", func() error {
			_, err := e.queues().GetQueue(ctx, connect.NewRequest(&tenurev1.GetQueueRequest{Queue: "nope"}))
			return err
		}, connect.CodeNotFound, []string{`"nope"`}},
		{"retry of a COMPLETED task", func() error {
			_, err := e.tasks.RetryTask(ctx, connect.NewRequest(&tenurev1.RetryTaskRequest{TaskId: done}))
			return err
		}, connect.CodeFailedPrecondition, []string{"COMPLETED", "submit a new task"}},
		{"retry of a waiting task", func() error {
			_, err := e.tasks.RetryTask(ctx, connect.NewRequest(&tenurev1.RetryTaskRequest{TaskId: waiting}))
			return err
		}, connect.CodeFailedPrecondition, []string{"WAITING", "FAILED or DEAD"}},
		{"retry of an unknown task", func() error {
			_, err := e.tasks.RetryTask(ctx, connect.NewRequest(&tenurev1.RetryTaskRequest{TaskId: "nope"}))
			return err
		}, connect.CodeNotFound, []string{`"nope"`}},
		{"bulk kill with no filter", func() error {
			_, err := e.tasks.KillTasks(ctx, connect.NewRequest(&tenurev1.KillTasksRequest{}))
			return err
		}, connect.CodeInvalidArgument, []string{"no filter", "--all"}},
		{"bulk purge with no filter", func() error {
			_, err := e.tasks.PurgeTasks(ctx, connect.NewRequest(&tenurev1.PurgeTasksRequest{Filter: &tenurev1.TaskFilter{}}))
			return err
		}, connect.CodeInvalidArgument, []string{"no filter"}},
		{"bulk retry of COMPLETED tasks", func() error {
			_, err := e.tasks.RetryTasks(ctx, connect.NewRequest(&tenurev1.RetryTasksRequest{Filter: &tenurev1.TaskFilter{State: tenurev1.TaskState_TASK_STATE_COMPLETED}}))
			return err
		}, connect.CodeInvalidArgument, []string{"filter.state", "COMPLETED"}},
		{"all with another filter", func() error {
			_, err := e.tasks.KillTasks(ctx, connect.NewRequest(&tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{Queue: "q", All: true}}))
			return err
		}, connect.CodeInvalidArgument, []string{"all"}},
	}
}

// TestRequestIDReusedForAnotherTask: a submit that repeats a request id
// with the same queue and payload is answered with the first task; with
// another queue or payload it is refused, naming the id and the task.
func TestRequestIDReusedForAnotherTask(t *testing.T) {
	e := newAPIEnv(t)
	first := e.submit(t, &tenurev1.SubmitRequest{Queue: "q", Payload: []byte("a"), RequestId: "order-42"})
	resp, err := e.tasks.Submit(apiCtx(t), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", Payload: []byte("a"), RequestId: "order-42"}))
	if err != nil || !resp.Msg.GetDuplicate() || resp.Msg.GetTask().GetTaskId() != first.GetTaskId() {
		t.Fatalf("true retry: %v, %v", resp, err)
	}
	for _, req := range []*tenurev1.SubmitRequest{
		{Queue: "q", Payload: []byte("b"), RequestId: "order-42"},
		{Queue: "other", Payload: []byte("a"), RequestId: "order-42"},
	} {
		_, err := e.tasks.Submit(apiCtx(t), connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "order-42") || !strings.Contains(err.Error(), first.GetTaskId()) {
			t.Fatalf("reused request id for %v: %v", req, err)
		}
	}
	_, err = e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
		{Queue: "q", Payload: []byte("x"), RequestId: "batch-1"},
		{Queue: "q", Payload: []byte("y"), RequestId: "batch-1"},
	}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "requests[1].request_id") {
		t.Fatalf("a batch reusing a request id for two payloads: %v", err)
	}
	if n := e.countQueue(t, "q") + e.countQueue(t, "other"); n != 1 {
		t.Fatalf("%d tasks, want only the first", n)
	}
}
