package fanout

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// Part is the items of a batch that one partition holds, by their index
// in the batch, ascending.
type Part struct {
	P     route.Partition
	Items []int
}

// Group groups the items 0..n-1 of a batch by partition: at returns the
// partition of item i, or none (nil, nil) to leave the item out. The
// parts come in the order of their first items; the first error of at
// ends the grouping.
func Group(n int, at func(i int) (route.Partition, error)) ([]Part, error) {
	ps := make([]route.Partition, n)
	for i := range n {
		var err error
		if ps[i], err = at(i); err != nil {
			return nil, err
		}
	}
	var out []Part
	for _, items := range groupBy(n, func(i int) (uint64, bool) {
		return idOf(ps[i]), ps[i] != nil
	}) {
		out = append(out, Part{P: ps[items[0]], Items: items})
	}
	return out, nil
}

func idOf(p route.Partition) uint64 {
	if p == nil {
		return 0
	}
	return p.ID()
}

// groupBy returns 0..n-1 grouped by key, each group in order and the
// groups in the order of their first members; i is left out where key is
// not ok.
func groupBy[K comparable](n int, key func(i int) (K, bool)) [][]int {
	var out [][]int
	at := make(map[K]int) // key → its group in out
	for i := range n {
		k, ok := key(i)
		if !ok {
			continue
		}
		g, seen := at[k]
		if !seen {
			g = len(out)
			at[k] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// Answer is the answer for some items of a batch: Items, ascending, are
// their indexes in the batch.
type Answer[A any] struct {
	Items []int
	Value A
	Err   error
}

// Batch is a call over the items of a batch, split by partition.
type Batch[A any] struct {
	// Local answers items of one partition on its coordinator, here.
	Local func(c *coordinator.Coordinator, items []int) (A, error)
	// Forward sends items to peer in one call, and returns its answer
	// once checked to fit the items.
	Forward func(peer route.Peer, items []int) (A, error)
	// Resend reports whether items that another node refused as
	// unavailable may be sent again, part by part: that node may have
	// served some of them. Nil: never.
	Resend func(items []int) bool
	// Parallel is the most parts or nodes called at once (0: Parallel).
	Parallel int
}

// unit is what Run calls at once: one part, or every part that peer
// serves, in one call to it.
type unit struct {
	parts []Part
	peer  route.Peer // nil: one part, run where its partition is
	items []int      // with peer: the items of every part, ascending
}

// Run runs the parts of a batch: each part that this node serves (or
// whose owner it does not know) on its own, and the parts that another
// node serves in one call to that node. It returns the answers of these
// calls in the order of their first items; a call a node refused as
// unavailable, and that Resend allows to send again, answers part by part.
func (b Batch[A]) Run(ctx context.Context, parts []Part) []Answer[A] {
	us := units(ctx, parts)
	rs := Run(ctx, b.parallel(), len(us), func(ctx context.Context, k int) ([]Answer[A], error) {
		return b.unit(ctx, us[k]), nil
	})
	out := make([]Answer[A], 0, len(us))
	for k, r := range rs {
		if r.Err != nil { // the caller's deadline
			out = append(out, Answer[A]{Items: us[k].items, Err: r.Err})
			continue
		}
		out = append(out, r.Value...)
	}
	return out
}

func (b Batch[A]) parallel() int {
	if b.Parallel > 0 {
		return b.Parallel
	}
	return Parallel
}

// units splits parts into the calls Run makes.
func units(ctx context.Context, parts []Part) []unit {
	peers := make([]route.Peer, len(parts))
	for k, pt := range parts {
		peers[k] = pt.P.Peer(ctx)
	}
	var us []unit
	type key struct {
		addr  string // the peer's, or "" for a part alone
		alone int    // its index in parts; -1 with a peer
	}
	for _, ks := range groupBy(len(parts), func(k int) (key, bool) {
		if peers[k] == nil {
			return key{alone: k}, true
		}
		return key{addr: peers[k].Addr(), alone: -1}, true
	}) {
		u := unit{peer: peers[ks[0]]}
		for _, k := range ks {
			u.parts = append(u.parts, parts[k])
			u.items = append(u.items, parts[k].Items...)
		}
		if len(ks) > 1 {
			slices.Sort(u.items) // the items in the batch's order
		}
		us = append(us, u)
	}
	return us
}

// unit runs one unit of Run.
func (b Batch[A]) unit(ctx context.Context, u unit) []Answer[A] {
	if u.peer == nil || len(u.parts) == 1 {
		return []Answer[A]{b.part(ctx, u.parts[0])}
	}
	v, err := b.Forward(u.peer, u.items)
	if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || b.Resend == nil || !b.Resend(u.items) {
		return []Answer[A]{{Items: u.items, Value: v, Err: err}}
	}
	rs := Run(ctx, b.parallel(), len(u.parts), func(ctx context.Context, j int) (Answer[A], error) {
		return b.part(ctx, u.parts[j]), nil
	})
	out := make([]Answer[A], len(rs))
	for j, r := range rs {
		out[j] = r.Value
		if r.Err != nil { // the caller's deadline
			out[j] = Answer[A]{Items: u.parts[j].Items, Err: r.Err}
		}
	}
	return out
}

// part runs one part where its partition is served.
func (b Batch[A]) part(ctx context.Context, pt Part) Answer[A] {
	v, err := Call(ctx, pt.P, false,
		func(c *coordinator.Coordinator) (A, error) { return b.Local(c, pt.Items) },
		func(peer route.Peer) (A, error) { return b.Forward(peer, pt.Items) })
	return Answer[A]{Items: pt.Items, Value: v, Err: err}
}

// Pick returns the items of all at idx, or all itself when idx is every
// index of all in order.
func Pick[T any](all []T, idx []int) []T {
	if len(idx) == len(all) && ascending(idx) {
		return all
	}
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = all[i]
	}
	return out
}

// ascending reports whether idx grows strictly: idx of distinct items
// then is all of a batch in order when its length is the batch's.
func ascending(idx []int) bool {
	for j := 1; j < len(idx); j++ {
		if idx[j] <= idx[j-1] {
			return false
		}
	}
	return true
}
