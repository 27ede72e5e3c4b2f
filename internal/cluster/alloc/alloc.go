package alloc

import (
	"cmp"
	"slices"

	"github.com/tenurehq/tenure/internal/cluster"
)

type queueKey struct{ namespace, queue string }

func queueOf(k cluster.PartitionKey) queueKey { return queueKey{k.Namespace, k.Queue} }

// CalculateAllocation returns the owner of every partition in partitions
// (duplicates count once), each an element of activeNodes (empty ids and
// duplicates ignored), given the current owners (entries for other
// partitions, or naming nodes not active, are ignored). With no active
// node it returns an empty map. See the package documentation for what it
// promises.
func CalculateAllocation(current map[cluster.PartitionKey]string, partitions []cluster.PartitionKey, activeNodes []string) map[cluster.PartitionKey]string {
	nodes := slices.Clone(activeNodes)
	nodes = slices.DeleteFunc(nodes, func(n string) bool { return n == "" })
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	parts := slices.Clone(partitions)
	slices.SortFunc(parts, cluster.PartitionKey.Compare)
	parts = slices.Compact(parts)

	out := make(map[cluster.PartitionKey]string, len(parts))
	if len(nodes) == 0 {
		return out
	}

	// What each active node keeps for now; the rest is unowned.
	kept := make(map[string][]cluster.PartitionKey, len(nodes))
	var moving []cluster.PartitionKey
	for _, p := range parts {
		owner, ok := current[p]
		if _, active := slices.BinarySearch(nodes, owner); ok && active {
			kept[owner] = append(kept[owner], p)
			continue
		}
		moving = append(moving, p)
	}

	// Shares: q each, and q+1 for r nodes, those keeping the most (ties by
	// id). Giving the extra one to the largest holders maximises what stays.
	q, r := len(parts)/len(nodes), len(parts)%len(nodes)
	byKept := slices.Clone(nodes)
	slices.SortStableFunc(byKept, func(a, b string) int { return cmp.Compare(len(kept[b]), len(kept[a])) })
	share := make(map[string]int, len(nodes))
	for i, n := range byKept {
		share[n] = q
		if i < r {
			share[n] = q + 1
		}
	}

	// Per-node, per-queue counts, to shed and to place with spread in mind.
	perQueue := make(map[string]map[queueKey]int, len(nodes))
	for _, n := range nodes {
		m := make(map[queueKey]int)
		for _, p := range kept[n] {
			m[queueOf(p)]++
		}
		perQueue[n] = m
	}

	// Nodes above their share shed partitions of the queue they hold the
	// most of (the highest-numbered partition first), so what stays is as
	// spread as possible.
	for _, n := range nodes {
		ps := kept[n]
		for len(ps) > share[n] {
			i := shedIndex(ps, perQueue[n])
			p := ps[i]
			perQueue[n][queueOf(p)]--
			moving = append(moving, p)
			ps = slices.Delete(ps, i, i+1)
		}
		kept[n] = ps
	}
	for n, ps := range kept {
		for _, p := range ps {
			out[p] = n
		}
	}

	// Place what moves: each on the node with room that holds the fewest of
	// its queue, then the fewest in all, then by id.
	slices.SortFunc(moving, cluster.PartitionKey.Compare)
	load := make(map[string]int, len(nodes))
	for _, n := range nodes {
		load[n] = len(kept[n])
	}
	for _, p := range moving {
		qk := queueOf(p)
		best := ""
		for _, n := range nodes {
			if load[n] >= share[n] {
				continue
			}
			if best == "" || perQueue[n][qk] < perQueue[best][qk] ||
				perQueue[n][qk] == perQueue[best][qk] && load[n] < load[best] {
				best = n
			}
		}
		if best == "" {
			panic("alloc: no node has room; the shares do not add up to the partitions")
		}
		out[p] = best
		load[best]++
		perQueue[best][qk]++
	}
	return out
}

// shedIndex picks the partition of ps to give up: one of the queue with the
// most partitions on the node, the last (highest key) of them.
func shedIndex(ps []cluster.PartitionKey, counts map[queueKey]int) int {
	best := -1
	for i, p := range ps {
		if best < 0 || counts[queueOf(p)] >= counts[queueOf(ps[best])] {
			best = i
		}
	}
	return best
}
