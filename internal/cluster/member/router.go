package member

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// The route.Router of a cluster node: every partition of the cluster,
// served here or by its owner.

var _ route.Router = (*Member)(nil)

// part is one partition of the cluster. Where it is served is resolved at
// each call, so a partition that moves between calls is followed.
type part struct {
	m  *Member
	id uint64
}

func (p part) ID() uint64 { return p.id }

// Do runs the call where the partition is served now. An unavailable
// answer from another node prompts a fresh reading of the map: if the
// partition moved, the call (which took no effect there) goes to the new
// owner once; otherwise the caller's retry finds it.
func (p part) Do(ctx context.Context, read bool, local func(*coordinator.Coordinator) error, forward func(route.Peer) error) error {
	m := p.m
	t, err := m.target(ctx, p.id)
	if err != nil {
		return err
	}
	err = m.run(ctx, t, p.id, read, local, forward)
	if m.moved(ctx, t, p.id, err) {
		if t, err = m.target(ctx, p.id); err != nil {
			return err
		}
		err = m.run(ctx, t, p.id, read, local, forward)
	}
	m.afterRemote(t, err)
	return err
}

// Peer implements route.Partition: the partition's owner in this node's
// map, when that is another active node.
func (p part) Peer(ctx context.Context) route.Peer {
	m := p.m
	if forwarded(ctx) || !m.trusted() || m.local(p.id) != nil {
		return nil
	}
	r := m.routes.Load()
	a, ok := r.byID[p.id]
	if !ok {
		return nil
	}
	return m.owner(r, a)
}

// Partition implements route.Router.
func (m *Member) Partition(_ context.Context, id uint64) (route.Partition, error) {
	if !m.trusted() {
		return nil, ErrUntrusted
	}
	return part{m, id}, nil
}

// Task implements route.Router: the partition is the one the task id
// carries.
func (m *Member) Task(ctx context.Context, taskID string) (route.Partition, error) {
	id, err := partitionOf(taskID)
	if err != nil {
		return nil, err
	}
	return m.Partition(ctx, id)
}

// Queue implements route.Router: this node's partitions of the queue (in
// an order that rotates from call to call) and, unless the request was
// forwarded, the other nodes that serve the rest.
func (m *Member) Queue(ctx context.Context, namespace, queue string) ([]route.Partition, []route.Peer, error) {
	if !m.trusted() {
		return nil, nil, ErrUntrusted
	}
	ps, _ := m.queuePartitions(ctx, namespace, queue, false)
	r := m.routes.Load()
	var local []route.Partition
	var peers []route.Peer
	seen := make(map[string]bool)
	start := int(m.rr.Add(1))
	for i := range ps {
		a := ps[(start+i)%len(ps)]
		if m.local(a.ID) != nil {
			local = append(local, part{m, a.ID})
			continue
		}
		if forwarded(ctx) || seen[a.Owner] {
			continue
		}
		if peer := m.owner(r, a); peer != nil {
			seen[a.Owner] = true
			peers = append(peers, peer)
		}
	}
	return local, peers, nil
}

// Scope implements route.Router: the partitions of the cluster whose
// namespace and queue match ("" matches every one), in key order.
//
// When this node's map has none, it reads the map again first: a queue
// created through another node since this node's last reading (at most
// AssignInterval ago) is found at once, so that a queue a submit was
// answered for is known through every node. Only an empty answer costs
// the reading (concurrent ones share it).
func (m *Member) Scope(ctx context.Context, namespace, queue string) ([]route.Partition, error) {
	if !m.trusted() {
		return nil, ErrUntrusted
	}
	out := m.scope(namespace, queue)
	if len(out) == 0 {
		if err := m.refresh(ctx); err != nil {
			return nil, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
		}
		out = m.scope(namespace, queue)
	}
	return out, nil
}

// scope is Scope over this node's map as it is.
func (m *Member) scope(namespace, queue string) []route.Partition {
	var out []route.Partition
	for _, a := range m.routes.Load().all {
		if (namespace == "" || a.Key.Namespace == namespace) && (queue == "" || a.Key.Queue == queue) {
			out = append(out, part{m, a.ID})
		}
	}
	return out
}
