package reach_test

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/cluster/reach"
)

// n builds the active nodes: an id with a trailing * is eligible now.
func n(ids ...string) []reach.Node {
	var out []reach.Node
	for _, id := range ids {
		e := strings.HasSuffix(id, "*")
		out = append(out, reach.Node{ID: strings.TrimSuffix(id, "*"), Eligible: e})
	}
	return out
}

// r builds reports "a>b" (a reached b) and "a!b" (a could not).
func r(specs ...string) []reach.Report {
	var out []reach.Report
	for _, s := range specs {
		if a, b, ok := strings.Cut(s, ">"); ok {
			out = append(out, reach.Report{Prober: a, Target: b, OK: true})
			continue
		}
		a, b, _ := strings.Cut(s, "!")
		out = append(out, reach.Report{Prober: a, Target: b, Detail: "x509: certificate signed by unknown authority"})
	}
	return out
}

func TestDecide(t *testing.T) {
	// all is every ordered pair of ids reaching each other.
	all := func(ids ...string) []string {
		var out []string
		for _, a := range ids {
			for _, b := range ids {
				if a != b {
					out = append(out, a+">"+b)
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		name    string
		nodes   []reach.Node
		reports []reach.Report
		want    string // the eligible ids, in order
	}{
		{"one node, no reports", n("a"), nil, "a"},
		{"one eligible node stays", n("a*"), nil, "a"},
		{"starting, nobody reported", n("a", "b", "c"), nil, ""},
		{"starting, one pair reported", n("a", "b", "c"), r("a>b", "b>a"), ""},
		{"starting, all reported", n("a", "b", "c"), r(all("a", "b", "c")...), "abc"},
		{"starting with a foreign node", n("a", "b", "c", "u"),
			r(append(all("a", "b", "c"), "a!u", "b!u", "c!u", "u!a", "u!b", "u!c")...), "abc"},
		{"a foreign node joins three", n("a*", "b*", "c*", "u"), r("a!u", "b!u", "c!u", "u!a", "u!b", "u!c"), "abc"},
		{"its own verdict on the cluster does not count even when it reaches one", n("a*", "b*", "c*", "u"), r("a!u", "b!u", "c>u", "u!a", "u!b", "u!c"), "abc"},
		{"a good node joins after one of three verified it", n("a*", "b*", "c*", "d"), r("a>d"), "abc"},
		{"and after two of three", n("a*", "b*", "c*", "d"), r("a>d", "b>d"), "abcd"},
		{"one of three rotated to a foreign CA", n("a*", "b*", "c*"), r("a>b", "b>a", "a!c", "b!c", "c!a", "c!b"), "ab"},
		{"one of three failed by one prober only", n("a*", "b*", "c*"), r("a!c"), "abc"},
		{"an eligible node without reports keeps it", n("a*", "b*", "c*"), nil, "abc"},
		{"a lone eligible node admits a good newcomer", n("a*", "b"), r("a>b"), "ab"},
		{"and not a foreign one", n("a*", "u"), r("a!u", "u!a"), "a"},
		{"two eligible nodes that cannot reach each other both lose it", n("a*", "b*"), r("a!b", "b!a"), ""},
		{"reports on oneself are ignored", n("a", "b", "c"), r("a>a", "b>b", "c>c", "a>b", "b>a"), ""},
		{"reports by or on nodes not active are ignored", n("a*", "b"), r("x>b", "a>y"), "a"},
	} {
		var got strings.Builder
		for _, v := range reach.Decide(c.nodes, c.reports) {
			if v.Eligible {
				got.WriteString(v.ID)
			}
			if v.Why == "" {
				t.Errorf("%s: no reason for %s", c.name, v.ID)
			}
		}
		if got.String() != c.want {
			t.Errorf("%s: eligible %q, want %q", c.name, got.String(), c.want)
		}
	}
}

// Changed marks the nodes whose eligibility moved, and Why names who
// could not reach a node and what they found.
func TestDecideExplains(t *testing.T) {
	vs := reach.Decide(n("a*", "b*", "c*", "u"), r("a!u", "b!u", "a>b", "b>a", "c>a"))
	byID := make(map[string]reach.Verdict)
	for _, v := range vs {
		byID[v.ID] = v
	}
	u := byID["u"]
	if u.Eligible || u.Changed || !strings.Contains(u.Why, "reached by 0 of the 3 other eligible nodes, needs 2") ||
		!strings.Contains(u.Why, "a: x509: certificate signed by unknown authority") || !strings.Contains(u.Why, "b: x509") {
		t.Errorf("u: %+v", u)
	}
	if a := byID["a"]; !a.Eligible || a.Changed || !strings.Contains(a.Why, "reached by 2 of the 2 other eligible nodes (b, c)") {
		t.Errorf("a: %+v", a)
	}
	vs = reach.Decide(n("a*", "b*", "c*"), r("a!c", "b!c"))
	if c := vs[2]; c.ID != "c" || c.Eligible || !c.Changed {
		t.Errorf("c failed by a and b: %+v, want it to lose its eligibility", c)
	}
	vs = reach.Decide(n("a", "b", "c"), r("a>b", "b>a"))
	if !strings.Contains(vs[0].Why, "none is eligible yet") || !strings.Contains(vs[2].Why, "have not reported on it yet") {
		t.Errorf("starting: %+v", vs)
	}
}
