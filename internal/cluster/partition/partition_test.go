package partition_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/alloc"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/partition"
)

func TestEnsureQueueAndApply(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	s := partition.New(db)
	for range 2 { // idempotent
		if err := s.EnsureQueue(ctx, "ns", "emails", partition.DefaultPartitions); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EnsureQueue(ctx, "ns", "emails", 4); err == nil {
		t.Fatal("repartitioning was accepted")
	}
	if err := s.EnsureQueue(ctx, "ns", "big", cluster.MaxPartitionsPerQueue+1); err == nil {
		t.Fatal("too many partitions were accepted")
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 8 {
		t.Fatalf("List = %d rows, %v", len(list), err)
	}
	for _, a := range list {
		if a.Owner != "" || a.Epoch != 0 || a.ID == 0 {
			t.Fatalf("fresh partition %+v", a)
		}
	}

	// Only the coordinator may apply.
	coord := partition.Coordinator{LockKey: election.DefaultLockKey, NodeID: "n1"}
	keys := make([]cluster.PartitionKey, len(list))
	for i, a := range list {
		keys[i] = a.Key
	}
	next := alloc.CalculateAllocation(nil, keys, []string{"n1", "n2"})
	if _, err := s.Apply(ctx, coord, next); !errors.Is(err, partition.ErrNotCoordinator) {
		t.Fatalf("Apply without the lock = %v", err)
	}
	e, err := election.New(db, election.Config{OwnerID: "n1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, _, err := e.TryAcquire(ctx); !held || err != nil {
		t.Fatalf("TryAcquire: %v %v", held, err)
	}
	changed, err := s.Apply(ctx, coord, next)
	if err != nil || len(changed) != 8 {
		t.Fatalf("Apply = %d changes, %v", len(changed), err)
	}
	// A join: only the moved partitions change owner, each epoch + 1.
	current := make(map[cluster.PartitionKey]string)
	for k, o := range next {
		current[k] = o
	}
	next2 := alloc.CalculateAllocation(current, keys, []string{"n1", "n2", "n3"})
	changed, err = s.Apply(ctx, coord, next2)
	if err != nil || len(changed) != 2 {
		t.Fatalf("Apply after a join = %+v, %v; want 2 changes", changed, err)
	}
	for _, a := range changed {
		if a.Owner != "n3" || a.Epoch != 2 {
			t.Fatalf("changed %+v", a)
		}
		got, err := s.Get(ctx, a.Key)
		if err != nil || got != a {
			t.Fatalf("Get(%v) = %+v, %v; want %+v", a.Key, got, err, a)
		}
	}
	if _, err := s.Get(ctx, cluster.PartitionKey{Namespace: "ns", Queue: "none"}); !errors.Is(err, partition.ErrNotFound) {
		t.Fatalf("Get of a missing partition = %v", err)
	}
	// Another node is not the coordinator.
	if _, err := s.Apply(ctx, partition.Coordinator{LockKey: election.DefaultLockKey, NodeID: "n2"}, next); !errors.Is(err, partition.ErrNotCoordinator) {
		t.Fatalf("Apply by a non-holder = %v", err)
	}
}
