package member

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/route"
)

// Describe reads the coordinator lock, the node table and the partition
// map from the cluster database (route.Describer), for
// AdminService.GetCluster.
func (m *Member) Describe(ctx context.Context) (route.Cluster, error) {
	out := route.Cluster{NodeID: m.cfg.NodeID}
	l, found, err := m.el.Read(ctx)
	if err != nil {
		return route.Cluster{}, fmt.Errorf("member: describing the cluster: %w", err)
	}
	if found {
		out.Lock = &route.Lock{Holder: l.Owner, Epoch: l.Epoch, ExpiresAt: l.ExpiresAt, Live: l.Live()}
	}
	nodes, err := m.reg.List(ctx)
	if err != nil {
		return route.Cluster{}, fmt.Errorf("member: describing the cluster: %w", err)
	}
	el, err := m.eligibility(ctx)
	if err != nil {
		return route.Cluster{}, fmt.Errorf("member: describing the cluster: %w", err)
	}
	out.EligibilityFallback = el.Fallback
	for _, n := range nodes {
		e := el.Nodes[n.ID]
		out.Nodes = append(out.Nodes, route.Node{ID: n.ID, AdvertiseAddr: n.AdvertiseAddr, Active: n.Active, LastHeartbeat: n.LastHeartbeat, Silent: n.Silent,
			Eligible: e.Eligible, Eligibility: e.Why})
	}
	as, err := m.store.List(ctx)
	if err != nil {
		return route.Cluster{}, fmt.Errorf("member: describing the cluster: %w", err)
	}
	for _, a := range as {
		out.Partitions = append(out.Partitions, route.PartitionInfo{
			ID: a.ID, Namespace: a.Key.Namespace, Queue: a.Key.Queue, Index: a.Key.Partition, Owner: a.Owner, Epoch: a.Epoch,
		})
	}
	return out, nil
}
