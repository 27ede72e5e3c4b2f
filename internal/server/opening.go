package server

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/route"
)

// Opening stands in for an embedded node while it opens — locks its data
// directory and replays its WAL, minutes for a long one — so that a server
// over it answers from the moment it listens: /healthz says the process is
// alive, /readyz and the gRPC health service say it is not ready, and every
// API call is answered unavailable with the reason (the SDK retries).
// Open hands every call over to the node.
type Opening struct {
	why  error
	node atomic.Pointer[opened]
}

type opened struct {
	h      route.Host
	snaps  Snapshotter
	events EventSource
}

// NewOpening returns an Opening that answers, until Open, unavailable
// with why (say "replaying the WAL").
func NewOpening(why string) *Opening {
	return &Opening{why: fmt.Errorf("%w: %s; retry shortly", coordinator.ErrUnavailable, why)}
}

// Open hands over to the node's partition h, its snapshots and its event
// feeds (a *node.Node is all three; none may be nil).
func (o *Opening) Open(h route.Host, snaps Snapshotter, events EventSource) {
	o.node.Store(&opened{h: h, snaps: snaps, events: events})
}

// Feeds gives the node's event feeds once open (EventSource).
func (o *Opening) Feeds(ctx context.Context, namespace, queue string) ([]*events.Feed, error) {
	if n := o.node.Load(); n != nil {
		return n.events.Feeds(ctx, namespace, queue)
	}
	return nil, o.why
}

// Router routes to the one partition, as route.Local does for an open
// node.
func (o *Opening) Router() route.Router { return route.Local(o) }

// Do runs fn on the node's coordinator once open.
func (o *Opening) Do(fn func(*coordinator.Coordinator) error) error {
	if n := o.node.Load(); n != nil {
		return n.h.Do(fn)
	}
	return o.why
}

// Err is the node's once open, and the reason it is opening before.
func (o *Opening) Err() error {
	if n := o.node.Load(); n != nil {
		return n.h.Err()
	}
	return o.why
}

// Snapshot takes a snapshot of the node once open.
func (o *Opening) Snapshot(ctx context.Context) (coordinator.SnapshotResult, error) {
	if n := o.node.Load(); n != nil {
		return n.snaps.Snapshot(ctx)
	}
	return coordinator.SnapshotResult{}, o.why
}
