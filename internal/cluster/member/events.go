package member

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/route"
)

// The event feeds of a cluster node (docs/design/events.md): one per
// partition a stream reads, whoever owns it, each reading the partition's
// committed rows in the database, so that a partition that moves to
// another node, or whose owner dies, goes on where it was. A feed asks
// the partition's owner for the workflow of tasks whose creation its
// streams did not read (where).

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
			id := a.ID
			f = events.NewFeed(events.FeedConfig{Partition: a.ID, Key: &key, Polled: true, Lookup: func(ctx context.Context, ids []string, out []events.Target) error {
				return m.where(ctx, id, ids, out)
			}})
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

// whereMaxAnswer bounds what is read of a route.WherePath answer: far
// more than every task of a request found, with its namespace, queue and
// workflow id at the longest an id may be.
const whereMaxAnswer = 16 << 20

// where finds where tasks of partition id are, for its event feed: on the
// partition's coordinator if this node serves it, else with a POST to
// route.WherePath of the node that does, some tasks at a time. A
// partition without a serving owner is waited for (AssignWait) and one
// that moved is followed, as any call to a partition; past that, the
// look-up fails as unavailable, and so does the stream that needed it.
func (m *Member) where(ctx context.Context, id uint64, ids []string, out []events.Target) error {
	p, err := m.Partition(ctx, id)
	if err != nil {
		return err
	}
	for len(ids) > 0 {
		n, size := 0, 0
		for n < len(ids) && n < route.WhereMaxTasks && (n == 0 || size+len(ids[n]) <= route.WhereMaxIDBytes) {
			size += len(ids[n])
			n++
		}
		some, found := ids[:n], out[:n]
		err := p.Do(ctx, true, func(c *coordinator.Coordinator) error {
			clear(found)
			return events.Where(c, some, found)
		}, func(peer route.Peer) error {
			clear(found)
			return m.whereAt(ctx, peer, id, some, found)
		})
		if err != nil {
			return fmt.Errorf("looking up the workflow of %d tasks of partition %d: %w", len(some), id, err)
		}
		ids, out = ids[n:], out[n:]
	}
	return nil
}

// whereAt asks peer, which serves partition id, where tasks of it are
// (route.WherePath).
func (m *Member) whereAt(ctx context.Context, peer route.Peer, id uint64, ids []string, out []events.Target) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(route.WhereRequest{TaskIDs: ids}); err != nil {
		return err
	}
	b, err := m.callNode(ctx, peer, route.WherePath, id, "application/json", body.Bytes(), whereMaxAnswer)
	if err != nil {
		return err
	}
	var ans route.WhereAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		return fmt.Errorf("%s answered what is not a WhereAnswer: %v", peer.Addr(), err)
	}
	for _, t := range ans.Tasks {
		if t.Index < 0 || t.Index >= len(ids) {
			return fmt.Errorf("%s answered task %d of a request of %d", peer.Addr(), t.Index, len(ids))
		}
		out[t.Index] = events.Target{Namespace: t.Namespace, Queue: t.Queue, Workflow: t.Workflow}
	}
	return nil
}
