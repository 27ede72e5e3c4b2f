package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// The cross-partition metrics of cluster mode (docs/design/workflows.md,
// "Cluster mode"): what the partitions a node serves have still to deliver
// to other partitions, and the edges of their BLOCKED tasks that wait for
// a task of another partition. One series each per node: summed over its
// partitions, the oldest age the largest.
var (
	deliveriesPendingDesc = prometheus.NewDesc("tenure_cluster_deliveries_pending",
		"Tasks that a workflow batch or a spawn recorded in a partition this node serves created for another partition, not yet delivered there.", nil, nil)
	oldestDeliveryDesc = prometheus.NewDesc("tenure_cluster_oldest_delivery_age_seconds",
		"How long ago the oldest task pending delivery (tenure_cluster_deliveries_pending) was created (0: none).", nil, nil)
	remoteEdgesDesc = prometheus.NewDesc("tenure_cluster_remote_edges_pending",
		"Edges of BLOCKED tasks of the partitions this node serves that wait for a task of another partition to end.", nil, nil)
)

// crossPartitionCollector reads the figures of the coordinators a node
// serves at each scrape.
type crossPartitionCollector struct {
	source func() []coordinator.CrossPartition
}

func (crossPartitionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- deliveriesPendingDesc
	ch <- oldestDeliveryDesc
	ch <- remoteEdgesDesc
}

func (c crossPartitionCollector) Collect(ch chan<- prometheus.Metric) {
	var sum coordinator.CrossPartition
	for _, x := range c.source() {
		sum.Deliveries += x.Deliveries
		sum.RemoteEdges += x.RemoteEdges
		sum.OldestDelivery = max(sum.OldestDelivery, x.OldestDelivery)
	}
	ch <- prometheus.MustNewConstMetric(deliveriesPendingDesc, prometheus.GaugeValue, float64(sum.Deliveries))
	ch <- prometheus.MustNewConstMetric(oldestDeliveryDesc, prometheus.GaugeValue, sum.OldestDelivery.Seconds())
	ch <- prometheus.MustNewConstMetric(remoteEdgesDesc, prometheus.GaugeValue, float64(sum.RemoteEdges))
}

// watchCrossPartition registers the cross-partition gauges, read from
// source at each scrape.
func (m *Metrics) watchCrossPartition(source func() []coordinator.CrossPartition) {
	m.reg.MustRegister(crossPartitionCollector{source})
}

// crossPartitionOf reads the figures of the coordinators cs returns (a
// partition that stopped serving is skipped: its new owner reports it).
func crossPartitionOf(cs func() []*coordinator.Coordinator) func() []coordinator.CrossPartition {
	return func() []coordinator.CrossPartition {
		var out []coordinator.CrossPartition
		for _, c := range cs() {
			if x, err := c.CrossPartition(); err == nil {
				out = append(out, x)
			}
		}
		return out
	}
}
