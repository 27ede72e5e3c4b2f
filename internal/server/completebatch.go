package server

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// completed is the answer for some items of a CompleteBatch: those that
// failed (Index: in the whole batch), and the write to wait for of a part
// served here whose wait is the caller's.
type completed struct {
	failed  []*tenurev1.CompleteResult
	durable coordinator.Durable
}

// completeBatch completes each item in its task's partition, one call per
// partition (one call per node for another node's partitions:
// fanout.Batch). Every item is answered on its own; a part whose call
// fails as a whole answers that error for each of its items. The answer
// names the items that failed, in item order.
//
// With later nil, the answers are durable when it returns. Otherwise the
// writes of this node's partitions are added to later, and the caller
// waits for them (durables.wait) before it answers: a worker's
// CompleteBatch that also leases writes its lease first, so that the two
// share one wait.
func (s *Server) completeBatch(ctx context.Context, msg *tenurev1.CompleteBatchRequest, later *durables) (*tenurev1.CompleteBatchResponse, error) {
	in := msg.GetItems()
	if err := s.opts.Limits.CheckCompleteBatch(len(in)); err != nil {
		return nil, err
	}
	out := &tenurev1.CompleteBatchResponse{}
	// Items whose task id names no partition are answered at once; the
	// rest go to their partitions.
	ps, _ := fanout.Group(len(in), func(i int) (route.Partition, error) {
		p, err := s.r.Task(ctx, in[i].GetTaskId())
		if err != nil {
			out.Failed = append(out.Failed, s.itemFailed(in, i, err))
			return nil, nil
		}
		return p, nil
	})
	answers := fanout.Batch[completed]{
		Local: func(c *coordinator.Coordinator, items []int) (completed, error) {
			return s.completeHere(ctx, c, in, items, later != nil)
		},
		Forward: func(peer route.Peer, items []int) (completed, error) {
			return completeThere(ctx, peer, in, items)
		},
		// A completion sent again is applied at most once: its lease ends
		// with the first.
		Resend: func([]int) bool { return true },
	}.Run(ctx, ps)
	for _, a := range answers {
		if a.Err != nil {
			for _, i := range a.Items {
				out.Failed = append(out.Failed, s.itemFailed(in, i, a.Err))
			}
			continue
		}
		out.Failed = append(out.Failed, a.Value.failed...)
		if later != nil {
			later.add(a.Value.durable)
		}
	}
	slices.SortFunc(out.Failed, func(a, b *tenurev1.CompleteResult) int { return cmp.Compare(a.GetIndex(), b.GetIndex()) })
	return out, nil
}

// itemFailed is the answer for item i of in, which failed with err.
func (s *Server) itemFailed(in []*tenurev1.CompleteRequest, i int, err error) *tenurev1.CompleteResult {
	ce := s.apiError(err)
	return &tenurev1.CompleteResult{TaskId: in[i].GetTaskId(), Index: uint32(i), Code: ce.Code().String(), Message: ce.Message(), Detail: detailOf(ce)}
}

// completeHere completes the items of in at items on a partition served
// here; unless deferred, it waits until they are durable. An item outside
// the caller's scope (or not found) is refused on its own.
func (s *Server) completeHere(ctx context.Context, c *coordinator.Coordinator, in []*tenurev1.CompleteRequest, items []int, deferred bool) (completed, error) {
	var out completed
	batch := make([]coordinator.CompleteItem, 0, len(items))
	at := make([]int, 0, len(items)) // the index in `in` of each of batch
	for _, i := range items {
		err := s.checkTask(ctx, c, in[i].GetTaskId())
		if errors.Is(err, coordinator.ErrUnavailable) {
			return completed{}, err
		}
		if err != nil {
			out.failed = append(out.failed, s.itemFailed(in, i, err))
			continue
		}
		item := coordinator.CompleteItem{TaskID: in[i].GetTaskId(), LeaseID: in[i].GetLeaseId(), Result: in[i].GetResult()}
		if item.Spawn, err = s.spawnRequests(ctx, c, item.TaskID, in[i].GetSpawn()); err != nil {
			out.failed = append(out.failed, s.itemFailed(in, i, err))
			continue
		}
		batch = append(batch, item)
		at = append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	errs, durable, err := c.CompleteBatchUnwaited(ctx, batch)
	if err == nil && !deferred {
		err = durable.Wait(ctx)
	}
	if err != nil {
		return completed{}, err
	}
	out.durable = durable
	for j, e := range errs {
		if e != nil {
			out.failed = append(out.failed, s.itemFailed(in, at[j], e))
		}
	}
	return out, nil
}

// completeThere completes the items of in at items through the node that
// serves their partitions, and checks that its answer fits them.
func completeThere(ctx context.Context, peer route.Peer, in []*tenurev1.CompleteRequest, items []int) (completed, error) {
	resp, err := peer.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: fanout.Pick(in, items)}))
	if err != nil {
		return completed{}, err
	}
	failed := resp.Msg.GetFailed()
	for k, r := range failed {
		j := int(r.GetIndex())
		if j >= len(items) || r.GetTaskId() != in[items[j]].GetTaskId() || r.GetCode() == "" {
			return completed{}, badAnswer(peer, "CompleteBatch: failure %d (task %q, item %d, code %q) is not one of the %d items'", k, r.GetTaskId(), j, r.GetCode(), len(items))
		}
		r.Index = uint32(items[j]) // its index in the whole batch
	}
	return completed{failed: failed}, nil
}

// durables are the writes of one request that its handler waits for once,
// after the rest of its work.
type durables struct{ ds []coordinator.Durable }

func (d *durables) add(x coordinator.Durable) { d.ds = append(d.ds, x) }

// wait waits until every write added is durable.
func (d *durables) wait(ctx context.Context) error {
	for _, x := range d.ds {
		if err := x.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}
