package route

import (
	"context"
	"time"
)

// Describer describes the cluster a node belongs to, as the cluster
// database holds it when asked (AdminService.GetCluster). The router of a
// cluster node (package member) is one; a router that is not serves
// embedded mode.
type Describer interface {
	Describe(ctx context.Context) (Cluster, error)
}

// Cluster is the state of a cluster as one node read it.
type Cluster struct {
	// NodeID is the node that read it.
	NodeID string
	// Lock is the coordinator lock; nil when no node holds it.
	Lock *Lock
	// Nodes are the rows of the node table, ordered by id.
	Nodes []Node
	// Partitions is the partition map, ordered by namespace, queue and
	// partition index.
	Partitions []PartitionInfo
	// EligibilityFallback is true when no active node is eligible for
	// partitions, so that they go to every active node.
	EligibilityFallback bool
}

// Lock is the coordinator lock (docs/design/cluster.md, "The coordinator lock").
type Lock struct {
	Holder    string
	Epoch     uint64
	ExpiresAt time.Time // the database's clock
	Live      bool      // not lapsed when read
}

// Node is one row of the node table.
type Node struct {
	ID            string
	AdvertiseAddr string
	Active        bool
	LastHeartbeat time.Time     // the database's clock
	Silent        time.Duration // since LastHeartbeat, when read
	// Eligible: the other nodes reach it, so it may be given partitions
	// (docs/design/cluster.md, "Which nodes get partitions"); Eligibility
	// says why, or why not.
	Eligible    bool
	Eligibility string
}

// PartitionInfo is one partition of the map.
type PartitionInfo struct {
	ID               uint64
	Namespace, Queue string
	Index            uint32
	Owner            string // "" while unassigned
	Epoch            uint64
}
