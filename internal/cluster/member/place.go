package member

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"

	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// Placement: which partition a new task goes to.

// Place implements route.Router. The queue is created (with
// Config.Partitions partitions) by its first submit; its name is checked
// first, so that a refused submit creates no queue. The partition is
// chosen by a hash of the request id, so that a retried submit meets its
// first try's deduplication, or round robin without one. A forwarded
// submit without a request id takes one of this node's partitions.
func (m *Member) Place(ctx context.Context, namespace, queue, requestID string) (route.Partition, error) {
	if !m.trusted() {
		return nil, ErrUntrusted
	}
	namespace = cmp.Or(namespace, coordinator.DefaultNamespace)
	if err := m.cfg.Coordinator.Limits.CheckNames(namespace, queue, requestID); err != nil {
		return nil, err
	}
	ps, err := m.queuePartitions(ctx, namespace, queue, true)
	if err != nil {
		return nil, err
	}
	id, err := m.pick(ctx, ps, namespace, queue, requestID)
	if err != nil {
		return nil, err
	}
	return part{m, id}, nil
}

// queuePartitions returns the partitions of a queue, creating the queue
// (with Config.Partitions partitions) unless create is false.
func (m *Member) queuePartitions(ctx context.Context, namespace, queue string, create bool) ([]partition.Assignment, error) {
	k := queueKey{namespace, queue}
	if ps := m.routes.Load().byQueue[k]; len(ps) > 0 || !create {
		return ps, nil
	}
	// One creation at a time from this node: concurrent submits to a new
	// queue wait for the first.
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	if ps := m.routes.Load().byQueue[k]; len(ps) > 0 {
		return ps, nil
	}
	if err := m.store.EnsureQueue(ctx, namespace, queue, m.cfg.Partitions); err != nil {
		return nil, fmt.Errorf("%w: creating queue %s/%s: %v", coordinator.ErrUnavailable, namespace, queue, err)
	}
	for range 3 {
		if err := m.refresh(ctx); err != nil {
			return nil, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
		}
		if ps := m.routes.Load().byQueue[k]; len(ps) > 0 {
			return ps, nil
		}
	}
	return nil, fmt.Errorf("%w: queue %s/%s was created but is not in the partition map yet; retry", coordinator.ErrUnavailable, namespace, queue)
}

// pick chooses the partition of a submit among ps, the queue's.
func (m *Member) pick(ctx context.Context, ps []partition.Assignment, namespace, queue, requestID string) (uint64, error) {
	if requestID != "" {
		h := fnv.New64a()
		h.Write([]byte(namespace))
		h.Write([]byte{0})
		h.Write([]byte(requestID))
		return ps[h.Sum64()%uint64(len(ps))].ID, nil
	}
	n := m.rr.Add(1)
	if !forwarded(ctx) {
		return ps[n%uint64(len(ps))].ID, nil
	}
	// The sender chose this node for one of its partitions: take one it
	// serves, else one assigned to it (the call waits while it opens),
	// reading the map again if this node's looks stale.
	for reread := false; ; reread = true {
		var mine []uint64
		for i := range ps {
			p := ps[(n+uint64(i))%uint64(len(ps))]
			if m.local(p.ID) != nil {
				return p.ID, nil
			}
			if p.Owner == m.cfg.NodeID {
				mine = append(mine, p.ID)
			}
		}
		if len(mine) > 0 {
			return mine[0], nil
		}
		if reread {
			return 0, errNotServed(ps[0], m.cfg.NodeID)
		}
		if err := m.refresh(ctx); err != nil {
			return 0, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
		}
		if fresh := m.routes.Load().byQueue[queueKey{namespace, queue}]; len(fresh) > 0 {
			ps = fresh
		}
	}
}
