package reach

import (
	"fmt"
	"slices"
	"strings"
)

// Node is an active node and whether it is eligible now.
type Node struct {
	ID       string
	Eligible bool
}

// Report is one node's latest verdict on another: whether its probe
// reached it, and what the probe found (an error, or how it answered).
type Report struct {
	Prober, Target string
	OK             bool
	Detail         string
}

// Verdict is a node's eligibility as Decide sets it, and why.
type Verdict struct {
	ID       string
	Eligible bool
	// Changed is true when Eligible differs from the node's Node.Eligible.
	Changed bool
	// Why explains Eligible for people: who verified the node, who could
	// not and what they found, and what it needed.
	Why string
}

// Decide returns the verdict on every node of nodes (the active ones), in
// their order, from the reports (recent enough to count; reports on or by
// nodes not in nodes, and a node's on itself, are ignored). See the
// package documentation for the rules.
func Decide(nodes []Node, reports []Report) []Verdict {
	voters := make(map[string]bool)
	for _, n := range nodes {
		if n.Eligible {
			voters[n.ID] = true
		}
	}
	bootstrap := len(voters) == 0
	if bootstrap {
		for _, n := range nodes {
			voters[n.ID] = true
		}
	}
	// The latest report of each voter on each node: by target, then prober.
	on := make(map[string]map[string]Report)
	for _, r := range reports {
		if !voters[r.Prober] || r.Prober == r.Target {
			continue
		}
		if on[r.Target] == nil {
			on[r.Target] = make(map[string]Report)
		}
		on[r.Target][r.Prober] = r
	}
	out := make([]Verdict, 0, len(nodes))
	for _, n := range nodes {
		others := len(voters)
		if voters[n.ID] {
			others--
		}
		var ok, fail []string
		var found []string
		for _, p := range sortedKeys(on[n.ID]) {
			r := on[n.ID][p]
			if r.OK {
				ok = append(ok, p)
				continue
			}
			fail = append(fail, p)
			found = append(found, p+": "+r.Detail)
		}
		v := Verdict{ID: n.ID, Eligible: n.Eligible}
		switch {
		case others == 0:
			v.Eligible = true
			v.Why = "the only node that decides: eligible without a vote"
		case !n.Eligible && 2*len(ok) > others:
			v.Eligible = true
		case n.Eligible && 2*len(fail) > others:
			v.Eligible = false
		}
		if v.Why == "" {
			v.Why = explain(v.Eligible, bootstrap, others, ok, fail, found)
		}
		v.Changed = v.Eligible != n.Eligible
		out = append(out, v)
	}
	return out
}

// explain says why a node decided by votes has its eligibility.
func explain(eligible, bootstrap bool, others int, ok, fail, found []string) string {
	who := "eligible nodes"
	if bootstrap {
		who = "active nodes (none is eligible yet, so every active node decides)"
	}
	need := others/2 + 1
	var b strings.Builder
	if eligible {
		fmt.Fprintf(&b, "reached by %d of the %d other %s", len(ok), others, who)
		if len(ok) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(ok, ", "))
		}
	} else {
		fmt.Fprintf(&b, "reached by %d of the %d other %s, needs %d", len(ok), others, who, need)
		if len(ok) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(ok, ", "))
		}
	}
	if len(fail) > 0 {
		fmt.Fprintf(&b, "; unreachable from %s", strings.Join(found, "; "))
	} else if !eligible && len(ok) < need {
		b.WriteString("; the others have not reported on it yet")
	}
	return b.String()
}

func sortedKeys(m map[string]Report) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
