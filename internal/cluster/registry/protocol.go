package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/tenurehq/tenure/internal/cluster"
)

// ErrProtocol is returned by Join when the node speaks no protocol version
// that every active node of the cluster speaks.
var ErrProtocol = errors.New("registry: no protocol version meets")

// Versions are the protocol versions a node speaks, Min to Max
// (route.MinProtocol to route.Protocol).
type Versions struct{ Min, Max int }

func (v Versions) String() string {
	if v.Min == v.Max {
		return fmt.Sprint(v.Min)
	}
	return fmt.Sprintf("%d to %d", v.Min, v.Max)
}

// meet is the versions both speak; Min > Max when none.
func (v Versions) meet(o Versions) Versions { return Versions{max(v.Min, o.Min), min(v.Max, o.Max)} }

func (v Versions) empty() bool { return v.Min > v.Max }

// unstated are the versions of a node that joined before nodes stated
// theirs.
var unstated = Versions{1, 1}

// Join registers the node as Heartbeat does, once its protocol versions
// meet those of every other active node heard from within the silence,
// and records them. Otherwise it refuses with ErrProtocol, naming the
// versions each side speaks, and registers nothing. Two nodes that join
// at once take turns: each reads the active nodes with a locking read,
// and one that InnoDB rolls back (a deadlock or lock-wait timeout between
// them) joins again, up to maxTxTries times.
func (r *Registry) Join(ctx context.Context, id, advertiseAddr string, v Versions) error {
	if err := checkNode(id, advertiseAddr); err != nil {
		return err
	}
	if v.Min < 1 || v.empty() {
		return fmt.Errorf("registry: protocol versions %d to %d: want 1 <= Min <= Max", v.Min, v.Max)
	}
	return cluster.RetryRolledBack(ctx, r.cfg.Clock, maxTxTries, func() error { return r.join(ctx, id, advertiseAddr, v) })
}

// join is one try of Join, one transaction.
func (r *Registry) join(ctx context.Context, id, advertiseAddr string, v Versions) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: node %q joining: %w", id, err)
	}
	defer tx.Rollback()
	others, err := r.activeVersions(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := meets(id, v, others); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO node_protocols (node_id, min_version, max_version, stated_at) VALUES (?, ?, ?, NOW(6))
		ON DUPLICATE KEY UPDATE min_version = VALUES(min_version), max_version = VALUES(max_version), stated_at = NOW(6)`, id, v.Min, v.Max); err != nil {
		return fmt.Errorf("registry: node %q stating its protocol versions: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, heartbeatSQL, id, advertiseAddr, statusActive); err != nil {
		return fmt.Errorf("registry: node %q joining: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry: node %q joining: %w", id, err)
	}
	return nil
}

// nodeVersions is a node and the versions it speaks.
type nodeVersions struct {
	id string
	v  Versions
}

// activeVersions reads the versions of the active nodes other than id
// heard from within the silence, locking their rows.
func (r *Registry) activeVersions(ctx context.Context, tx *sql.Tx, id string) ([]nodeVersions, error) {
	var out []nodeVersions
	err := cluster.EachRow(ctx, tx, "registry: reading the nodes' protocol versions", `SELECT n.node_id, COALESCE(p.min_version, ?), COALESCE(p.max_version, ?)
		FROM nodes n LEFT JOIN node_protocols p ON p.node_id = n.node_id
		WHERE n.status = ? AND n.node_id <> ? AND n.last_heartbeat >= TIMESTAMPADD(MICROSECOND, -?, NOW(6))
		ORDER BY n.node_id LIMIT ? FOR UPDATE`,
		[]any{unstated.Min, unstated.Max, statusActive, id, r.cfg.Silence.Microseconds(), r.cfg.MaxNodes + 1}, func(rows *sql.Rows) error {
			var n nodeVersions
			if err := rows.Scan(&n.id, &n.v.Min, &n.v.Max); err != nil {
				return err
			}
			out = append(out, n)
			return nil
		})
	return out, err
}

// meets checks that v meets the versions of every one of others.
func meets(id string, v Versions, others []nodeVersions) error {
	if len(others) == 0 {
		return nil
	}
	cluster := Versions{others[0].v.Min, others[0].v.Max}
	var names, each []string
	for _, n := range others {
		cluster = cluster.meet(n.v)
		names = append(names, n.id)
		each = append(each, fmt.Sprintf("%s speaks %s", n.id, n.v))
	}
	switch {
	case cluster.empty():
		return fmt.Errorf("%w: the active nodes speak no version in common (%s); node %q, which speaks %s, joins none of them: stop the nodes of the older release first",
			ErrProtocol, strings.Join(each, ", "), id, v)
	case v.meet(cluster).empty():
		return fmt.Errorf("%w: node %q speaks protocol versions %s, and the active nodes (%s) meet at %s: start this node with a tenure release that speaks %s, or stop those nodes and start them with this release",
			ErrProtocol, id, v, strings.Join(names, ", "), cluster, cluster)
	}
	return nil
}
