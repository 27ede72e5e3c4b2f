package member

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// routes is one reading of the partition map and the node table.
type routes struct {
	byID    map[uint64]partition.Assignment
	byQueue map[queueKey][]partition.Assignment // in partition order
	all     []partition.Assignment              // in key order
	addrs   map[string]string                   // node id → advertised address, of active nodes
}

type queueKey struct{ namespace, queue string }

func newRoutes(as []partition.Assignment, addrs map[string]string) *routes {
	r := &routes{
		byID:    make(map[uint64]partition.Assignment, len(as)),
		byQueue: make(map[queueKey][]partition.Assignment),
		all:     as,
		addrs:   addrs,
	}
	for _, a := range as {
		r.byID[a.ID] = a
		k := queueKey{a.Key.Namespace, a.Key.Queue}
		r.byQueue[k] = append(r.byQueue[k], a)
	}
	return r
}

// refresh reads the partition map and the node table. Concurrent callers
// share readings: a caller that waited while another reading started and
// finished after its call does not read again. (One reading finishing is
// not enough: it may have started before the call.)
func (m *Member) refresh(ctx context.Context) error {
	gen := m.refreshes.Load()
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	if m.refreshes.Load() >= gen+2 {
		return nil
	}
	as, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	nodes, err := m.reg.List(ctx)
	if err != nil {
		return err
	}
	addrs := make(map[string]string, len(nodes))
	for _, n := range nodes {
		if n.Active {
			addrs[n.ID] = n.AdvertiseAddr
		}
	}
	m.routes.Store(newRoutes(as, addrs))
	m.refreshes.Add(1)
	return nil
}

// taskSuffix is the suffix of the ids of tasks created in partition id.
func taskSuffix(id uint64) string { return route.TaskIDSuffix(id) }

// partitionOf returns the partition id a task id carries.
func partitionOf(taskID string) (uint64, error) {
	if taskID == "" {
		return 0, &coordinator.FieldError{Field: "task_id", Problem: "required"}
	}
	i := strings.LastIndex(taskID, "-p")
	if i >= 0 {
		if id, err := strconv.ParseUint(taskID[i+2:], 10, 64); err == nil && id > 0 {
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: task %q: not a task id of this cluster (cluster task ids end in -p<partition>)", coordinator.ErrNotFound, taskID)
}
