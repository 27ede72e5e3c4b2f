package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/alloc"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/nodeauth"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/route"
)

// ErrUntrusted wraps coordinator.ErrUnavailable: the node has not had a
// heartbeat confirmed within its trust window, so it serves nothing.
var ErrUntrusted = fmt.Errorf("%w: this node lost contact with the cluster database and stopped serving until it regains it", coordinator.ErrUnavailable)

// Member is one running cluster node. It routes the API's requests to
// the partitions of the cluster (route.Router).
type Member struct {
	cfg   Config
	trust time.Duration
	reg   *registry.Registry
	el    *election.Elector
	store *partition.Store
	lg    *slog.Logger

	// trustUntil is when the node stops serving unless a heartbeat is
	// confirmed before (a *time.Time on the monotonic clock; nil: never
	// trusted yet).
	trustUntil atomic.Pointer[time.Time]
	// leading is non-zero while this node holds the coordinator lock (the
	// lock's epoch at election).
	leading atomic.Uint64

	routes    atomic.Pointer[routes]
	ensureMu  sync.Mutex // serialises queue creation
	refreshMu sync.Mutex
	refreshes atomic.Uint64

	mu      sync.Mutex
	owned   map[uint64]*owned
	opening map[uint64]bool
	peers   map[string]route.Peer
	closed  bool
	// feeds are the event feeds of the partitions streams read (events.go).
	feeds map[uint64]*events.Feed

	rr     atomic.Uint64 // round robin of submits without a request id
	kicked atomic.Bool   // an out-of-turn assignment check is running

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// keys sign the requests this node forwards and check those forwarded
	// to it.
	keys *nodeauth.Keys

	// probeClient makes the probes of the other nodes (probe.go).
	probeClient *http.Client
	// eligible is this node's eligibility for partitions, as of the last
	// probe round; unreachable how many active nodes its probes find
	// unreachable.
	eligible    atomic.Bool
	unreachable atomic.Int64
	// fallback is what the coordinator last logged: no active node
	// eligible (only the lead goroutine uses it, one term after another).
	fallback bool
}

// SignForwarded marks a request this node forwards to procedure for
// principal (remote.Signer).
func (m *Member) SignForwarded(h http.Header, procedure, principal string) {
	m.keys.Sign(h, route.ForwardedHeader, m.cfg.NodeID, procedure, principal)
}

// VerifyForwarded checks that a request forwarded to procedure comes from
// a node of this cluster, and returns that node and the principal it
// forwards for (route.NodeVerifier).
func (m *Member) VerifyForwarded(h http.Header, procedure string) (node, principal string, err error) {
	return m.keys.Verify(h, route.ForwardedHeader, procedure)
}

// Start registers the node, waits for its first confirmed heartbeat (so it
// is trusted when it returns) and starts its loops. Close stops them.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	reg, err := registry.New(cfg.DB, cfg.Registry)
	if err != nil {
		return nil, err
	}
	cfg.Registry = reg.Config()
	trust := trustWindow(cfg.Registry)
	if trust <= cfg.Registry.HeartbeatInterval {
		return nil, fmt.Errorf("member: node silence %v leaves a trust window of %v (silence − silence/5), not above the heartbeat interval %v: raise the silence",
			cfg.Registry.Silence, trust, cfg.Registry.HeartbeatInterval)
	}
	el, err := election.New(cfg.DB, cfg.Election)
	if err != nil {
		return nil, err
	}
	secret, err := nodeauth.LoadSecret(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	keys, err := nodeauth.New(secret, cfg.Clock)
	if err != nil {
		return nil, err
	}
	m := &Member{
		keys:    keys,
		cfg:     cfg,
		trust:   trust,
		reg:     reg,
		el:      el,
		store:   partition.New(cfg.DB),
		lg:      cfg.Logger.With(slog.String("node", cfg.NodeID)),
		owned:   make(map[uint64]*owned),
		opening: make(map[uint64]bool),
		peers:   make(map[string]route.Peer),

		probeClient: cfg.probeClient(),
	}
	m.routes.Store(&routes{})
	if err := m.checkIDFree(ctx); err != nil {
		return nil, err
	}
	if err := m.reg.Join(ctx, cfg.NodeID, cfg.Advertise, cfg.Protocol); err != nil {
		return nil, fmt.Errorf("member: node %q joining the cluster: %w", cfg.NodeID, err)
	}
	if err := m.heartbeat(ctx); err != nil {
		return nil, fmt.Errorf("member: registering node %q: %w", cfg.NodeID, err)
	}
	if err := m.refresh(ctx); err != nil {
		return nil, fmt.Errorf("member: reading the partition map: %w", err)
	}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.wg.Add(4)
	go m.heartbeatLoop()
	go m.electionLoop()
	go m.assignLoop()
	go m.probeLoop()
	m.lg.Info("cluster node started", slog.String("advertise", cfg.Advertise), slog.Duration("trust_window", trust))
	return m, nil
}

// ErrNodeIDInUse is returned by Start when another live process
// heartbeats under the same node id.
var ErrNodeIDInUse = errors.New("member: node id in use")

// checkIDFree refuses to start when the node table shows this id active,
// advertised at another address and heard from within the silence: two
// processes under one id would fight over its partitions (safely, since
// the log fences every append, but without serving). A restart at the same
// address is this node coming back: its listener is bound, so the previous
// process is gone.
func (m *Member) checkIDFree(ctx context.Context) error {
	nodes, err := m.reg.List(ctx)
	if err != nil {
		return fmt.Errorf("member: reading the node table: %w", err)
	}
	for _, n := range nodes {
		if n.ID == m.cfg.NodeID && n.Active && n.AdvertiseAddr != m.cfg.Advertise && n.Silent < m.cfg.Registry.Silence {
			return fmt.Errorf("%w: node %q is active at %s (heard from %v ago); give this node another --node-id, or stop that one (its row goes inactive after %v of silence)",
				ErrNodeIDInUse, n.ID, n.AdvertiseAddr, n.Silent.Round(time.Millisecond), m.cfg.Registry.Silence)
		}
	}
	return nil
}

// Close stops the loops, closes every partition, leaves the registry and
// releases the coordinator lock if it holds it, so that the others take
// over without waiting for the silence or the lock's TTL.
func (m *Member) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.dropAll("node stopping")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.reg.Leave(ctx, m.cfg.NodeID); err != nil {
		m.lg.Warn("leaving the registry failed; the coordinator marks the node inactive after its silence", slog.Any("err", err))
	}
	m.lg.Info("cluster node stopped")
	return nil
}

// Err is non-nil while the node does not serve: closed, or untrusted.
func (m *Member) Err() error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: node stopped", coordinator.ErrUnavailable)
	}
	if !m.trusted() {
		return ErrUntrusted
	}
	return nil
}

// Leading reports whether this node holds the coordinator lock, and at
// which epoch (of its election).
func (m *Member) Leading() (bool, uint64) {
	e := m.leading.Load()
	return e != 0, e
}

func (m *Member) trusted() bool {
	u := m.trustUntil.Load()
	return u != nil && m.cfg.Clock.Now().Before(*u)
}

// heartbeat sends one heartbeat and, if the database confirms it, extends
// the trust to its sending time plus the trust window.
func (m *Member) heartbeat(ctx context.Context) error {
	sent := m.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, m.trust)
	defer cancel()
	if err := m.reg.Heartbeat(ctx, m.cfg.NodeID, m.cfg.Advertise); err != nil {
		return err
	}
	until := sent.Add(m.trust)
	m.trustUntil.Store(&until)
	return nil
}

func (m *Member) heartbeatLoop() {
	defer m.wg.Done()
	failing := false
	for m.sleep(m.cfg.Registry.HeartbeatInterval) {
		err := m.heartbeat(m.ctx)
		switch {
		case err != nil && m.ctx.Err() == nil:
			if !failing {
				m.lg.Warn("heartbeat failed; the node stops serving if none succeeds within its trust window",
					slog.Any("err", err), slog.Duration("trust_window", m.trust))
			}
			failing = true
		case err == nil && failing:
			m.lg.Info("heartbeat confirmed again")
			failing = false
		}
	}
}

// sleep waits d, or returns false when the member closes.
func (m *Member) sleep(d time.Duration) bool {
	return clock.Sleep(m.ctx, m.cfg.Clock, d) == nil
}

func (m *Member) electionLoop() {
	defer m.wg.Done()
	var stop context.CancelFunc
	var done chan struct{}
	err := m.el.Run(m.ctx, func(epoch uint64) {
		m.leading.Store(epoch)
		var ctx context.Context
		ctx, stop = context.WithCancel(m.ctx)
		done = make(chan struct{})
		go func() {
			defer close(done)
			m.lead(ctx)
		}()
	}, func(reason error) {
		stop()
		<-done
		m.leading.Store(0)
		m.lg.Warn("no longer the coordinator", slog.Any("reason", reason))
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		m.lg.Error("election stopped", slog.Any("err", err))
	}
}

// lead runs the coordinator's work while this node holds the lock.
func (m *Member) lead(ctx context.Context) {
	m.lg.Info("acting as the cluster coordinator")
	for {
		if err := m.allocate(ctx); err != nil && ctx.Err() == nil {
			m.lg.Warn("allocating partitions failed; retrying", slog.Any("err", err))
		}
		if clock.Sleep(ctx, m.cfg.Clock, m.cfg.AssignInterval) != nil {
			return
		}
	}
}

// allocate is one round of the coordinator: sweep silent nodes, decide
// which active nodes are eligible for partitions (eligibility.go), compute
// the allocation over them and write what changed.
func (m *Member) allocate(ctx context.Context) error {
	if _, err := m.reg.Sweep(ctx); err != nil {
		return err
	}
	active, err := m.decideEligibility(ctx)
	if err != nil {
		return err
	}
	if len(active) == 0 {
		return nil
	}
	as, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	current := make(map[cluster.PartitionKey]string, len(as))
	keys := make([]cluster.PartitionKey, len(as))
	for i, a := range as {
		keys[i] = a.Key
		if a.Owner != "" {
			current[a.Key] = a.Owner
		}
	}
	next := alloc.CalculateAllocation(current, keys, active)
	if maps.Equal(next, current) {
		return nil
	}
	changed, err := m.store.Apply(ctx, partition.Coordinator{LockKey: m.el.Config().LockKey, NodeID: m.cfg.NodeID}, next)
	if err != nil {
		return err
	}
	for _, a := range changed {
		m.lg.Info("partition assigned", slog.String("partition", a.Key.String()), slog.String("owner", a.Owner),
			slog.Uint64("epoch", a.Epoch), slog.String("was", current[a.Key]))
	}
	return nil
}
