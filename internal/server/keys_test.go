package server_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestQueueKeys: a submit's key comes back on the task and its lease;
// key limits set over the API show in the queue's limits; GetQueue counts
// the keys, those a limit holds back, and lists the keys with the most
// waiting tasks; ListQueues lists them only when asked, for the one queue
// asked; a bad key and a bad key limit are refused naming their field.
func TestQueueKeys(t *testing.T) {
	e := newAPIEnv(t)
	ctx := apiCtx(t)
	for _, key := range []string{"acme", "acme", "acme", "beta", "beta"} {
		if got := e.submit(t, &tenurev1.SubmitRequest{Queue: "pay", Key: key}); got.GetKey() != key {
			t.Fatalf("submitted with key %q, the task has %q", key, got.GetKey())
		}
	}
	e.submit(t, &tenurev1.SubmitRequest{Queue: "other"})
	res := e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyMaxConcurrency: proto.Uint32(1), Fair: proto.Bool(true)})
	if l := res.GetQueue().GetLimits(); l.GetKeyMaxConcurrency() != 1 || !l.GetFair() || l.GetMaxConcurrency() != 0 {
		t.Fatalf("limits after setting the key limits: %v", l)
	}
	lt := e.leaseOne(t, "w", "pay")
	if lt.GetKey() != "acme" {
		t.Fatalf("the first lease is of key %q, want acme (the oldest task)", lt.GetKey())
	}
	q := e.getQueue(t, "pay")
	k := q.GetKeys()
	if k.GetKeys() != 2 || k.GetHeldByConcurrency() != 1 || len(k.GetTop()) != 2 {
		t.Fatalf("the queue's keys: %v; want 2 keys, acme held by its concurrency, both listed", k)
	}
	if top := k.GetTop()[0]; top.GetKey() != "acme" || top.GetWaiting() != 2 || top.GetLeased() != 1 || top.GetHeld() != "concurrency" {
		t.Fatalf("the first top key: %v; want acme, 2 waiting, 1 leased, held by concurrency", top)
	}
	if e.getQueue(t, "other").GetKeys() != nil {
		t.Fatal("a queue without keys shows keys")
	}
	list, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range list.Msg.GetQueues() {
		if len(q.GetKeys().GetTop()) != 0 {
			t.Fatalf("ListQueues without top_keys lists keys of %s: %v", q.GetQueue(), q.GetKeys())
		}
	}
	one, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{Namespace: "default", Queue: "pay", TopKeys: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if qs := one.Msg.GetQueues(); len(qs) != 1 || len(qs[0].GetKeys().GetTop()) != 1 || qs[0].GetKeys().GetTop()[0].GetKey() != "acme" {
		t.Fatalf("ListQueues of pay with one top key: %v", qs)
	}
	// Weights: set, kept by a change that names others, removed by 1.
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyWeights: []*tenurev1.KeyWeight{{Key: "beta", Weight: 4}}})
	if ws := res.GetQueue().GetLimits().GetKeyWeights(); len(ws) != 1 || ws[0].GetKey() != "beta" || ws[0].GetWeight() != 4 || !res.GetChanged() {
		t.Fatalf("weights after setting beta's: %v (changed %v)", ws, res.GetChanged())
	}
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyWeights: []*tenurev1.KeyWeight{{Key: "acme", Weight: 2}}})
	if ws := res.GetQueue().GetLimits().GetKeyWeights(); len(ws) != 2 || ws[0].GetKey() != "acme" || ws[1].GetKey() != "beta" {
		t.Fatalf("weights after setting acme's too: %v", ws)
	}
	if again := e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyWeights: []*tenurev1.KeyWeight{{Key: "acme", Weight: 2}}}); again.GetChanged() {
		t.Fatal("setting a weight the key has changed something")
	}
	res = e.setLimits(t, &tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyWeights: []*tenurev1.KeyWeight{{Key: "acme", Weight: 1}, {Key: "beta", Weight: 1}}})
	if ws := res.GetQueue().GetLimits().GetKeyWeights(); len(ws) != 0 || res.GetQueue().GetLimits().GetKeyMaxConcurrency() != 1 {
		t.Fatalf("after weights of 1: %v, limits %v", ws, res.GetQueue().GetLimits())
	}
	for _, bad := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"a key too long", func() error {
			_, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "pay", Key: string(make([]byte, 129))}))
			return err
		}, "key"},
		{"a key with a space", func() error {
			_, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "pay", Key: "acme corp"}))
			return err
		}, "key"},
		{"a key max concurrency of 0", func() error {
			_, err := e.queues().SetQueueLimits(ctx, connect.NewRequest(&tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyMaxConcurrency: proto.Uint32(0)}))
			return err
		}, "key_max_concurrency"},
		{"a negative key rate", func() error {
			_, err := e.queues().SetQueueLimits(ctx, connect.NewRequest(&tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyRate: proto.Float64(-1)}))
			return err
		}, "key_rate"},
		{"ordered with a key max concurrency of 2", func() error {
			_, err := e.queues().SetQueueLimits(ctx, connect.NewRequest(&tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyOrdered: proto.Bool(true), KeyMaxConcurrency: proto.Uint32(2)}))
			return err
		}, "key_ordered"},
		{"a weight of 0", func() error {
			_, err := e.queues().SetQueueLimits(ctx, connect.NewRequest(&tenurev1.SetQueueLimitsRequest{Queue: "pay", KeyWeights: []*tenurev1.KeyWeight{{Key: "acme"}}}))
			return err
		}, "key_weights[0].weight"},
		{"too many top keys", func() error {
			_, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{TopKeys: 101}))
			return err
		}, "top_keys"},
	} {
		err := bad.call()
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || server.DetailOf(ce).GetField() != bad.field {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", bad.name, err, bad.field)
		}
	}
}
