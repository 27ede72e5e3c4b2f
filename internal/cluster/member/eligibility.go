package member

import (
	"context"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/reach"
	"github.com/tenurehq/tenure/internal/cluster/registry"
)

// Which nodes get partitions (docs/design/cluster.md; package reach): the
// coordinator decides each node's eligibility from the nodes' probe
// verdicts and allocates partitions over the eligible nodes only.

// DefaultReportTTL is how recent a probe verdict must be to count, with
// the default probe interval and timeout: three rounds and a probe.
const DefaultReportTTL = 3*DefaultProbeInterval + DefaultProbeTimeout

// reportTTL is how recent a probe verdict must be to count: three rounds
// of this node's probe interval, and a probe.
func (c *Config) reportTTL() time.Duration { return 3*c.ProbeInterval + c.ProbeTimeout }

// Eligibility is every node's eligibility for partitions as the cluster
// database holds it (ReadEligibility).
type Eligibility struct {
	// Nodes by id, every node of the node table.
	Nodes map[string]NodeEligibility
	// Fallback is true when no active node is eligible: the coordinator
	// then allocates over every active node (a cluster starting, or nodes
	// that cannot reach each other with no majority to tell which is
	// wrong).
	Fallback bool
}

// NodeEligibility is one node's.
type NodeEligibility struct {
	// Eligible is the coordinator's decision in force: the node may be
	// given partitions. Never for an inactive node.
	Eligible bool
	// Why explains it from the verdicts now (package reach), for people.
	Why string
	// Refused is true when a recent verdict of an eligible node (or, with
	// none eligible, of any active node) finds it unreachable.
	Refused bool
}

// eligibilityView is what the eligibility is decided and explained from.
type eligibilityView struct {
	nodes    []registry.Node
	stored   map[string]registry.Eligibility
	verdicts map[string]reach.Verdict // of the active nodes
	refused  map[string]bool
	stale    bool // a verdict older than registry.StaleProbes is recorded
}

// readEligibility reads the node table, the stored eligibility and the
// probe verdicts, and decides (reach.Decide) from the verdicts at most
// fresh old. With a target, it reads only the verdicts on that node: the
// view is then right about it alone.
func readEligibility(ctx context.Context, reg *registry.Registry, fresh time.Duration, target string) (eligibilityView, error) {
	nodes, err := reg.List(ctx)
	if err != nil {
		return eligibilityView{}, err
	}
	stored, err := reg.Eligibilities(ctx)
	if err != nil {
		return eligibilityView{}, err
	}
	probes, err := reg.Probes(ctx, target)
	if err != nil {
		return eligibilityView{}, err
	}
	v := eligibilityView{nodes: nodes, stored: stored, verdicts: make(map[string]reach.Verdict), refused: make(map[string]bool)}
	var in []reach.Node
	for _, n := range nodes {
		if n.Active {
			in = append(in, reach.Node{ID: n.ID, Eligible: stored[n.ID].Eligible})
		}
	}
	var reports []reach.Report
	for _, p := range probes {
		v.stale = v.stale || p.Age > registry.StaleProbes
		if p.Age <= fresh {
			reports = append(reports, reach.Report{Prober: p.Prober, Target: p.Target, OK: p.OK, Detail: p.Detail})
		}
	}
	voters := make(map[string]bool)
	for _, n := range in {
		if n.Eligible {
			voters[n.ID] = true
		}
	}
	for _, r := range reports {
		if !r.OK && r.Prober != r.Target && (voters[r.Prober] || len(voters) == 0) {
			v.refused[r.Target] = true
		}
	}
	for _, d := range reach.Decide(in, reports) {
		v.verdicts[d.ID] = d
	}
	return v, nil
}

// status explains the view: the decisions in force, with the verdicts'
// reasons.
func (v eligibilityView) status() Eligibility {
	out := Eligibility{Nodes: make(map[string]NodeEligibility, len(v.nodes)), Fallback: true}
	for _, n := range v.nodes {
		if !n.Active {
			out.Nodes[n.ID] = NodeEligibility{Why: "inactive: verified again when it returns"}
			continue
		}
		e := NodeEligibility{Eligible: v.stored[n.ID].Eligible, Why: v.verdicts[n.ID].Why, Refused: v.refused[n.ID]}
		if e.Eligible != v.verdicts[n.ID].Eligible {
			e.Why += " (the coordinator has yet to record the change)"
		}
		if e.Eligible {
			out.Fallback = false
		}
		out.Nodes[n.ID] = e
	}
	return out
}

// ReadEligibility reads every node's eligibility for partitions from the
// cluster database (for `tenure cluster status`), explained from the
// verdicts at most fresh old (DefaultReportTTL with the default probe
// interval).
func ReadEligibility(ctx context.Context, reg *registry.Registry, fresh time.Duration) (Eligibility, error) {
	v, err := readEligibility(ctx, reg, fresh, "")
	if err != nil {
		return Eligibility{}, err
	}
	return v.status(), nil
}

func (m *Member) eligibility(ctx context.Context) (Eligibility, error) {
	return ReadEligibility(ctx, m.reg, m.cfg.reportTTL())
}

// decideEligibility is the coordinator's step before allocating: it
// decides every active node's eligibility, writes what changed (fenced by
// the lock) and returns the nodes to allocate partitions over: the
// eligible ones, or every active one when none is (Eligibility.Fallback).
func (m *Member) decideEligibility(ctx context.Context) ([]string, error) {
	v, err := readEligibility(ctx, m.reg, m.cfg.reportTTL(), "")
	if err != nil {
		return nil, err
	}
	changes := make(map[string]registry.Eligibility)
	var active, eligible []string
	for _, n := range v.nodes {
		if !n.Active {
			if v.stored[n.ID].Eligible {
				changes[n.ID] = registry.Eligibility{Reason: "inactive (it left, or was silent longer than the node silence): verified again when it returns"}
			}
			continue
		}
		active = append(active, n.ID)
		d := v.verdicts[n.ID]
		if d.Eligible {
			eligible = append(eligible, n.ID)
		}
		if d.Changed {
			changes[n.ID] = registry.Eligibility{Eligible: d.Eligible, Reason: d.Why}
		}
	}
	if len(changes) > 0 {
		if err := m.reg.SetEligibility(ctx, m.el.Config().LockKey, m.cfg.NodeID, changes); err != nil {
			return nil, err
		}
		for id, c := range changes {
			if c.Eligible {
				m.lg.Info("node eligible for partitions", slog.String("eligible_node", id), slog.String("why", c.Reason))
			} else {
				m.lg.Warn("node no longer eligible for partitions: its partitions move to the others", slog.String("eligible_node", id), slog.String("why", c.Reason))
			}
		}
	}
	if v.stale {
		if err := m.reg.DeleteStaleProbes(ctx); err != nil {
			m.lg.Warn("deleting stale probe verdicts failed", slog.Any("err", err))
		}
	}
	fallback := len(eligible) == 0
	if fallback != m.fallback {
		m.fallback = fallback
		if fallback {
			m.lg.Warn("no active node is verified by the others: partitions go to every active node, as they did before verification", slog.Any("active", active))
		} else {
			m.lg.Info("partitions go to the verified nodes only", slog.Any("eligible", eligible), slog.Any("active", active))
		}
	}
	if fallback {
		return active, nil
	}
	return eligible, nil
}
