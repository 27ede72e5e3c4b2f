package member

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// Route resolution: which node serves a partition now.

// forwarded reports whether the request came from another node, which
// chose this node as the partition's owner: it is served here or refused,
// never forwarded again.
func forwarded(ctx context.Context) bool {
	_, ok := route.Forwarded(ctx)
	return ok
}

// peer returns the API of the node at addr.
func (m *Member) peer(addr string) route.Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.peers[addr]
	if !ok {
		p = remote.New(m.scheme()+addr, m.cfg.HTTPClient, m, m.cfg.PeerInterceptors...)
		m.peers[addr] = p
	}
	return p
}

// owner returns the API of the node that serves a in the map r, or nil
// when that is this node, nobody, or a node that is not active.
func (m *Member) owner(r *routes, a partition.Assignment) route.Peer {
	if a.Owner == "" || a.Owner == m.cfg.NodeID {
		return nil
	}
	if addr := r.addrs[a.Owner]; addr != "" {
		return m.peer(addr)
	}
	return nil
}

// target is where partition id is served now: by o, this node's, or by
// peer.
type target struct {
	o    *owned
	peer route.Peer
}

// target returns where partition id is served. It waits up to AssignWait
// for a partition without an owner, or assigned to this node and opening.
// A forwarded request is served here or refused, never forwarded again.
func (m *Member) target(ctx context.Context, id uint64) (target, error) {
	fw := forwarded(ctx)
	var deadline time.Time
	reread := false
	for tries := 0; ; tries++ {
		if !m.trusted() {
			return target{}, ErrUntrusted
		}
		if o := m.local(id); o != nil {
			return target{o: o}, nil
		}
		r := m.routes.Load()
		a, known := r.byID[id]
		if !known && tries == 0 {
			if err := m.refresh(ctx); err != nil {
				return target{}, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
			}
			continue
		}
		if !known {
			return target{}, fmt.Errorf("%w: partition %d does not exist in this cluster", coordinator.ErrNotFound, id)
		}
		if fw && a.Owner != m.cfg.NodeID {
			// The sender's map says this node owns the partition; this
			// node's map may be the stale one.
			if !reread {
				reread = true
				if err := m.refresh(ctx); err != nil {
					return target{}, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
				}
				continue
			}
			return target{}, errNotServed(a, m.cfg.NodeID)
		}
		if peer := m.owner(r, a); peer != nil {
			return target{peer: peer}, nil
		}
		// No owner yet, an owner that is not active (it left or went
		// silent; the coordinator moves its partitions), or this node's
		// and opening: wait for the map to move.
		now := m.cfg.Clock.Now()
		if deadline.IsZero() {
			deadline = now.Add(m.cfg.AssignWait)
		}
		if !now.Before(deadline) {
			return target{}, fmt.Errorf("%w: partition %s has no serving owner yet (owner %q); retry", coordinator.ErrUnavailable, a.Key, a.Owner)
		}
		if err := clock.Sleep(ctx, m.cfg.Clock, min(m.cfg.AssignInterval/4+time.Millisecond, 50*time.Millisecond)); err != nil {
			return target{}, err
		}
		if tries%4 == 3 {
			if err := m.refresh(ctx); err != nil && ctx.Err() != nil {
				return target{}, ctx.Err()
			}
		}
	}
}

// run runs a call on t: local on the partition's coordinator, or forward
// with its owner's API. A read served here is confirmed afterwards.
func (m *Member) run(ctx context.Context, t target, id uint64, read bool, local func(*coordinator.Coordinator) error, forward func(route.Peer) error) error {
	if t.peer != nil {
		return forward(t.peer)
	}
	var served *coordinator.Coordinator
	err := t.o.h.Do(func(c *coordinator.Coordinator) error {
		served = c
		return local(c)
	})
	if err == nil && read {
		err = m.confirm(ctx, id, t.o, served)
	}
	return err
}

// confirm checks, after a read from partition id's coordinator c, that
// the partition's epoch is still the one this node serves it at. Writes
// are fenced by the log itself, but a read needs no write: without this,
// a node that lost a partition to a rebalance could answer reads from its
// stale copy until it noticed. The epoch only grows, so if it is still
// ours now, no other owner existed when the read was served.
func (m *Member) confirm(ctx context.Context, id uint64, o *owned, c *coordinator.Coordinator) error {
	m.mu.Lock()
	still := m.owned[id] == o
	m.mu.Unlock()
	if cur, err := o.h.Coordinator(); !still || err != nil || cur != c {
		return fmt.Errorf("%w: partition %d stopped being served here during the read; retry", coordinator.ErrUnavailable, id)
	}
	var epoch uint64
	if err := m.cfg.DB.QueryRowContext(ctx, "SELECT epoch FROM partitions WHERE id = ?", id).Scan(&epoch); err != nil {
		return fmt.Errorf("%w: confirming partition %s is still served here: %v", coordinator.ErrUnavailable, o.a.Key, err)
	}
	if epoch != o.a.Epoch {
		m.kick()
		return errNotServed(o.a, m.cfg.NodeID)
	}
	return nil
}

// unavailable reports whether err is an unavailable answer (from this
// node's partition or from another node).
func unavailable(err error) bool {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code() == connect.CodeUnavailable
	}
	return errors.Is(err, coordinator.ErrUnavailable)
}

// moved reports whether err is another node's unavailable answer for
// partition id and a fresh reading of the map names a new owner: the
// request never took effect there (the owner that refused it does not
// serve the partition any more), so it may go to the new one.
func (m *Member) moved(ctx context.Context, t target, id uint64, err error) bool {
	if t.peer == nil || !unavailable(err) {
		return false
	}
	before := m.routes.Load().byID[id]
	if m.refresh(ctx) != nil {
		return false
	}
	after := m.routes.Load()
	a := after.byID[id]
	return a.Owner != before.Owner && m.scheme()+after.addrs[a.Owner] != t.peer.Addr()
}

// afterRemote reads the map again in the background after another node
// answered unavailable: the partition may have moved.
func (m *Member) afterRemote(t target, err error) {
	if t.peer == nil || !unavailable(err) {
		return
	}
	m.spawn(func() {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		m.refresh(ctx)
	})
}
