package server

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// submitRequests keeps the converted requests of a SubmitBatch from call
// to call: about 200 bytes per task that each batch allocated anew. The
// coordinator keeps nothing of them (its records copy what they need).
var submitRequests = sync.Pool{New: func() any { return new([]coordinator.SubmitRequest) }}

// submitted is the answer for some tasks of a SubmitBatch: the id of each
// one's task and whether it existed, in the order of the tasks.
type submitted struct {
	ids  []string
	dups []bool
}

// submitBatch places each task in its partition and submits each
// partition's tasks in one call (those of another node's partitions in
// one call to that node: fanout.Batch). A batch that spans partitions is
// checked as a whole first, so that a bad item creates nothing; each part
// is then atomic on its own. If a part fails the call fails, though other
// parts may have been created: a retry with the same request ids (the SDK
// always sets them) creates each task once.
func (s *Server) submitBatch(ctx context.Context, header interface{ Get(string) string }, msg *tenurev1.SubmitBatchRequest) (*tenurev1.SubmitBatchResponse, error) {
	in := msg.GetRequests()
	l := s.opts.Limits
	if len(in) == 0 || len(in) > cmp.Or(l.MaxBatch, coordinator.DefaultLimits.MaxBatch) {
		return nil, l.CheckBatch(make([]coordinator.SubmitRequest, len(in)), s.opts.Clock.Now())
	}
	held := submitRequests.Get().(*[]coordinator.SubmitRequest)
	reqs := *held
	if cap(reqs) < len(in) {
		reqs = make([]coordinator.SubmitRequest, len(in))
	}
	reqs = reqs[:len(in)]
	defer func() {
		// A part still running after the caller's deadline may read the
		// requests: they are then left to the garbage collector.
		if ctx.Err() == nil {
			clear(reqs) // let go of the payloads
			*held = reqs[:0]
			submitRequests.Put(held)
		}
	}()
	for i, r := range in {
		var err error
		if reqs[i], err = submitRequest(r); err != nil {
			return nil, coordinator.ItemError(err, i)
		}
	}
	workflow := msg.GetWorkflowId()
	if _, fw := route.Forwarded(ctx); fw && header.Get(route.PlacedHeader) != "" {
		return s.submitForwardedPlaced(ctx, header, workflow, reqs)
	}
	ps, err := fanout.Group(len(reqs), func(i int) (route.Partition, error) {
		r := &reqs[i]
		at := taskPlacement(r)
		if at == "" && workflow != "" {
			// Placed by the request id its coordinator gives it, so that
			// the batch sent again goes to the same partitions.
			at = keyPlacement(coordinator.WorkflowRequestID(workflow, i))
		}
		p, err := s.r.Place(ctx, cmp.Or(r.Namespace, coordinator.DefaultNamespace), r.Queue, at)
		return p, coordinator.ItemError(err, i)
	})
	if err != nil {
		return nil, err
	}
	if len(ps) > 1 && graphed(workflow, reqs) {
		return s.submitPlaced(ctx, workflow, reqs, in, ps)
	}
	for _, part := range ps {
		for _, i := range part.Items {
			if len(reqs[i].DependsOn) > 0 {
				if reqs[i].Remote, err = s.remoteDeps(ctx, part.P, reqs[i].Namespace, fmt.Sprintf("requests[%d].depends_on", i), reqs[i].DependsOn, false); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(ps) > 1 {
		if err := l.CheckBatch(reqs, s.opts.Clock.Now()); err != nil {
			return nil, err
		}
	}
	return mergeSubmitted(len(reqs), fanout.Batch[submitted]{
		Local: func(c *coordinator.Coordinator, items []int) (submitted, error) {
			return submitHere(ctx, c, workflow, fanout.Pick(reqs, items))
		},
		Forward: func(peer route.Peer, items []int) (submitted, error) {
			return submitThere(ctx, peer, workflow, fanout.Pick(in, items))
		},
		// A group sent again creates each task once only if every task has
		// a request id: its partition then answers a task the refused call
		// created as a duplicate.
		Resend: func(items []int) bool {
			for _, i := range items {
				if reqs[i].RequestID == "" {
					return false
				}
			}
			return true
		},
	}.Run(ctx, ps))
}

// graphed reports whether a batch is written in one record: a workflow,
// or a batch whose tasks depend on each other or on other tasks.
func graphed(workflow string, reqs []coordinator.SubmitRequest) bool {
	graph := workflow != ""
	for i := range reqs {
		graph = graph || len(reqs[i].DependsOn) > 0
	}
	return graph
}

// submitHere submits reqs to a partition served here, as workflow
// workflow ("" for none).
func submitHere(ctx context.Context, c *coordinator.Coordinator, workflow string, reqs []coordinator.SubmitRequest) (submitted, error) {
	var res []coordinator.SubmitID
	var err error
	if workflow != "" {
		res, err = c.SubmitWorkflow(ctx, workflow, reqs)
	} else {
		res, err = c.SubmitBatchIDs(ctx, reqs)
	}
	if err != nil {
		return submitted{}, err
	}
	out := submitted{ids: make([]string, len(res)), dups: make([]bool, len(res))}
	for j, r := range res {
		out.ids[j], out.dups[j] = r.ID, r.Duplicate
	}
	return out, nil
}

// submitThere submits reqs through the node that serves their partitions.
func submitThere(ctx context.Context, peer route.Peer, workflow string, reqs []*tenurev1.SubmitRequest) (submitted, error) {
	return submittedBy(ctx, peer, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs, WorkflowId: workflow}))
}

// submittedBy sends a SubmitBatch to peer and checks its answer.
func submittedBy(ctx context.Context, peer route.Peer, req *connect.Request[tenurev1.SubmitBatchRequest]) (submitted, error) {
	n := len(req.Msg.GetRequests())
	resp, err := peer.SubmitBatch(ctx, req)
	if err != nil {
		return submitted{}, err
	}
	ids, dups := resp.Msg.GetTaskIds(), resp.Msg.GetDuplicates()
	if len(ids) != n || len(dups) != n {
		return submitted{}, badAnswer(peer, "SubmitBatch: %d task ids and %d duplicate flags for %d tasks", len(ids), len(dups), n)
	}
	return submitted{ids: ids, dups: dups}, nil
}

// mergeSubmitted is the answer to a batch of n tasks from the answers of
// its parts, or the first part's error.
func mergeSubmitted(n int, as []fanout.Answer[submitted]) (*tenurev1.SubmitBatchResponse, error) {
	if len(as) == 1 && as[0].Err == nil {
		// One part, the whole batch in order: its answer is the batch's.
		return &tenurev1.SubmitBatchResponse{TaskIds: as[0].Value.ids, Duplicates: as[0].Value.dups}, nil
	}
	out := &tenurev1.SubmitBatchResponse{TaskIds: make([]string, n), Duplicates: make([]bool, n)}
	for _, a := range as {
		if a.Err != nil {
			return nil, a.Err
		}
		for j, i := range a.Items {
			out.TaskIds[i], out.Duplicates[i] = a.Value.ids[j], a.Value.dups[j]
		}
	}
	return out, nil
}
