package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
)

// ConfigureNode makes an embedded node's configuration report to m (every
// record applied, opens, snapshots, WAL writes and fsyncs) and registers
// the WAL's metrics. Call it once, before node.Open; then WatchNode.
func (m *Metrics) ConfigureNode(cfg *node.Config) {
	cfg.Coordinator.Observer = m
	cfg.HostObserver = m
	cfg.WALObserver = m
	m.reg.MustRegister(m.walAppend, m.walFsync, m.batchRecords)
}

// WatchNode registers the gauges read from the open node n: its WAL's
// segments and bytes on disk, and (unless Config.Queues replaced them) the
// per-queue gauges from its queue statistics.
func (m *Metrics) WatchNode(n *node.Node) {
	m.watchQueues(func() []*coordinator.Coordinator { return []*coordinator.Coordinator{n.Coordinator()} })
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_wal_bytes",
			Help: "Bytes of the WAL's segment files on disk.",
		}, func() float64 { return float64(n.WALDisk().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_wal_segments",
			Help: "Segment files of the WAL on disk.",
		}, func() float64 { return float64(n.WALDisk().Segments) }),
	)
}

// ConfigureMember makes a cluster node's configuration report to m (every
// record applied, each partition's opens, snapshots and database commits,
// forwarded requests) and registers the cluster's metrics. Call it once,
// before member.Start; then WatchMember.
func (m *Metrics) ConfigureMember(cfg *member.Config) {
	cfg.Coordinator.Observer = m
	cfg.HostObserver = m
	cfg.Log.Observer = m
	cfg.PeerInterceptors = append(cfg.PeerInterceptors, m.ForwardInterceptor())
	m.reg.MustRegister(m.batchRecords, m.epochChanges, m.tasksDelivered, m.remoteResolved, m.forwarded, m.dbCommit)
}

// WatchMember registers the gauges read from the running member mb:
// whether it holds the coordinator lock, how many partitions it serves,
// whether it may be given partitions and how many nodes it cannot reach,
// the deliveries and remote edges its partitions wait on, and (unless
// Config.Queues replaced them) the per-queue gauges from the queue
// statistics of those partitions.
func (m *Metrics) WatchMember(mb *member.Member) {
	m.watchQueues(mb.Coordinators)
	m.watchCrossPartition(crossPartitionOf(mb.Coordinators))
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_cluster_coordinator",
			Help: "1 while this node holds the coordinator lock, else 0.",
		}, func() float64 {
			if leading, _ := mb.Leading(); leading {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_cluster_partitions",
			Help: "Partitions this node serves now.",
		}, func() float64 { return float64(mb.Owned()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_cluster_eligible",
			Help: "1 while the other nodes reach this node and it may be given partitions, else 0 (docs/design/cluster.md, \"Which nodes get partitions\").",
		}, func() float64 {
			if mb.Eligible() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_cluster_peers_unreachable",
			Help: "Active nodes that this node's probes cannot reach as a forwarded request would (certificate, address or signature refused, or no answer).",
		}, func() float64 { return float64(mb.UnreachablePeers()) }),
	)
}

// WatchMemory registers the gauges of the node's memory budget b: what its
// partitions hold, as their states account it, and the budget.
func (m *Metrics) WatchMemory(b *coordinator.MemoryBudget) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_memory_held_bytes",
			Help: "Bytes the partitions this node serves hold in memory, as their states account them: payloads, results, schedules and each task's fixed cost, finished tasks included until the retention purge drops them.",
		}, func() float64 { return float64(b.HeldBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tenure_memory_budget_bytes",
			Help: "The node's memory budget (--max-memory-bytes): past it, submits are refused (resource_exhausted, FULL).",
		}, func() float64 { return float64(b.LimitBytes()) }),
	)
}
