package alloc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/internal/cluster"
)

func keys(queue string, n int) []cluster.PartitionKey {
	out := make([]cluster.PartitionKey, n)
	for i := range out {
		out[i] = cluster.PartitionKey{Namespace: "ns", Queue: queue, Partition: uint32(i)}
	}
	return out
}

func counts(a map[cluster.PartitionKey]string, nodes []string) map[string]int {
	c := make(map[string]int, len(nodes))
	for _, n := range nodes {
		c[n] = 0
	}
	for _, n := range a {
		c[n]++
	}
	return c
}

func moves(before, after map[cluster.PartitionKey]string) int {
	n := 0
	for p, o := range after {
		if before[p] != o {
			n++
		}
	}
	return n
}

// minMoves is the fewest partitions any balanced allocation must assign a
// new owner (unowned partitions included), computed by trying every choice
// of the nodes that get the larger share: independent of the algorithm.
func minMoves(current map[cluster.PartitionKey]string, parts []cluster.PartitionKey, nodes []string) int {
	kept := make(map[string]int)
	active := make(map[string]bool)
	for _, n := range nodes {
		active[n] = true
	}
	for _, p := range parts {
		if o, ok := current[p]; ok && active[o] {
			kept[o]++
		}
	}
	q, r := len(parts)/len(nodes), len(parts)%len(nodes)
	best := -1
	var choose func(i, left, sum int)
	choose = func(i, left, sum int) {
		if i == len(nodes) {
			if left == 0 && sum > best {
				best = sum
			}
			return
		}
		c := kept[nodes[i]]
		if left > 0 {
			choose(i+1, left-1, sum+min(c, q+1))
		}
		choose(i+1, left, sum+min(c, q))
	}
	choose(0, r, 0)
	return len(parts) - best
}

// check asserts totality, balance and minimal movement.
func check(t *testing.T, step string, current, got map[cluster.PartitionKey]string, parts []cluster.PartitionKey, nodes []string) {
	t.Helper()
	if len(got) != len(parts) {
		t.Fatalf("%s: %d partitions assigned, want %d", step, len(got), len(parts))
	}
	for _, p := range parts {
		if o, ok := got[p]; !ok || !slices.Contains(nodes, o) {
			t.Fatalf("%s: partition %v has owner %q, not an active node of %v", step, p, o, nodes)
		}
	}
	c := counts(got, nodes)
	lo, hi := len(parts), 0
	for _, v := range c {
		lo, hi = min(lo, v), max(hi, v)
	}
	if hi-lo > 1 {
		t.Fatalf("%s: unbalanced: %v", step, c)
	}
	if m, want := moves(current, got), minMoves(current, parts, nodes); m != want {
		t.Fatalf("%s: moved %d partitions, the fewest possible is %d (before %v, after %v)", step, m, want, counts(current, nodes), c)
	}
}

func TestExamples(t *testing.T) {
	p8 := keys("q", 8)
	three := CalculateAllocation(nil, p8, []string{"a", "b", "c"})
	if c := counts(three, []string{"a", "b", "c"}); c["a"] != 3 || c["b"] != 3 || c["c"] != 2 {
		t.Fatalf("fresh: %v", c)
	}
	// A join moves exactly the two partitions the new node needs.
	four := CalculateAllocation(three, p8, []string{"a", "b", "c", "d"})
	if m := moves(three, four); m != 2 {
		t.Fatalf("join moved %d, want 2", m)
	}
	if c := counts(four, []string{"a", "b", "c", "d"}); c["d"] != 2 {
		t.Fatalf("join: %v", c)
	}
	// A death moves only the dead node's partitions.
	after := CalculateAllocation(four, p8, []string{"a", "b", "d"})
	for p, o := range four {
		if o != "c" && after[p] != o {
			t.Fatalf("death of c moved %v from %s to %s", p, o, after[p])
		}
	}
	// Nothing changes when nothing changed.
	if again := CalculateAllocation(after, p8, []string{"d", "b", "a"}); !maps.Equal(again, after) {
		t.Fatalf("stable input changed the allocation: %v -> %v", after, again)
	}
	// No active node: nothing assigned.
	if got := CalculateAllocation(after, p8, nil); len(got) != 0 {
		t.Fatalf("no nodes: %v", got)
	}
	// More nodes than partitions: one each at most.
	many := CalculateAllocation(nil, keys("q", 2), []string{"a", "b", "c"})
	if c := counts(many, []string{"a", "b", "c"}); c["a"] > 1 || c["b"] > 1 || c["c"] > 1 {
		t.Fatalf("2 over 3: %v", c)
	}
}

// Same inputs in any order, duplicates included: same output.
func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := append(keys("a", 8), keys("b", 8)...)
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	base := CalculateAllocation(nil, parts, nodes)
	cur := CalculateAllocation(base, parts, nodes[:3])
	want := CalculateAllocation(cur, parts, nodes)
	for range 50 {
		p := slices.Clone(parts)
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		n := append(slices.Clone(nodes), nodes[rng.IntN(len(nodes))], "")
		rng.Shuffle(len(n), func(i, j int) { n[i], n[j] = n[j], n[i] })
		if got := CalculateAllocation(cur, append(p, p[0]), n); !maps.Equal(got, want) {
			t.Fatalf("order changed the result")
		}
	}
}

// Random sequences of joins, leaves, deaths and new queues: after every
// step the allocation is total, balanced and moves the fewest partitions
// possible.
func TestPropertyRandomMembership(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			var parts []cluster.PartitionKey
			for q := range 1 + rng.IntN(3) {
				parts = append(parts, keys(fmt.Sprint("q", q), 1+rng.IntN(16))...)
			}
			next := 0
			newNode := func() string { next++; return fmt.Sprint("node-", next) }
			nodes := []string{newNode()}
			current := map[cluster.PartitionKey]string{}
			for step := range 40 {
				var what string
				switch op := rng.IntN(10); {
				case op < 4 && len(nodes) < 10:
					nodes = append(nodes, newNode())
					what = "join " + nodes[len(nodes)-1]
				case op < 8 && len(nodes) > 1:
					i := rng.IntN(len(nodes))
					what = "leave/death " + nodes[i]
					nodes = slices.Delete(nodes, i, i+1)
				case op == 8:
					q := fmt.Sprint("q", 10+step)
					parts = append(parts, keys(q, 1+rng.IntN(8))...)
					what = "new queue " + q
				default:
					what = "no change"
				}
				got := CalculateAllocation(current, parts, nodes)
				check(t, fmt.Sprintf("seed %d step %d (%s)", seed, step, what), current, got, parts, nodes)
				current = got
			}
		})
	}
}

// A fresh allocation spreads each queue's partitions over the nodes
// evenly as well.
func TestFreshAllocationSpreadsQueues(t *testing.T) {
	for n := 1; n <= 10; n++ {
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = fmt.Sprint("node-", i)
		}
		parts := append(append(keys("a", 8), keys("b", 8)...), keys("c", 8)...)
		got := CalculateAllocation(nil, parts, nodes)
		check(t, fmt.Sprintf("%d nodes", n), nil, got, parts, nodes)
		for _, q := range []string{"a", "b", "c"} {
			per := make(map[string]int)
			for _, nd := range nodes {
				per[nd] = 0
			}
			for p, o := range got {
				if p.Queue == q {
					per[o]++
				}
			}
			lo, hi := 8, 0
			for _, v := range per {
				lo, hi = min(lo, v), max(hi, v)
			}
			if hi-lo > 1 {
				t.Errorf("%d nodes: queue %s spread %v", n, q, per)
			}
		}
	}
}
