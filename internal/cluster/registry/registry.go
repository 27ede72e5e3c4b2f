package registry

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
)

// Defaults and limits of Config.
const (
	// DefaultHeartbeatInterval and DefaultSilence ride out a replicated
	// database holding commits while it evicts a dead server (Galera:
	// about 6 s): a node trusts a confirmed heartbeat for 4/5 of the
	// silence (9.6 s), more than one interval plus that stall, so a
	// heartbeat that waits through it arrives in time
	// (docs/guides/cluster-mode.md).
	DefaultHeartbeatInterval = time.Second
	DefaultSilence           = 12 * time.Second
	DefaultMaxNodes          = 1000

	maxInterval     = time.Hour
	minInterval     = 10 * time.Millisecond
	maxMaxNodes     = 100_000
	maxAddrBytes    = 255
	leaveTimeout    = 2 * time.Second
	statusActive    = 1
	statusInactive  = 0
	sweepBatchLimit = 1000
	// maxTxTries bounds the tries of a registry write that the database
	// rolled back (cluster.RetryRolledBack): nodes joining at once
	// deadlock one another in InnoDB, and the loser joins again.
	maxTxTries = 10
)

// Config configures a Registry. Zero fields take their defaults.
type Config struct {
	// HeartbeatInterval is how often Run heartbeats (default 1 s).
	HeartbeatInterval time.Duration
	// Silence is how long a node may go without a heartbeat before Sweep
	// marks it inactive (default 12 s); more than HeartbeatInterval.
	Silence time.Duration
	// MaxNodes caps the rows List reads (default 1000).
	MaxNodes int
	// Clock times Run's heartbeats; nil is the real clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.Silence = cmp.Or(c.Silence, DefaultSilence)
	c.MaxNodes = cmp.Or(c.MaxNodes, DefaultMaxNodes)
	c.Clock = cmp.Or(c.Clock, clock.Real)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	if c.HeartbeatInterval < minInterval || c.HeartbeatInterval > maxInterval {
		return fmt.Errorf("registry: Config.HeartbeatInterval is %v; want %v to %v", c.HeartbeatInterval, minInterval, maxInterval)
	}
	if c.Silence <= c.HeartbeatInterval || c.Silence > maxInterval {
		return fmt.Errorf("registry: Config.Silence is %v; want more than HeartbeatInterval (%v) and at most %v", c.Silence, c.HeartbeatInterval, maxInterval)
	}
	if c.MaxNodes < 1 || c.MaxNodes > maxMaxNodes {
		return fmt.Errorf("registry: Config.MaxNodes is %d; want 1 to %d", c.MaxNodes, maxMaxNodes)
	}
	return nil
}

// Node is one row of the registry.
type Node struct {
	ID            string
	AdvertiseAddr string // where other nodes and clients reach it
	Active        bool
	LastHeartbeat time.Time     // database time
	Silent        time.Duration // since the last heartbeat, by the database's clock, when listed
}

// Registry reads and writes the nodes table.
type Registry struct {
	db  *sql.DB
	cfg Config
}

// New returns a Registry on db (opened with cluster.OpenDB, migrated).
func New(db *sql.DB, cfg Config) (*Registry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Registry{db: db, cfg: cfg}, nil
}

// Config is the configuration in force, defaults filled in.
func (r *Registry) Config() Config { return r.cfg }

func checkNode(id, addr string) error {
	if err := cluster.CheckName("registry: node id", id); err != nil {
		return err
	}
	if len(addr) > maxAddrBytes {
		return fmt.Errorf("registry: advertise address is %d bytes, over the limit of %d", len(addr), maxAddrBytes)
	}
	return nil
}

// heartbeatSQL registers node ? at ?, status ?, or records that it is
// alive.
const heartbeatSQL = `INSERT INTO nodes (node_id, advertise_addr, status, registered_at, last_heartbeat)
		VALUES (?, ?, ?, NOW(6), NOW(6))
		ON DUPLICATE KEY UPDATE advertise_addr = VALUES(advertise_addr), status = VALUES(status), last_heartbeat = NOW(6)`

// Heartbeat registers the node, or records that it is alive: it is active
// with last_heartbeat = the database's NOW(6).
func (r *Registry) Heartbeat(ctx context.Context, id, advertiseAddr string) error {
	if err := checkNode(id, advertiseAddr); err != nil {
		return err
	}
	err := cluster.RetryRolledBack(ctx, r.cfg.Clock, maxTxTries, func() error {
		_, err := r.db.ExecContext(ctx, heartbeatSQL, id, advertiseAddr, statusActive)
		return err
	})
	if err != nil {
		return fmt.Errorf("registry: heartbeat of node %q: %w", id, err)
	}
	return nil
}

// Leave marks the node inactive now (a clean shutdown).
func (r *Registry) Leave(ctx context.Context, id string) error {
	if _, err := r.db.ExecContext(ctx, "UPDATE nodes SET status = ? WHERE node_id = ?", statusInactive, id); err != nil {
		return fmt.Errorf("registry: node %q leaving: %w", id, err)
	}
	return nil
}

// List returns every node, ordered by id. It fails rather than return a
// partial list when there are more than MaxNodes.
func (r *Registry) List(ctx context.Context) ([]Node, error) {
	var out []Node
	err := cluster.EachRow(ctx, r.db, "registry: listing nodes", `SELECT node_id, advertise_addr, status, last_heartbeat,
		TIMESTAMPDIFF(MICROSECOND, last_heartbeat, NOW(6))
		FROM nodes ORDER BY node_id LIMIT ?`, []any{r.cfg.MaxNodes + 1}, func(rows *sql.Rows) error {
		var n Node
		var status int
		var silentMicros int64
		if err := rows.Scan(&n.ID, &n.AdvertiseAddr, &status, &n.LastHeartbeat, &silentMicros); err != nil {
			return err
		}
		n.Active = status == statusActive
		n.Silent = time.Duration(max(0, silentMicros)) * time.Microsecond
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) > r.cfg.MaxNodes {
		return nil, fmt.Errorf("registry: more than Config.MaxNodes = %d nodes are registered", r.cfg.MaxNodes)
	}
	return out, nil
}

// Active returns the ids of the active nodes, in order.
func (r *Registry) Active(ctx context.Context) ([]string, error) {
	nodes, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range nodes {
		if n.Active {
			ids = append(ids, n.ID)
		}
	}
	return ids, nil
}

// Sweep marks inactive every active node whose last heartbeat is more than
// Silence ago by the database's clock, and returns their ids (at most 1000
// per call; the rest go at the next). A sweep the database rolled back (it
// met joining nodes' locks) runs again.
func (r *Registry) Sweep(ctx context.Context) ([]string, error) {
	var ids []string
	err := cluster.RetryRolledBack(ctx, r.cfg.Clock, maxTxTries, func() error {
		var err error
		ids, err = r.sweep(ctx)
		return err
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	r.cfg.Logger.Warn("registry: marked silent nodes inactive", slog.Any("nodes", ids), slog.Duration("silence", r.cfg.Silence))
	return ids, nil
}

// sweep is one try of Sweep, one transaction.
func (r *Registry) sweep(ctx context.Context) ([]string, error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("registry: sweep: %w", err)
	}
	defer tx.Rollback()
	silence := r.cfg.Silence.Microseconds()
	ids, err := cluster.Column[string](ctx, tx, "registry: sweep", `SELECT node_id FROM nodes
		WHERE status = ? AND last_heartbeat < TIMESTAMPADD(MICROSECOND, -?, NOW(6))
		ORDER BY node_id LIMIT ? FOR UPDATE`, statusActive, silence, sweepBatchLimit)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	args := []any{statusInactive}
	for _, id := range ids {
		args = append(args, id)
	}
	q := "UPDATE nodes SET status = ? WHERE node_id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return nil, fmt.Errorf("registry: sweep: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("registry: sweep: %w", err)
	}
	return ids, nil
}

// Run heartbeats for the node every HeartbeatInterval until ctx ends, then
// marks it inactive (Leave). A failed heartbeat is logged and retried at
// the next interval; Run returns ctx.Err().
func (r *Registry) Run(ctx context.Context, id, advertiseAddr string) error {
	if err := checkNode(id, advertiseAddr); err != nil {
		return err
	}
	for {
		if err := r.Heartbeat(ctx, id, advertiseAddr); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("registry: heartbeat failed", slog.String("node", id), slog.Any("err", err))
		}
		t := r.cfg.Clock.NewTimer(r.cfg.HeartbeatInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
			if err := r.Leave(lctx, id); err != nil {
				r.cfg.Logger.Warn("registry: leaving failed; the sweep will mark the node inactive", slog.Any("err", err))
			}
			cancel()
			return ctx.Err()
		case <-t.C():
		}
	}
}
