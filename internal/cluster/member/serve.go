package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/coordinator"
)

// owned is a partition this node serves.
type owned struct {
	a      partition.Assignment
	log    *mysqllog.Log
	c      *coordinator.Coordinator
	cancel context.CancelFunc // the coordinator's expiry loop
	done   chan struct{}
}

func (m *Member) assignLoop() {
	defer m.wg.Done()
	for m.sleep(m.cfg.AssignInterval) {
		m.reconcile(m.ctx)
	}
}

// reconcile brings the served partitions in line with the partition map:
// close what moved away or failed, open what is newly this node's.
func (m *Member) reconcile(ctx context.Context) {
	if !m.trusted() {
		m.dropAll("no heartbeat confirmed within the trust window")
		return
	}
	if err := m.refresh(ctx); err != nil {
		if ctx.Err() == nil {
			m.lg.Warn("reading the partition map failed", slog.Any("err", err))
		}
		return
	}
	r := m.routes.Load()
	m.mu.Lock()
	var drop []*owned
	for id, o := range m.owned {
		a, ok := r.byID[id]
		switch {
		case !ok || a.Owner != m.cfg.NodeID:
			drop = append(drop, o)
		case a.Epoch != o.a.Epoch:
			drop = append(drop, o)
		case o.c.Err() != nil:
			drop = append(drop, o)
		}
	}
	for _, o := range drop {
		delete(m.owned, o.a.ID)
	}
	var open []partition.Assignment
	if !m.closed {
		for _, a := range r.all {
			if a.Owner == m.cfg.NodeID && m.owned[a.ID] == nil && !m.opening[a.ID] {
				m.opening[a.ID] = true
				open = append(open, a)
			}
		}
	}
	m.mu.Unlock()
	for _, o := range drop {
		reason := "moved to another node"
		if err := o.c.Err(); err != nil {
			reason = err.Error()
		}
		m.closeOwned(o, reason)
	}
	for _, a := range open {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.open(a)
		}()
	}
}

// open opens a partition assigned to this node: its log at the assigned
// epoch, replay, the fence record, and then it serves.
func (m *Member) open(a partition.Assignment) {
	defer func() {
		m.mu.Lock()
		delete(m.opening, a.ID)
		m.mu.Unlock()
	}()
	lg := m.lg.With(slog.String("partition", a.Key.String()), slog.Uint64("epoch", a.Epoch))
	start := m.cfg.Clock.Now()
	log, err := mysqllog.Open(m.ctx, m.cfg.DB, a.ID, a.Epoch, m.cfg.Log)
	if err != nil {
		m.openFailed(lg, err)
		return
	}
	cfg := m.cfg.Coordinator
	cfg.TaskIDSuffix = taskSuffix(a.ID)
	cfg.Fence = &coordinator.Fence{Epoch: a.Epoch, NodeID: m.cfg.NodeID}
	cfg.Logger = lg
	c, err := coordinator.Open(m.ctx, log, cfg)
	if err != nil {
		log.Close()
		m.openFailed(lg, err)
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	o := &owned{a: a, log: log, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		c.Run(ctx)
	}()
	m.mu.Lock()
	ok := !m.closed && m.trusted()
	if ok {
		m.owned[a.ID] = o
	}
	m.mu.Unlock()
	if !ok {
		m.closeOwned(o, "node stopping or untrusted")
		return
	}
	st := c.Stats()
	lg.Info("serving partition", slog.Uint64("records", st.LastLSN), slog.Int("tasks", st.Tasks),
		slog.Duration("took", m.cfg.Clock.Now().Sub(start).Round(time.Millisecond)))
}

func (m *Member) openFailed(lg *slog.Logger, err error) {
	if m.ctx.Err() != nil {
		return
	}
	if errors.Is(err, mysqllog.ErrFenced) {
		lg.Info("partition moved on before it opened", slog.Any("err", err))
		return
	}
	lg.Warn("opening the partition failed; retrying at the next assignment check", slog.Any("err", err))
}

func (m *Member) closeOwned(o *owned, reason string) {
	o.c.Close()
	o.cancel()
	<-o.done
	o.log.Close()
	m.lg.Info("stopped serving partition", slog.String("partition", o.a.Key.String()), slog.Uint64("epoch", o.a.Epoch),
		slog.String("reason", reason))
}

func (m *Member) dropAll(reason string) {
	m.mu.Lock()
	all := make([]*owned, 0, len(m.owned))
	for id, o := range m.owned {
		all = append(all, o)
		delete(m.owned, id)
	}
	m.mu.Unlock()
	for _, o := range all {
		m.closeOwned(o, reason)
	}
}

// local returns the coordinator of a partition this node serves now, or
// nil.
func (m *Member) local(id uint64) *coordinator.Coordinator {
	if !m.trusted() {
		return nil
	}
	m.mu.Lock()
	o := m.owned[id]
	m.mu.Unlock()
	if o == nil || o.c.Err() != nil {
		return nil
	}
	return o.c
}

// errNotServed answers a forwarded request for a partition this node does
// not serve (any more): the sender retries after reading the map again.
func errNotServed(a partition.Assignment, node string) error {
	return fmt.Errorf("%w: partition %s is not served by node %q (it moved or is opening); retry", coordinator.ErrUnavailable, a.Key, node)
}
