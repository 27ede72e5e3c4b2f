package registry

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurehq/tenure/internal/cluster"
)

// Limits of the reachability tables (docs/design/cluster.md, "Which nodes get
// partitions").
const (
	// maxDetailBytes caps a probe's detail as stored (VARCHAR(1024)).
	maxDetailBytes = 1000
	// maxReasonBytes caps an eligibility's reason as stored
	// (VARCHAR(2048)).
	maxReasonBytes = 2000
	// maxProbeRows caps the rows Probes reads: one per pair of nodes.
	maxProbeRows = 100_000
	// StaleProbes is how old a verdict gets before DeleteStaleProbes
	// deletes it (a node that left, or stopped probing).
	StaleProbes = 10 * time.Minute
	// staleBatch caps the rows one call deletes.
	staleBatch = 1000
)

// Verdict is a node's verdict on another from one probe round: it reached
// it (Detail: how it answered) or not (Detail: the error).
type Verdict struct {
	Target string
	OK     bool
	Detail string
}

// Probe is a verdict as recorded, with its age by the database's clock.
type Probe struct {
	Prober, Target string
	OK             bool
	Detail         string
	Age            time.Duration
}

// Eligibility is a node's row of node_eligibility: whether it may be
// given partitions, why, and how long ago that was decided (the
// database's clock).
type Eligibility struct {
	Eligible bool
	Reason   string
	Since    time.Duration
}

// RecordProbes records prober's latest verdicts, replacing its earlier
// ones on the same targets; each is stamped with the database's NOW(6).
func (r *Registry) RecordProbes(ctx context.Context, prober string, vs []Verdict) error {
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > r.cfg.MaxNodes {
		return fmt.Errorf("registry: %d verdicts from node %q, over Config.MaxNodes = %d", len(vs), prober, r.cfg.MaxNodes)
	}
	args := make([]any, 0, 4*len(vs))
	for _, v := range vs {
		args = append(args, prober, v.Target, v.OK, truncate(v.Detail, maxDetailBytes))
	}
	q := `INSERT INTO node_probes (prober_id, target_id, ok, detail, checked_at) VALUES (?, ?, ?, ?, NOW(6))` +
		strings.Repeat(", (?, ?, ?, ?, NOW(6))", len(vs)-1) +
		` ON DUPLICATE KEY UPDATE ok = VALUES(ok), detail = VALUES(detail), checked_at = VALUES(checked_at)`
	if _, err := r.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("registry: recording the probes of node %q: %w", prober, err)
	}
	return nil
}

// Probes returns every recorded verdict, or with a target only those on
// that node, ordered by target and prober.
func (r *Registry) Probes(ctx context.Context, target string) ([]Probe, error) {
	q, args := `SELECT prober_id, target_id, ok, detail, TIMESTAMPDIFF(MICROSECOND, checked_at, NOW(6))
		FROM node_probes ORDER BY target_id, prober_id LIMIT ?`, []any{maxProbeRows + 1}
	if target != "" {
		q, args = `SELECT prober_id, target_id, ok, detail, TIMESTAMPDIFF(MICROSECOND, checked_at, NOW(6))
		FROM node_probes WHERE target_id = ? ORDER BY prober_id LIMIT ?`, []any{target, maxProbeRows + 1}
	}
	var out []Probe
	err := cluster.EachRow(ctx, r.db, "registry: reading the probes", q, args, func(rows *sql.Rows) error {
		var p Probe
		var micros int64
		if err := rows.Scan(&p.Prober, &p.Target, &p.OK, &p.Detail, &micros); err != nil {
			return err
		}
		p.Age = time.Duration(max(0, micros)) * time.Microsecond
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) > maxProbeRows {
		return nil, fmt.Errorf("registry: more than %d probe verdicts are recorded", maxProbeRows)
	}
	return out, nil
}

// Eligibilities returns every node's row of node_eligibility, by id.
func (r *Registry) Eligibilities(ctx context.Context) (map[string]Eligibility, error) {
	out := make(map[string]Eligibility)
	err := cluster.EachRow(ctx, r.db, "registry: reading the nodes' eligibility", `SELECT node_id, eligible, reason, TIMESTAMPDIFF(MICROSECOND, changed_at, NOW(6))
		FROM node_eligibility LIMIT ?`, []any{r.cfg.MaxNodes + 1}, func(rows *sql.Rows) error {
		var id string
		var e Eligibility
		var micros int64
		if err := rows.Scan(&id, &e.Eligible, &e.Reason, &micros); err != nil {
			return err
		}
		e.Since = time.Duration(max(0, micros)) * time.Microsecond
		out[id] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) > r.cfg.MaxNodes {
		return nil, fmt.Errorf("registry: more than Config.MaxNodes = %d nodes have an eligibility", r.cfg.MaxNodes)
	}
	return out, nil
}

// SetEligibility writes changes (node id → eligible and why), in one
// transaction fenced by the coordinator lock lockKey held by node
// (cluster.CheckCoordinator: cluster.ErrNotCoordinator otherwise).
func (r *Registry) SetEligibility(ctx context.Context, lockKey, node string, changes map[string]Eligibility) error {
	if len(changes) > r.cfg.MaxNodes {
		return fmt.Errorf("registry: %d eligibility changes, over Config.MaxNodes = %d", len(changes), r.cfg.MaxNodes)
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: setting eligibility: %w", err)
	}
	defer tx.Rollback()
	if err := cluster.CheckCoordinator(ctx, tx, lockKey, node); err != nil {
		return fmt.Errorf("registry: setting eligibility: %w", err)
	}
	for _, id := range slices.Sorted(maps.Keys(changes)) {
		e := changes[id]
		if _, err := tx.ExecContext(ctx, `INSERT INTO node_eligibility (node_id, eligible, reason, changed_at) VALUES (?, ?, ?, NOW(6))
			ON DUPLICATE KEY UPDATE eligible = VALUES(eligible), reason = VALUES(reason), changed_at = VALUES(changed_at)`,
			id, e.Eligible, truncate(e.Reason, maxReasonBytes)); err != nil {
			return fmt.Errorf("registry: setting the eligibility of node %q: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry: setting eligibility: %w", err)
	}
	return nil
}

// DeleteStaleProbes deletes verdicts older than StaleProbes (at most a
// thousand per call): those of nodes that left, or on them. It needs no
// fence: such a verdict counts for nothing.
func (r *Registry) DeleteStaleProbes(ctx context.Context) error {
	if _, err := r.db.ExecContext(ctx, "DELETE FROM node_probes WHERE checked_at < TIMESTAMPADD(MICROSECOND, -?, NOW(6)) LIMIT ?",
		StaleProbes.Microseconds(), staleBatch); err != nil {
		return fmt.Errorf("registry: deleting stale probe verdicts: %w", err)
	}
	return nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
