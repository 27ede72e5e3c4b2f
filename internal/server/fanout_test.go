package server_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// refusingPartition is a partition whose calls all fail.
type refusingPartition struct{ err error }

func (refusingPartition) ID() uint64 { return 0 }

func (refusingPartition) Peer(context.Context) route.Peer { return nil }

func (p refusingPartition) Do(context.Context, bool, func(*coordinator.Coordinator) error, func(route.Peer) error) error {
	return p.err
}

// twoRefusing routes a lease to two partitions of the queue, both failing.
type twoRefusing struct {
	route.Router
	err error
}

func (r twoRefusing) Queue(context.Context, string, string) ([]route.Partition, []route.Peer, error) {
	return []route.Partition{refusingPartition{r.err}, refusingPartition{r.err}}, nil, nil
}

// openUnsnapshotted opens a node in a directory of the test's own that
// takes no snapshots, closed when the test ends.
func openUnsnapshotted(t *testing.T) *node.Node {
	t.Helper()
	n, err := node.Open(t.Context(), node.Config{DataDir: t.TempDir(), Snapshots: host.Schedule{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// TestLeaseAcrossRefusingPartitions: a lease over several partitions that
// all refuse answers the refusal (it read the nil answer first and
// panicked).
func TestLeaseAcrossRefusingPartitions(t *testing.T) {
	ctx := context.Background()
	n := openUnsnapshotted(t)
	ts := httptest.NewServer(server.New(twoRefusing{Router: n.Router(), err: &coordinator.FieldError{Field: "queue", Problem: "refused"}}, server.Options{}).Handler())
	defer ts.Close()
	w := tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)
	_, err := w.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "q"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("lease over refusing partitions: %v, want their refusal (invalid_argument)", err)
	}
}

// doubled routes a queue to its one partition twice, so that a lease
// takes the path of a queue of several partitions.
type doubled struct{ route.Router }

func (r doubled) Queue(ctx context.Context, ns, q string) ([]route.Partition, []route.Peer, error) {
	local, peers, err := r.Router.Queue(ctx, ns, q)
	return append(local, local...), peers, err
}

// TestLeaseSaysPaused: a lease that finds nothing because the queue is
// paused says who paused it and why, over one partition and over several;
// once resumed it leases, and says nothing of a pause.
func TestLeaseSaysPaused(t *testing.T) {
	ctx := context.Background()
	n := openUnsnapshotted(t)
	for name, r := range map[string]route.Router{"one-partition": n.Router(), "several": doubled{n.Router()}} {
		ts := httptest.NewServer(server.New(r, server.Options{}).Handler())
		tasks := tenurev1connect.NewTaskServiceClient(ts.Client(), ts.URL)
		queues := tenurev1connect.NewQueueServiceClient(ts.Client(), ts.URL)
		w := tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)
		q := "q-" + name
		if _, err := tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: q})); err != nil {
			t.Fatal(err)
		}
		if _, err := queues.PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: q, Reason: "incident", RequestedBy: "ops"})); err != nil {
			t.Fatal(err)
		}
		res, err := w.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: q}))
		if p := res.Msg.GetPaused(); err != nil || len(res.Msg.GetTasks()) != 0 || p.GetRequestedBy() != "ops" || p.GetReason() != "incident" || p.GetPausedAt() == nil {
			t.Errorf("%s: lease of a paused queue: %v, %v; want no task, paused by ops for incident", name, res.Msg, err)
		}
		if _, err := queues.ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Queue: q})); err != nil {
			t.Fatal(err)
		}
		res, err = w.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: q}))
		if err != nil || len(res.Msg.GetTasks()) != 1 || res.Msg.GetPaused() != nil {
			t.Errorf("%s: lease once resumed: %v, %v; want the task, no pause", name, res.Msg, err)
		}
		res, err = w.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: q}))
		if err != nil || len(res.Msg.GetTasks()) != 0 || res.Msg.GetPaused() != nil {
			t.Errorf("%s: lease of an empty running queue: %v, %v; want nothing, no pause", name, res.Msg, err)
		}
		ts.Close()
	}
}
