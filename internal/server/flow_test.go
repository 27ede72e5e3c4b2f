package server_test

import (
	"errors"
	"math"
	"testing"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/proto"
)

// setLimits calls SetQueueLimits and fails the test on an error.
func (e *apiEnv) setLimits(t *testing.T, req *tenurev1.SetQueueLimitsRequest) *tenurev1.SetQueueLimitsResponse {
	t.Helper()
	resp, err := e.queues().SetQueueLimits(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("SetQueueLimits(%v): %v", req, err)
	}
	return resp.Msg
}

// sameLimits fails unless the queue's limits are max concurrency, rate
// and burst (nil: none).
func sameLimits(t *testing.T, what string, q *tenurev1.Queue, want *tenurev1.QueueLimits) {
	t.Helper()
	got := q.GetLimits()
	if want == nil {
		if got != nil || q.GetLimitedPartitions() != 0 {
			t.Fatalf("%s: limits %v in %d partitions; want none", what, got, q.GetLimitedPartitions())
		}
		return
	}
	if got.GetMaxConcurrency() != want.GetMaxConcurrency() || got.GetRate() != want.GetRate() || got.GetBurst() != want.GetBurst() || q.GetLimitedPartitions() != 1 {
		t.Fatalf("%s: limits %v in %d partitions; want %v in 1", what, got, q.GetLimitedPartitions(), want)
	}
}

// TestSetQueueLimits: limits set over the API show in GetQueue and
// ListQueues, hold leases to them, keep what a change does not name, and
// go away when cleared; setting the same limits changes nothing.
func TestSetQueueLimits(t *testing.T) {
	e := newAPIEnv(t)
	ctx := apiCtx(t)
	for range 5 {
		e.submit(t, &tenurev1.SubmitRequest{Queue: "api"})
	}
	res := e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "api", MaxConcurrency: proto.Uint32(2), Rate: proto.Float64(10), Reason: "slow api", RequestedBy: "ops@host"})
	if !res.GetChanged() {
		t.Fatal("the first change did not change the queue")
	}
	sameLimits(t, "set", res.GetQueue(), &tenurev1.QueueLimits{MaxConcurrency: 2, Rate: 10, Burst: 10})
	if l := res.GetQueue().GetLimits(); l.GetRequestedBy() != "ops@host" || l.GetReason() != "slow api" || l.GetSetAt() == nil {
		t.Fatalf("limits %v do not say who set them, why and when", l)
	}
	again := e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "api", MaxConcurrency: proto.Uint32(2)})
	if again.GetChanged() {
		t.Fatal("the same limits again changed the queue")
	}
	sameLimits(t, "get", e.getQueue(t, "api"), &tenurev1.QueueLimits{MaxConcurrency: 2, Rate: 10, Burst: 10})
	list, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil || len(list.Msg.GetQueues()) != 1 {
		t.Fatalf("ListQueues: %v, %v", list, err)
	}
	sameLimits(t, "list", list.Msg.GetQueues()[0], &tenurev1.QueueLimits{MaxConcurrency: 2, Rate: 10, Burst: 10})

	lease, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "api", MaxTasks: 5}))
	if err != nil || len(lease.Msg.GetTasks()) != 2 {
		t.Fatalf("Lease of 5: %d tasks, %v; want the max concurrency of 2", len(lease.Msg.GetTasks()), err)
	}

	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "api", Burst: proto.Uint32(3)})
	sameLimits(t, "burst", res.GetQueue(), &tenurev1.QueueLimits{MaxConcurrency: 2, Rate: 10, Burst: 3})
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "api", ClearRate: true})
	sameLimits(t, "rate cleared", res.GetQueue(), &tenurev1.QueueLimits{MaxConcurrency: 2})
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "api", ClearMaxConcurrency: true})
	sameLimits(t, "all cleared", res.GetQueue(), nil)

	// A queue without tasks takes limits, and exists from then on.
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Namespace: "billing", Queue: "later", Rate: proto.Float64(0.5)})
	if q := res.GetQueue(); q.GetNamespace() != "billing" || q.GetQueue() != "later" || q.GetTasks().GetWaiting() != 0 {
		t.Fatalf("new queue %v", q)
	}
	sameLimits(t, "new queue", res.GetQueue(), &tenurev1.QueueLimits{Rate: 0.5, Burst: 1})
}

// TestSetQueueLimitsBadInput: every bad limit is INVALID_ARGUMENT with an
// ErrorDetail naming the field, and nothing is written: a new queue is not
// created, an existing one keeps its limits.
func TestSetQueueLimitsBadInput(t *testing.T) {
	e := newAPIEnv(t)
	ctx := apiCtx(t)
	before := e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "kept", MaxConcurrency: proto.Uint32(4)}).GetQueue()
	for _, c := range []struct {
		name  string
		req   *tenurev1.SetQueueLimitsRequest
		field string
	}{
		{"rate 0", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(0)}, "rate"},
		{"negative rate", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(-2)}, "rate"},
		{"NaN rate", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(math.NaN())}, "rate"},
		{"infinite rate", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(math.Inf(1))}, "rate"},
		{"rate too large", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(2e6)}, "rate"},
		{"max concurrency 0", &tenurev1.SetQueueLimitsRequest{MaxConcurrency: proto.Uint32(0)}, "max_concurrency"},
		{"max concurrency too large", &tenurev1.SetQueueLimitsRequest{MaxConcurrency: proto.Uint32(2_000_000)}, "max_concurrency"},
		{"burst 0", &tenurev1.SetQueueLimitsRequest{Rate: proto.Float64(1), Burst: proto.Uint32(0)}, "burst"},
		{"burst without a rate", &tenurev1.SetQueueLimitsRequest{Burst: proto.Uint32(5)}, "burst"},
		{"nothing", &tenurev1.SetQueueLimitsRequest{}, "max_concurrency"},
		{"no queue", &tenurev1.SetQueueLimitsRequest{MaxConcurrency: proto.Uint32(1)}, "queue"},
	} {
		for _, queue := range []string{"fresh", "kept"} {
			req := proto.Clone(c.req).(*tenurev1.SetQueueLimitsRequest)
			if c.name != "no queue" {
				req.Queue = queue
			}
			_, err := e.queues().SetQueueLimits(ctx, connect.NewRequest(req))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Fatalf("%s on %s: %v; want invalid argument", c.name, queue, err)
			}
			if d := server.DetailOf(ce); d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT || d.GetField() != c.field {
				t.Fatalf("%s on %s: detail %v; want field %q", c.name, queue, d, c.field)
			}
		}
	}
	list, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil || len(list.Msg.GetQueues()) != 1 {
		t.Fatalf("ListQueues: %v, %v; want only the queue kept", list, err)
	}
	if after := list.Msg.GetQueues()[0]; !proto.Equal(after.GetLimits(), before.GetLimits()) {
		t.Fatalf("limits %v after refused changes; want %v", after.GetLimits(), before.GetLimits())
	}
}
