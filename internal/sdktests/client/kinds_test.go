package client_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/sdk/client"
)

// TestKinds: a task's kind is kept from its submit (alone, in a batch, or
// by a schedule's fire) and answered by GetTask, ListTasks and Lease, over
// every protocol; an invalid kind is refused naming the field; a request
// id used again with another kind is refused as with another payload.
func TestKinds(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		one, err := c.Submit(ctx, client.SubmitRequest{Queue: "k", Kind: "send_email", RequestID: "r1"})
		if err != nil || one.Task.Kind != "send_email" {
			t.Fatalf("Submit with a kind: %+v, %v", one.Task, err)
		}
		batch, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{
			{Queue: "k", Kind: "billing.charge/v2"}, {Queue: "k"}}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{one.TaskID: "send_email", batch[0].TaskID: "billing.charge/v2", batch[1].TaskID: ""}
		for id, kind := range want {
			if got, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: id}); err != nil || got.Kind != kind {
				t.Errorf("GetTask(%s): kind %q, %v; want %q", id, got.Kind, err, kind)
			}
		}
		listed, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Queue: "k"}))
		if err != nil || len(listed) != 3 {
			t.Fatalf("ListTasks: %d, %v", len(listed), err)
		}
		for _, l := range listed {
			if l.Kind != want[l.ID] {
				t.Errorf("ListTasks: task %s of kind %q, want %q", l.ID, l.Kind, want[l.ID])
			}
		}
		leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "k", MaxTasks: 3, Wait: time.Second}))
		if err != nil || len(leased) != 3 {
			t.Fatalf("Lease: %d, %v", len(leased), err)
		}
		for _, l := range leased {
			if l.Kind != want[l.ID] {
				t.Errorf("Lease: task %s of kind %q, want %q", l.ID, l.Kind, want[l.ID])
			}
		}

		for _, bad := range []string{"send email", "émail", strings.Repeat("k", 129)} {
			_, err := c.Submit(ctx, client.SubmitRequest{Queue: "k", Kind: bad})
			var e *client.Error
			if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "kind" {
				t.Errorf("Submit of kind %.20q: %v; want invalid argument naming kind", bad, err)
			}
		}
		_, err = c.Submit(ctx, client.SubmitRequest{Queue: "k", Kind: "other", RequestID: "r1"})
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), `kind "send_email", not "other"`) {
			t.Errorf("Submit of request id r1 with another kind: %v; want it refused, naming both kinds", err)
		}
		if again, err := c.Submit(ctx, client.SubmitRequest{Queue: "k", Kind: "send_email", RequestID: "r1"}); err != nil || !again.Duplicate {
			t.Errorf("Submit of r1 again, same kind: %+v, %v; want the duplicate", again, err)
		}
	})
}

// TestScheduleKind: a schedule's kind is kept with its definition and
// given to every task it fires.
func TestScheduleKind(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := newClient(t, startServer(t, nil), client.Options{})
	res, err := c.CreateSchedule(ctx, client.ScheduleRequest{Queue: "ks", Name: "tick", Cron: "* * * * * *", Overlap: client.OverlapAllow, Kind: "nightly_report"})
	if err != nil || res.Schedule.Kind != "nightly_report" {
		t.Fatalf("CreateSchedule: kind %q, %v", res.Schedule.Kind, err)
	}
	if _, err := c.CreateSchedule(ctx, client.ScheduleRequest{Queue: "ks", Name: "bad", Cron: "* * * * * *", Kind: "a b"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("CreateSchedule with an invalid kind: %v; want invalid argument", err)
	}
	leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "ks", Wait: 10 * time.Second}))
	if err != nil || len(leased) != 1 || leased[0].Kind != "nightly_report" {
		t.Fatalf("Lease of the schedule's first task: %+v, %v; want one of kind nightly_report", leased, err)
	}
}

// TestLeaseFromSeveralQueues: one Lease call (queues) leases from any of
// its queues, starting from one that rotates from call to call so that no
// queue is starved; a long poll answers as soon as any of them gets a
// task; a bad list is refused naming the field.
func TestLeaseFromSeveralQueues(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		for _, q := range []string{"qa", "qb"} {
			reqs := make([]client.SubmitRequest, 4)
			for i := range reqs {
				reqs[i] = client.SubmitRequest{Queue: q}
			}
			if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
				t.Fatal(err)
			}
		}
		both := []string{"qa", "qb"}
		// One task per call: the queue a call starts with alternates.
		from := map[string]int{}
		for range 4 {
			leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queues: both}))
			if err != nil || len(leased) != 1 {
				t.Fatalf("Lease from qa and qb: %+v, %v", leased, err)
			}
			from[leased[0].Queue]++
		}
		if from["qa"] != 2 || from["qb"] != 2 {
			t.Errorf("four single leases took %v; want two from each queue", from)
		}
		// A call for more takes from both.
		leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queues: both, MaxTasks: 10}))
		if err != nil || len(leased) != 4 {
			t.Fatalf("Lease of 10 from qa and qb: %d tasks, %v; want the 4 left", len(leased), err)
		}

		// Both empty: a long poll gets the task submitted to qb meanwhile.
		var wg sync.WaitGroup
		var got []client.LeasedTask
		var lerr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, lerr = tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queues: both, Wait: 20 * time.Second}))
		}()
		time.Sleep(50 * time.Millisecond) // most often the poll waits by then; if not, it finds the task at once
		sub, err := c.Submit(ctx, client.SubmitRequest{Queue: "qb"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if lerr != nil || len(got) != 1 || got[0].ID != sub.TaskID {
			t.Fatalf("long poll of qa and qb: %+v, %v; want the task submitted to qb", got, lerr)
		}

		// Nothing leased: paused only if every queue is.
		if _, err := c.PauseQueue(ctx, client.PauseQueueRequest{Queue: "qa", Reason: "maintenance"}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queues: both}); err != nil || len(res.Tasks) != 0 || res.Paused != nil {
			t.Errorf("Lease from qa (paused) and qb (empty): %+v, %v; want nothing, not paused", res, err)
		}
		if _, err := c.PauseQueue(ctx, client.PauseQueueRequest{Queue: "qb", Reason: "maintenance"}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queues: both}); err != nil || len(res.Tasks) != 0 || res.Paused == nil || res.Paused.Reason != "maintenance" {
			t.Errorf("Lease from qa and qb, both paused: %+v, %v; want nothing, and the pause", res, err)
		}

		for _, tc := range []struct {
			req   client.LeaseRequest
			field string
		}{
			{client.LeaseRequest{WorkerID: "w", Queue: "qa", Queues: both}, "queue"},
			{client.LeaseRequest{WorkerID: "w", Queues: []string{"qa", "qa"}}, "queues[1]"},
			{client.LeaseRequest{WorkerID: "w", Queues: []string{"qa", ""}}, "queues[1]"},
			{client.LeaseRequest{WorkerID: "w", Queues: slices.Repeat([]string{"q"}, 33)}, "queues"},
		} {
			_, err := tasksOf(c.Lease(ctx, tc.req))
			var e *client.Error
			if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != tc.field || e.Code != connect.CodeInvalidArgument {
				t.Errorf("Lease %+v: %v; want invalid argument naming %s", tc.req.Queues, err, tc.field)
			}
		}
	})
}
