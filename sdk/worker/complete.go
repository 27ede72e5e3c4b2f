package worker

import (
	"context"
	"sync"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// completer coalesces the completions of a Worker's tasks into
// CompleteBatch calls, made one at a time from one goroutine. A completion
// that arrives while no call is out goes at once, alone; completions that
// arrive while a call is out queue, and go together in the next call when
// it returns (at most max per call). So batches grow with the load, and no
// completion waits for a timer: at most for the one call ahead of it.
//
// Coalescing does not change what a completion means: each item is decided
// by the server as a Complete of its own, and its answer goes back to the
// task that asked. A retried call (the client retries unavailable) is safe,
// because the same lease completing again gets the same answer.
type completer struct {
	c    *client.Client
	max  int
	reqs chan *completion
	done chan struct{}
	lg   *logger
	// carry, when set (before run), makes each call carry the worker's
	// next lease.
	carry *carrier
}

// carrier is what a completer needs to carry the worker's next lease in
// its calls (client.CompleteBatch with a Lease), for the slots that are free and
// those of the tasks finishing (slots.takeAhead). The lease does not wait
// for tasks: the lease loop long-polls when a carried lease comes back
// short.
type carrier struct {
	slots *slots
	next  client.LeaseRequest // MaxTasks is set per call
	// live is Run's ctx: once it ends, calls carry no lease.
	live context.Context
	// refused is set when the server refused a carried lease (the lease
	// loop meets the same refusal and stops the worker); calls carry none
	// after it.
	refused bool
}

// completion is one task's request and the channel for its answer.
type completion struct {
	item client.CompleteRequest
	err  chan error // buffered: the answer never blocks the completer
}

// newCompleter returns a completer for up to max completions per call and
// room for queue waiting ones (one per task slot, so a send never waits
// for room). With max 1 it makes plain Complete calls and runs no
// goroutine.
func newCompleter(c *client.Client, max, queue int, lg *logger) *completer {
	return &completer{c: c, max: max, reqs: make(chan *completion, queue), done: make(chan struct{}), lg: lg}
}

// complete completes item and returns its answer, as client.Complete would.
// ctx bounds the wait, not the call it is coalesced into.
func (k *completer) complete(ctx context.Context, item client.CompleteRequest) error {
	if k.max == 1 {
		return k.c.Complete(ctx, item)
	}
	cm := &completion{item: item, err: make(chan error, 1)}
	select {
	case k.reqs <- cm:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-cm.err:
		return err
	case <-ctx.Done():
		// The completion may still land; the lease then simply ends.
		return context.Cause(ctx)
	}
}

// run sends the queued completions until stop; each call is bounded by
// callTimeout under ctx. Start it before the first complete.
func (k *completer) run(ctx context.Context) {
	defer close(k.done)
	if k.max == 1 {
		return
	}
	batch := make([]*completion, 0, k.max)
	single := false // the server has no CompleteBatch: one Complete per task
	for {
		cm, ok := <-k.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], cm)
	more:
		for len(batch) < k.max {
			select {
			case cm, ok := <-k.reqs:
				if !ok {
					break more
				}
				batch = append(batch, cm)
			default:
				break more
			}
		}
		single = k.send(ctx, batch, single)
	}
}

// stop waits for the completions already queued to be answered, then ends
// run. No complete may be called after it.
func (k *completer) stop() {
	close(k.reqs)
	<-k.done
}

// send completes batch in one CompleteBatch call (or, if single, one
// Complete call per item, all at once) and answers each item. It returns
// whether the server lacks CompleteBatch.
func (k *completer) send(ctx context.Context, batch []*completion, single bool) bool {
	if !single {
		items := make([]client.CompleteRequest, len(batch))
		for i, cm := range batch {
			items[i] = cm.item
		}
		errs, err := k.completeBatch(ctx, items)
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			for i, cm := range batch {
				if err != nil {
					cm.err <- err
				} else {
					cm.err <- errs[i]
				}
			}
			return false
		}
		k.lg.Warn("the server does not implement CompleteBatch (an older version?): completing one task per call", "err", err)
	}
	var wg sync.WaitGroup
	for _, cm := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			cm.err <- k.c.Complete(cctx, cm.item)
		}()
	}
	wg.Wait()
	return true
}

// completeBatch completes items in one call, carrying the worker's next
// lease when it may (carrier). The tasks leased start, or wait for the
// slots of finishing tasks (slots.settle), before the items are answered.
// A call that fails with its lease (refused before anything was applied,
// or failed after the items were) is made again without it: the same
// lease completing again gets the same answer.
func (k *completer) completeBatch(ctx context.Context, items []client.CompleteRequest) ([]error, error) {
	cr := k.carry
	if cr == nil || cr.refused || cr.live.Err() != nil {
		return k.completeOnly(ctx, items)
	}
	n := cr.slots.takeAhead()
	if n == 0 {
		return k.completeOnly(ctx, items)
	}
	next := cr.next
	next.MaxTasks = n
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	res, err := k.c.CompleteBatch(cctx, client.CompleteBatchRequest{Items: items, Lease: &next})
	cancel()
	errs, leased := res.Errors, res.Leased
	if len(leased) > n {
		k.lg.Error("the server leased more tasks than asked for; the extra leases will expire", "asked", n, "got", len(leased))
		leased = leased[:n]
	}
	tasks := make([]*client.LeasedTask, len(leased))
	for i := range leased {
		tasks[i] = &leased[i]
	}
	cr.slots.settle(tasks)
	if err == nil || connect.CodeOf(err) == connect.CodeUnimplemented {
		return errs, err
	}
	if rejected(err) {
		cr.refused = true
		k.lg.Warn("the server refused the lease a completion call carried; completion calls carry no lease from now on", "err", err)
	}
	return k.completeOnly(ctx, items)
}

// completeOnly completes items in one CompleteBatch call.
func (k *completer) completeOnly(ctx context.Context, items []client.CompleteRequest) ([]error, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res, err := k.c.CompleteBatch(cctx, client.CompleteBatchRequest{Items: items})
	return res.Errors, err
}
