package fanout

import (
	"context"
	"strconv"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// Parallel is the most parts of one call that the API runs at once: a
// queue's partitions (8 by default), or the nodes a batch spans, run
// together; a call over every queue of a large cluster runs in waves.
const Parallel = 16

// Result is what one part of a call answered.
type Result[A any] struct {
	Value A
	Err   error
}

// Run calls fn(ctx, i) for i in 0..n-1, at most parallel at once, and
// returns what each answered, by i. One part runs in the caller's
// goroutine. If ctx ends before every part has answered, Run returns at
// once: each part not yet answered (or not yet started, which it then
// never is) answers ctx's error, and what it answers later is dropped.
func Run[A any](ctx context.Context, parallel, n int, fn func(ctx context.Context, i int) (A, error)) []Result[A] {
	out := make([]Result[A], n)
	if n == 1 {
		out[0].Value, out[0].Err = fn(ctx, 0)
		return out
	}
	type answer struct {
		i int
		r Result[A]
	}
	// Buffered for every part: one that answers after Run returned does
	// not block, and ends.
	answers := make(chan answer, n)
	next := 0
	start := func() {
		i := next
		next++
		go func() {
			v, err := fn(ctx, i)
			answers <- answer{i, Result[A]{v, err}}
		}()
	}
	for next < min(max(parallel, 1), n) {
		start()
	}
	answered := make([]bool, n)
	take := func(a answer) {
		out[a.i], answered[a.i] = a.r, true
		if next < n {
			start()
		}
	}
	for got := 0; got < n; got++ {
		select {
		case a := <-answers:
			take(a)
		case <-ctx.Done():
			for drained := false; !drained; {
				select {
				case a := <-answers:
					out[a.i], answered[a.i] = a.r, true
				default:
					drained = true
				}
			}
			for i := range out {
				if !answered[i] {
					out[i].Err = ctx.Err()
				}
			}
			return out
		}
	}
	return out
}

// FirstErr returns the first error of rs, in order; nil if none failed.
func FirstErr[A any](rs []Result[A]) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// Call runs a call on partition p: local on its coordinator when this node
// serves it, forward through the node that does otherwise (p.Do). read
// marks a call that changes nothing (see route.Partition).
func Call[A any](ctx context.Context, p route.Partition, read bool, local func(*coordinator.Coordinator) (A, error), forward func(route.Peer) (A, error)) (A, error) {
	var out A
	err := p.Do(ctx, read, func(c *coordinator.Coordinator) error {
		var err error
		out, err = local(c)
		return err
	}, func(peer route.Peer) error {
		var err error
		out, err = forward(peer)
		return err
	})
	return out, err
}

// Each runs a call on every partition of scope, as Call does, at most
// parallel at once, and returns each partition's answer by its index in
// scope. forward is given the index; it sends the request for that
// partition alone (Request).
func Each[A any](ctx context.Context, parallel int, scope []route.Partition, read bool,
	local func(i int, c *coordinator.Coordinator) (A, error), forward func(i int, peer route.Peer) (A, error)) []Result[A] {
	return Run(ctx, parallel, len(scope), func(ctx context.Context, i int) (A, error) {
		return Call(ctx, scope[i], read,
			func(c *coordinator.Coordinator) (A, error) { return local(i, c) },
			func(peer route.Peer) (A, error) { return forward(i, peer) })
	})
}

// Request is msg as the request of a call about partition p alone, which
// the node that serves p answers for p only (route.PartitionHeader).
func Request[Req any](msg *Req, p route.Partition) *connect.Request[Req] {
	req := connect.NewRequest(msg)
	req.Header().Set(route.PartitionHeader, strconv.FormatUint(p.ID(), 10))
	return req
}
