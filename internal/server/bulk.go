package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The bulk task actions (RetryTasks, KillTasks, PurgeTasks): each acts on
// every partition its filter's namespace and queue cover, and the counts
// are added up.

// bulkCounts is what a bulk action's answer carries.
type bulkCounts struct{ changed, skipped uint64 }

// bulkAnswer is a bulk action's response message.
type bulkAnswer interface {
	GetChanged() uint64
	GetSkipped() uint64
}

// bulk runs a bulk action on every partition the filter's namespace and
// queue cover, and adds up what each changed. On another node a partition
// is acted on by the original request, for that partition alone.
func bulk[Req, Resp any](s *Server, ctx context.Context, req *connect.Request[Req], action coordinator.BulkAction,
	f *tenurev1.TaskFilter, reason, by string,
	forward func(route.Peer, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (bulkCounts, error) {
	br := coordinator.BulkRequest{Action: action, Actor: coordinator.Actor{By: by, Reason: reason},
		Filter: coordinator.BulkFilter{Namespace: f.GetNamespace(), Queue: f.GetQueue(), All: f.GetAll()}}
	st, ok := TaskState(f.GetState())
	if !ok {
		return bulkCounts{}, s.apiError(&coordinator.FieldError{Field: "filter.state", Problem: "unknown task state"})
	}
	br.Filter.State = st
	if f.GetCreatedBefore() != nil {
		t, err := timestamp("filter.created_before", f.GetCreatedBefore())
		if err != nil {
			return bulkCounts{}, s.apiError(err)
		}
		br.Filter.CreatedBefore = t
	}
	if err := s.opts.Limits.CheckBulk(br); err != nil {
		return bulkCounts{}, s.apiError(err)
	}
	scope, err := s.scope(ctx, req.Header(), br.Filter.Namespace, br.Filter.Queue)
	if err != nil {
		return bulkCounts{}, s.apiError(err)
	}
	rs := fanout.Each(ctx, fanout.Parallel, scope, false, func(_ int, c *coordinator.Coordinator) (bulkCounts, error) {
		res, err := c.Bulk(ctx, br)
		return bulkCounts{changed: uint64(res.Changed), skipped: uint64(res.Skipped)}, err
	}, func(i int, peer route.Peer) (bulkCounts, error) {
		resp, err := forward(peer, ctx, fanout.Request(req.Msg, scope[i]))
		if err != nil {
			return bulkCounts{}, err
		}
		a, ok := any(resp.Msg).(bulkAnswer)
		if !ok {
			return bulkCounts{}, badAnswer(peer, "%T carries no counts", resp.Msg)
		}
		return bulkCounts{changed: a.GetChanged(), skipped: a.GetSkipped()}, nil
	})
	if err := fanout.FirstErr(rs); err != nil {
		return bulkCounts{}, s.apiError(err)
	}
	var out bulkCounts
	for _, r := range rs {
		out.changed += r.Value.changed
		out.skipped += r.Value.skipped
	}
	return out, nil
}
