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

// TestLeaseAcrossRefusingPartitions: a lease over several partitions that
// all refuse answers the refusal (it read the nil answer first and
// panicked).
func TestLeaseAcrossRefusingPartitions(t *testing.T) {
	ctx := context.Background()
	n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Snapshots: host.Schedule{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ts := httptest.NewServer(server.New(twoRefusing{Router: n.Router(), err: &coordinator.FieldError{Field: "queue", Problem: "refused"}}, server.Options{}).Handler())
	defer ts.Close()
	w := tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)
	_, err = w.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "q"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("lease over refusing partitions: %v, want their refusal (invalid_argument)", err)
	}
}
