package client_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestQueuesAndControls calls every queue method and every operator's
// action against a real server on a fake clock, once per protocol, and
// checks what comes back: the statistics, the pause and who asked for
// each action (Options.RequestedBy, or the request's own).
func TestQueuesAndControls(t *testing.T) {
	eachOps(t, func(t *testing.T, clk *clock.Fake, c *client.Client) {
		ctx := t.Context()
		submit := func(ns, q string) string {
			t.Helper()
			res, err := c.Submit(ctx, client.SubmitRequest{Namespace: ns, Queue: q, ExecutionWindow: time.Hour})
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			return res.TaskID
		}
		lease := func() client.LeasedTask {
			t.Helper()
			l, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "q1"}))
			if err != nil || len(l) != 1 {
				t.Fatalf("Lease: %+v, %v", l, err)
			}
			return l[0]
		}

		// q1: 4 tasks submitted at 03:04:05; at 03:14:05 one FAILED,
		// one COMPLETED, one LEASED (for an hour), one still WAITING.
		// other/q2: one WAITING task, submitted at 03:16:06.5.
		for range 4 {
			submit("", "q1")
		}
		clk.Advance(10 * time.Minute)
		l := lease()
		if _, err := c.Fail(ctx, client.FailRequest{TaskID: l.ID, LeaseID: l.LeaseID, Reason: "boom", Permanent: true}); err != nil {
			t.Fatal(err)
		}
		failed := l.ID
		l = lease()
		if err := c.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
			t.Fatal(err)
		}
		completed := l.ID
		held := lease()
		clk.Advance(2*time.Minute + 1500*time.Millisecond)
		t2 := clk.Now()
		other := submit("other", "q2")

		qs, err := client.Collect(c.ListQueues(ctx, client.ListQueuesRequest{}))
		if err != nil || len(qs) != 2 || qs[0].Namespace != "default" || qs[0].Queue != "q1" || qs[1].Namespace != "other" || qs[1].Queue != "q2" {
			t.Fatalf("ListQueues: %+v, %v; want default/q1 and other/q2", qs, err)
		}
		q1 := *qs[0]
		if q1.Tasks != (client.TaskCounts{Waiting: 1, Leased: 1, Completed: 1, Failed: 1}) || q1.ActiveLeases != 1 ||
			q1.OldestWaitingAge != t2.Sub(t0) || q1.Paused || q1.Pause != nil || q1.Partitions != 1 || q1.PausedPartitions != 0 {
			t.Fatalf("default/q1: %+v; want 1 task in each of WAITING, LEASED, COMPLETED, FAILED, 1 lease, waited %v, running, 1 partition", q1, t2.Sub(t0))
		}
		// The current minute is 03:16 (PerMinute[59]), so 03:14 is
		// PerMinute[57] and 03:04 PerMinute[47].
		ended := client.QueueEvents{Completed: 1, Failed: 1}
		if q1.LastMinute != (client.QueueEvents{}) || q1.Last5Minutes != ended || q1.LastHour != (client.QueueEvents{Submitted: 4, Completed: 1, Failed: 1}) ||
			len(q1.PerMinute) != 60 || q1.PerMinute[57] != ended || q1.PerMinute[47] != (client.QueueEvents{Submitted: 4}) {
			t.Fatalf("default/q1 events: last minute %+v, 5 minutes %+v, hour %+v, per minute %+v; want none, 1 completed and 1 failed, "+
				"those and 4 submitted, 4 submitted at [47] and the rest at [57]", q1.LastMinute, q1.Last5Minutes, q1.LastHour, q1.PerMinute)
		}
		if q2 := qs[1]; q2.Tasks != (client.TaskCounts{Waiting: 1}) || q2.OldestWaitingAge != 0 || q2.LastMinute.Submitted != 1 {
			t.Fatalf("other/q2: %+v; want 1 waiting task, just due", q2)
		}
		if ns, err := client.Collect(c.ListQueues(ctx, client.ListQueuesRequest{Namespace: "other"})); err != nil || len(ns) != 1 || ns[0].Queue != "q2" {
			t.Fatalf("ListQueues of namespace other: %+v, %v; want other/q2 alone", ns, err)
		}
		got, err := c.GetQueue(ctx, client.GetQueueRequest{Namespace: "", Queue: "q1"})
		if err != nil || !reflect.DeepEqual(*got, q1) {
			t.Fatalf("GetQueue(default/q1): %+v, %v\nwant what ListQueues answered: %+v", got, err, q1)
		}

		// Pause: who and why kept; a second pause changes nothing; no
		// lease while paused.
		p, err := c.PauseQueue(ctx, client.PauseQueueRequest{Queue: "q1", Reason: "incident"})
		if err != nil || !p.Changed || !p.Queue.Paused || p.Queue.PausedPartitions != 1 || p.Queue.Queue != "q1" ||
			p.Queue.Pause == nil || *p.Queue.Pause != (client.QueuePause{RequestedBy: "ops@box", Reason: "incident", PausedAt: t2}) {
			t.Fatalf("PauseQueue: %+v (pause %+v), %v; want paused by ops@box for incident at %v", p, p.Queue.Pause, err, t2)
		}
		p, err = c.PauseQueue(ctx, client.PauseQueueRequest{Queue: "q1", Reason: "again", RequestedBy: "eve@y"})
		if err != nil || p.Changed || !p.Queue.Paused || p.Queue.Pause.RequestedBy != "ops@box" {
			t.Fatalf("second PauseQueue: %+v, %v; want no change, the first pause kept", p, err)
		}
		if l, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "q1"})); err != nil || len(l) != 0 {
			t.Fatalf("Lease from the paused queue: %+v, %v; want nothing", l, err)
		}
		r, err := c.ResumeQueue(ctx, client.ResumeQueueRequest{Queue: "q1", Reason: "over", RequestedBy: "eve@y"})
		if err != nil || !r.Changed || r.Queue.Paused || r.Queue.Pause != nil || r.Queue.PausedPartitions != 0 {
			t.Fatalf("ResumeQueue: %+v, %v; want running", r, err)
		}
		if r, err := c.ResumeQueue(ctx, client.ResumeQueueRequest{Queue: "q1"}); err != nil || r.Changed {
			t.Fatalf("second ResumeQueue: %+v, %v; want no change", r, err)
		}

		// RetryTask: WAITING again, its history names Options.RequestedBy.
		task, err := c.RetryTask(ctx, client.RetryTaskRequest{TaskID: failed, Reason: "fixed"})
		if err != nil || task.ID != failed || task.State != client.TaskStateWaiting || len(task.Executions) != 1 {
			t.Fatalf("RetryTask: %+v, %v; want the task WAITING with its execution", task, err)
		}
		checkLastEntry(t, c, failed, "TaskRetried", "ops@box", "fixed")
		// KillTask also sends Options.RequestedBy.
		if _, err := c.KillTask(ctx, client.KillTaskRequest{TaskID: held.ID, Reason: "stop"}); err != nil {
			t.Fatal(err)
		}
		checkLastEntry(t, c, held.ID, "TaskDead", "ops@box", "stop")

		// Bulk: kill what waits in q1 (the request names who asks),
		// retry what is dead, purge what is finished.
		k, err := c.KillTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{Queue: "q1", State: client.TaskStateWaiting}, Reason: "cleanup", RequestedBy: "bob@z"})
		if err != nil || k != (client.BulkResult{Changed: 2}) {
			t.Fatalf("KillTasks of WAITING q1: %+v, %v; want 2 killed", k, err)
		}
		checkLastEntry(t, c, failed, "TaskDead", "bob@z", "cleanup")
		// Created before: other/q2's task was created at t2 exactly.
		k, err = c.KillTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{Namespace: "other", CreatedBefore: t2}})
		if err != nil || k != (client.BulkResult{}) {
			t.Fatalf("KillTasks created before %v: %+v, %v; want nothing selected", t2, k, err)
		}
		rt, err := c.RetryTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{Namespace: "default"}})
		if err != nil || rt != (client.BulkResult{Changed: 3, Skipped: 1}) {
			t.Fatalf("RetryTasks of default: %+v, %v; want the 3 DEAD retried, the COMPLETED one skipped", rt, err)
		}
		pg, err := c.PurgeTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{All: true}})
		if err != nil || pg != (client.BulkResult{Changed: 1, Skipped: 4}) {
			t.Fatalf("PurgeTasks of all: %+v, %v; want the COMPLETED one purged, 4 waiting skipped", pg, err)
		}
		if _, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: completed}); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("GetTask of the purged task: %v; want ErrNotFound", err)
		}
		k, err = c.KillTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{Namespace: "other", CreatedBefore: t2.Add(time.Millisecond)}})
		if err != nil || k != (client.BulkResult{Changed: 1}) {
			t.Fatalf("KillTasks created before %v: %+v, %v; want other/q2's task killed", t2.Add(time.Millisecond), k, err)
		}
		if task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: other}); err != nil || task.State != client.TaskStateDead {
			t.Fatalf("other/q2's task: %+v, %v; want DEAD", task, err)
		}
	})
}

// checkLastEntry checks the last history entry of a task: its type, who
// asked and why.
func checkLastEntry(t *testing.T, c *client.Client, id, typ, by, reason string) {
	t.Helper()
	h, err := c.GetTaskHistory(t.Context(), client.GetTaskHistoryRequest{TaskID: id})
	if err != nil || len(h) == 0 {
		t.Fatalf("GetTaskHistory(%s): %+v, %v", id, h, err)
	}
	if e := h[len(h)-1]; e.Type != typ || e.RequestedBy != by || e.Reason != reason {
		t.Fatalf("last history entry of %s: %+v; want %s requested by %q for %q", id, e, typ, by, reason)
	}
}

// TestQueueAndControlErrors: each call refused as the API documents, with
// its sentinel and fields.
func TestQueueAndControlErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newClient(t, startServer(t, nil), client.Options{})
	res, err := c.Submit(ctx, client.SubmitRequest{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "q", Wait: 10 * time.Second}))
	if err != nil || len(l) != 1 {
		t.Fatalf("Lease: %+v, %v", l, err)
	}
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: l[0].ID, LeaseID: l[0].LeaseID}); err != nil {
		t.Fatal(err)
	}

	notFound := func(op string) errorCase {
		return errorCase{client.ErrNotFound, client.Error{Op: op, Code: connect.CodeNotFound, Reason: client.ReasonNotFound}}
	}
	_, err = c.GetQueue(ctx, client.GetQueueRequest{Namespace: "", Queue: "nope"})
	checkError(t, "GetQueue unknown", err, notFound("GetQueue"))
	_, err = c.PauseQueue(ctx, client.PauseQueueRequest{Queue: "nope"})
	checkError(t, "PauseQueue unknown", err, notFound("PauseQueue"))
	if err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("PauseQueue unknown: %v; want the queue named", err)
	}
	_, err = c.ResumeQueue(ctx, client.ResumeQueueRequest{Namespace: "elsewhere", Queue: "q"})
	checkError(t, "ResumeQueue unknown", err, notFound("ResumeQueue"))
	_, err = client.Collect(c.ListQueues(ctx, client.ListQueuesRequest{Namespace: strings.Repeat("n", 257)}))
	checkError(t, "ListQueues of a namespace over 256 bytes", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "ListQueues", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "namespace"}})

	_, err = c.RetryTask(ctx, client.RetryTaskRequest{TaskID: res.TaskID})
	checkError(t, "RetryTask of a COMPLETED task", err, errorCase{client.ErrWrongState, client.Error{
		Op: "RetryTask", Code: connect.CodeFailedPrecondition, Reason: client.ReasonWrongState, TaskID: res.TaskID, State: client.TaskStateCompleted}})

	invalid := func(op string) errorCase {
		return errorCase{client.ErrInvalidArgument, client.Error{Op: op, Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "filter"}}
	}
	_, err = c.RetryTasks(ctx, client.BulkRequest{})
	checkError(t, "RetryTasks without a filter", err, invalid("RetryTasks"))
	_, err = c.KillTasks(ctx, client.BulkRequest{Reason: "all of them?"})
	checkError(t, "KillTasks without a filter", err, invalid("KillTasks"))
	_, err = c.PurgeTasks(ctx, client.BulkRequest{Filter: client.TaskFilter{All: true, Queue: "q"}})
	checkError(t, "PurgeTasks with all and a queue", err, invalid("PurgeTasks"))
	if task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: res.TaskID}); err != nil || task.State != client.TaskStateCompleted {
		t.Fatalf("the task after the refused calls: %+v, %v; want it COMPLETED still", task, err)
	}
}

// TestSetQueueLimits: SetQueueLimits sets, keeps and clears limits, shows
// them in the queue with who set them, why and when, and refuses a bad
// one with ErrInvalidArgument naming the field; once per protocol.
func TestSetQueueLimits(t *testing.T) {
	eachOps(t, func(t *testing.T, _ *clock.Fake, c *client.Client) {
		ctx := t.Context()
		conc, rate := uint32(3), 2.5
		res, err := c.SetQueueLimits(ctx, client.SetQueueLimitsRequest{Queue: "q", MaxConcurrency: &conc, Rate: &rate, Reason: "slow api"})
		want := client.QueueLimits{MaxConcurrency: 3, Rate: 2.5, Burst: 3, RequestedBy: "ops@box", Reason: "slow api", SetAt: t0}
		if err != nil || !res.Changed || res.Queue.Limits == nil || *res.Queue.Limits != want || res.Queue.LimitedPartitions != 1 {
			t.Fatalf("SetQueueLimits: %+v (limits %+v), %v; want %+v", res, res.Queue.Limits, err, want)
		}
		res, err = c.SetQueueLimits(ctx, client.SetQueueLimitsRequest{Queue: "q", ClearMaxConcurrency: true})
		if err != nil || !res.Changed || res.Queue.Limits == nil || res.Queue.Limits.MaxConcurrency != 0 || res.Queue.Limits.Rate != 2.5 {
			t.Fatalf("clearing the max concurrency: %+v, %v; want the rate kept", res.Queue.Limits, err)
		}
		q, err := c.GetQueue(ctx, client.GetQueueRequest{Namespace: "", Queue: "q"})
		if err != nil || !reflect.DeepEqual(q.Limits, res.Queue.Limits) {
			t.Fatalf("GetQueue: %+v, %v; want limits %+v", q, err, res.Queue.Limits)
		}
		zero := 0.0
		_, err = c.SetQueueLimits(ctx, client.SetQueueLimitsRequest{Queue: "q", Rate: &zero})
		checkError(t, "SetQueueLimits with rate 0", err, errorCase{client.ErrInvalidArgument, client.Error{
			Op: "SetQueueLimits", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "rate"}})
	})
}
