package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/remoteedges"
)

// Serving partitions: open what is assigned to this node, close what moved
// away or failed.

// owned is a partition this node serves: a host over its database log,
// opened at the epoch of its assignment a.
type owned struct {
	a partition.Assignment
	h *host.Host
	// stop ends the watch of its remote edges.
	stop context.CancelFunc
}

func (m *Member) assignLoop() {
	defer m.wg.Done()
	for m.sleep(m.cfg.AssignInterval) {
		m.reconcile(m.ctx)
	}
}

// Snapshot snapshots every partition this node serves now (tenure admin
// snapshot): the result sums their tasks, purges and deleted log rows, and
// names the partitions in Path.
func (m *Member) Snapshot(ctx context.Context) (coordinator.SnapshotResult, error) {
	m.mu.Lock()
	all := make([]*owned, 0, len(m.owned))
	for _, o := range m.owned {
		all = append(all, o)
	}
	m.mu.Unlock()
	var sum coordinator.SnapshotResult
	var names []string
	for _, o := range all {
		res, err := o.h.Snapshot(ctx)
		if err != nil {
			return sum, fmt.Errorf("snapshot of partition %s: %w", o.a.Key, err)
		}
		sum.LSN = max(sum.LSN, res.LSN)
		sum.Tasks += res.Tasks
		sum.Purged += res.Purged
		sum.DeletedSegments += res.DeletedSegments
		sum.Pause = max(sum.Pause, res.Pause)
		sum.Took += res.Took
		names = append(names, res.Path)
	}
	sum.Path = fmt.Sprintf("%d partitions on node %s: %s", len(names), m.cfg.NodeID, strings.Join(names, "; "))
	return sum, nil
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
		if !ok || a.Owner != m.cfg.NodeID || a.Epoch != o.a.Epoch || o.h.Err() != nil {
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
		if err := o.h.Err(); err != nil {
			reason = err.Error()
		}
		m.closeOwned(o, reason)
	}
	for _, a := range open {
		m.spawn(func() { m.open(a) })
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
	cfg := m.cfg.Coordinator
	cfg.TaskIDSuffix = taskSuffix(a.ID)
	cfg.Fence = &coordinator.Fence{Epoch: a.Epoch, NodeID: m.cfg.NodeID}
	cfg.Logger = lg
	h, err := host.Open(m.ctx, host.Config{
		Name: "partition " + a.Key.String(),
		Open: func(ctx context.Context) (host.Storage, error) {
			log, err := mysqllog.Open(ctx, m.cfg.DB, a.ID, a.Epoch, m.cfg.Log)
			if err != nil {
				return host.Storage{}, err
			}
			return host.Storage{Log: log, Snapshots: log.Snapshots()}, nil
		},
		Coordinator: cfg,
		Schedule:    m.cfg.Snapshots,
		// The partition may have moved: only the assignment check can tell
		// whether to open it again.
		OnFailure: func(error) { m.kick() },
		Clock:     m.cfg.Clock,
		Logger:    lg,
		Observer:  m.cfg.HostObserver,
		Deliver:   m.deliver,
	})
	if err != nil {
		m.openFailed(lg, err)
		return
	}
	watch, stop := context.WithCancel(m.ctx)
	o := &owned{a: a, h: h, stop: stop}
	m.mu.Lock()
	ok := !m.closed && m.trusted()
	if ok {
		m.owned[a.ID] = o
		// The remote edges of its BLOCKED tasks (docs/design/workflows.md,
		// "Cluster mode"), until it closes here.
		m.wg.Go(func() {
			remoteedges.Run(watch, remoteedges.Config{Coordinator: h.Coordinator, Router: m, Clock: m.cfg.Clock, Logger: lg})
		})
	}
	m.mu.Unlock()
	if !ok {
		m.closeOwned(o, "node stopping or untrusted")
		return
	}
	if c, err := h.Coordinator(); err == nil {
		st := c.Stats()
		lg.Info("serving partition", slog.Uint64("records", st.LastLSN), slog.Int("tasks", st.Tasks),
			slog.Duration("took", m.cfg.Clock.Now().Sub(start).Round(time.Millisecond)))
	}
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
	if o.stop != nil {
		o.stop()
	}
	o.h.Close()
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

// Owned returns how many partitions this node serves now.
func (m *Member) Owned() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned)
}

// Coordinators returns the coordinators of the partitions this node serves
// now (for figures about them, such as metrics).
func (m *Member) Coordinators() []*coordinator.Coordinator {
	m.mu.Lock()
	hosts := make([]*owned, 0, len(m.owned))
	for _, o := range m.owned {
		hosts = append(hosts, o)
	}
	m.mu.Unlock()
	var out []*coordinator.Coordinator
	for _, o := range hosts {
		if c, err := o.h.Coordinator(); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// local returns the partition if this node serves it now, or nil.
func (m *Member) local(id uint64) *owned {
	if !m.trusted() {
		return nil
	}
	m.mu.Lock()
	o := m.owned[id]
	m.mu.Unlock()
	if o == nil {
		return nil
	}
	if o.h.Err() != nil {
		m.kick() // close it and reopen from the log now, not at the next check
		return nil
	}
	return o
}

// kick runs an assignment check now, in the background, unless one that
// kick started is still running.
func (m *Member) kick() {
	if !m.kicked.CompareAndSwap(false, true) {
		return
	}
	if !m.spawn(func() {
		defer m.kicked.Store(false)
		m.reconcile(m.ctx)
	}) {
		m.kicked.Store(false)
	}
}

// spawn runs fn in a goroutine that Close waits for, unless the member is
// closing; it reports whether it started fn.
func (m *Member) spawn(fn func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Go(fn)
	return true
}

// errNotServed answers a forwarded request for a partition this node does
// not serve (any more): the sender retries after reading the map again.
func errNotServed(a partition.Assignment, node string) error {
	return fmt.Errorf("%w: partition %s is not served by node %q (it moved or is opening); retry", coordinator.ErrUnavailable, a.Key, node)
}
