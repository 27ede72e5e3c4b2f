package member

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
)

// The event feeds of a cluster node (docs/design/events.md): one per
// partition a stream reads, whoever owns it, each reading the partition's
// committed rows in the database, so that a partition that moves to
// another node, or whose owner dies, goes on where it was.

// Feeds implements server.EventSource: the feeds of the partitions of
// namespace and queue ("" matches every one), in partition order.
func (m *Member) Feeds(ctx context.Context, namespace, queue string) ([]*events.Feed, error) {
	parts, err := m.Scope(ctx, namespace, queue)
	if err != nil {
		return nil, err
	}
	r := m.routes.Load()
	out := make([]*events.Feed, 0, len(parts))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.feeds == nil {
		m.feeds = make(map[uint64]*events.Feed)
	}
	for _, p := range parts {
		f := m.feeds[p.ID()]
		if f == nil {
			a, ok := r.byID[p.ID()]
			if !ok {
				return nil, fmt.Errorf("%w: partition %d is not in this node's map yet; retry shortly", coordinator.ErrUnavailable, p.ID())
			}
			key := events.Target{Namespace: a.Key.Namespace, Queue: a.Key.Queue}
			f = events.NewFeed(events.FeedConfig{Partition: a.ID, Key: &key, Polled: true})
			f.Attach(rowsLog{mysqllog.NewRows(m.cfg.DB, a.ID, m.cfg.Log)})
			m.feeds[a.ID] = f
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *events.Feed) int { return cmp.Compare(a.Partition(), b.Partition()) })
	return out, nil
}

// rowsLog is a partition's rows as an events.Log.
type rowsLog struct{ r *mysqllog.Rows }

func (l rowsLog) First(ctx context.Context) (uint64, error) { return l.r.First(ctx) }
func (l rowsLog) Last(ctx context.Context) (uint64, error)  { return l.r.Last(ctx) }
func (l rowsLog) Open(_ context.Context, from uint64) (events.Reader, error) {
	return l.r.Reader(from), nil
}
