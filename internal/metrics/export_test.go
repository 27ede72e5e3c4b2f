package metrics

import "github.com/tenurehq/tenure/internal/coordinator"

// WatchCrossPartition registers the cross-partition gauges read from
// source, as WatchMember does from its partitions' coordinators.
func (m *Metrics) WatchCrossPartition(source func() []coordinator.CrossPartition) {
	m.watchCrossPartition(source)
}
