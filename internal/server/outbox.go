package server

import (
	"cmp"
	"context"
	"slices"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// outboxService is the relay's side of the transactional outbox
// (docs/design/outbox.md). A row's hold and its task are in one
// partition: both are placed by the row's namespace, queue and request
// id, as a submit is.
type outboxService struct{ s *Server }

// Outbox is the server's OutboxService for a relay that runs in the
// server's process (tenure server --outbox-postgres): the API's calls
// without a round trip over the network, or the authentication of one (the
// relay is the operator's). Its errors are the API's.
func (s *Server) Outbox() tenurev1connect.OutboxServiceClient { return outboxService{s} }

// Relay submits rows of an outbox, each answered alone. A row whose
// request does not convert is refused here; the others go to their
// partitions, the parts that another node serves in one call to it.
func (o outboxService) Relay(ctx context.Context, req *connect.Request[tenurev1.RelayRequest]) (*connect.Response[tenurev1.RelayResponse], error) {
	s := o.s
	outbox, in := req.Msg.GetOutbox(), req.Msg.GetRows()
	if outbox == "" {
		return nil, s.apiError(&coordinator.FieldError{Field: "outbox", Problem: "required: the outbox's name, as its relay gives it"})
	}
	out := &tenurev1.RelayResponse{Results: make([]*tenurev1.RelayResult, len(in))}
	items := make([]coordinator.RelayItem, len(in))
	var ok []int // the rows that convert
	for i, r := range in {
		sr, err := submitRequest(r.GetRequest())
		if err != nil {
			out.Results[i] = o.refused(err)
			continue
		}
		items[i] = coordinator.RelayItem{Row: r.GetRow(), Req: sr}
		ok = append(ok, i)
	}
	if len(ok) == 0 {
		return connect.NewResponse(out), nil
	}
	parts, err := fanout.Group(len(ok), func(k int) (route.Partition, error) {
		r := &items[ok[k]].Req
		return s.r.Place(ctx, cmp.Or(r.Namespace, coordinator.DefaultNamespace), r.Queue, r.RequestID)
	})
	if err != nil {
		return nil, s.apiError(err)
	}
	answers := fanout.Batch[[]*tenurev1.RelayResult]{
		Local: func(c *coordinator.Coordinator, ks []int) ([]*tenurev1.RelayResult, error) {
			its := make([]coordinator.RelayItem, len(ks))
			for j, k := range ks {
				its[j] = items[ok[k]]
			}
			res, err := c.Relay(ctx, outbox, its)
			if err != nil {
				return nil, err
			}
			rs := make([]*tenurev1.RelayResult, len(res))
			for j, r := range res {
				rs[j] = &tenurev1.RelayResult{TaskId: r.ID, Duplicate: r.Duplicate}
				if r.Err != nil {
					rs[j] = o.refused(r.Err)
				}
			}
			return rs, nil
		},
		Forward: func(peer route.Peer, ks []int) ([]*tenurev1.RelayResult, error) {
			msg := &tenurev1.RelayRequest{Outbox: outbox, Rows: make([]*tenurev1.OutboxRow, len(ks))}
			for j, k := range ks {
				msg.Rows[j] = in[ok[k]]
			}
			resp, err := peer.Relay(ctx, connect.NewRequest(msg))
			if err != nil {
				return nil, err
			}
			if n := len(resp.Msg.GetResults()); n != len(ks) {
				return nil, badAnswer(peer, "Relay: %d results for %d rows", n, len(ks))
			}
			return resp.Msg.GetResults(), nil
		},
		// Every row has a request id: a part sent again is answered with
		// duplicates for what the refused call created, and holds again.
		Resend: func([]int) bool { return true },
	}.Run(ctx, parts)
	for _, a := range answers {
		if a.Err != nil {
			return nil, s.apiError(a.Err)
		}
		for j, k := range a.Items {
			out.Results[ok[k]] = a.Value[j]
		}
	}
	return connect.NewResponse(out), nil
}

// refused is the answer for a row refused with err.
func (o outboxService) refused(err error) *tenurev1.RelayResult {
	e := o.s.apiError(err)
	return &tenurev1.RelayResult{Error: detailOf(e), Message: e.Message()}
}

// Release ends the holds of rows, each in the partition its namespace,
// queue and request id place it in.
func (o outboxService) Release(ctx context.Context, req *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
	s := o.s
	outbox, in := req.Msg.GetOutbox(), req.Msg.GetRows()
	if outbox == "" {
		return nil, s.apiError(&coordinator.FieldError{Field: "outbox", Problem: "required: the outbox's name, as its relay gives it"})
	}
	if len(in) > state.MaxOutboxRowsPerRecord {
		return nil, s.apiError(&coordinator.FieldError{Field: "rows", Problem: "over the limit of 10000 rows per call; split it"})
	}
	for i, r := range in {
		if r.GetOutbox() != "" && r.GetOutbox() != outbox {
			return nil, s.apiError(coordinator.ItemError(&coordinator.FieldError{Field: "outbox", Problem: "names another outbox than the request's: leave it unset"}, i))
		}
	}
	parts, err := fanout.Group(len(in), func(i int) (route.Partition, error) {
		r := in[i]
		return s.r.Place(ctx, cmp.Or(r.GetNamespace(), coordinator.DefaultNamespace), r.GetQueue(), r.GetRequestId())
	})
	if err != nil {
		return nil, s.apiError(err)
	}
	answers := fanout.Batch[struct{}]{
		Local: func(c *coordinator.Coordinator, items []int) (struct{}, error) {
			rows := make([]int64, len(items))
			for j, i := range items {
				rows[j] = in[i].GetRow()
			}
			return struct{}{}, c.ReleaseOutbox(ctx, outbox, rows)
		},
		Forward: func(peer route.Peer, items []int) (struct{}, error) {
			_, err := peer.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Outbox: outbox, Rows: fanout.Pick(in, items)}))
			return struct{}{}, err
		},
		Resend: func([]int) bool { return true }, // releasing twice is releasing
	}.Run(ctx, parts)
	for _, a := range answers {
		if a.Err != nil {
			return nil, s.apiError(a.Err)
		}
	}
	return connect.NewResponse(&tenurev1.ReleaseResponse{}), nil
}

// ListOutboxHolds gathers the holds of every partition (the one a
// forwarding node named).
func (o outboxService) ListOutboxHolds(ctx context.Context, req *connect.Request[tenurev1.ListOutboxHoldsRequest]) (*connect.Response[tenurev1.ListOutboxHoldsResponse], error) {
	s := o.s
	scope, err := s.scope(ctx, req.Header(), "", "")
	if err != nil {
		return nil, s.apiError(err)
	}
	outbox := req.Msg.GetOutbox()
	all, err := concat(fanout.Each(ctx, fanout.Parallel, scope, true, func(_ int, c *coordinator.Coordinator) ([]*tenurev1.OutboxHold, error) {
		hs, err := c.OutboxHolds(ctx, outbox)
		if err != nil {
			return nil, err
		}
		out := make([]*tenurev1.OutboxHold, len(hs))
		for i, h := range hs {
			out[i] = &tenurev1.OutboxHold{Outbox: h.Outbox, Row: h.Row, Namespace: h.Namespace, Queue: h.Queue, RequestId: h.RequestID}
		}
		return out, nil
	}, func(i int, peer route.Peer) ([]*tenurev1.OutboxHold, error) {
		resp, err := peer.ListOutboxHolds(ctx, fanout.Request(req.Msg, scope[i]))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetHolds(), nil
	}))
	if err != nil {
		return nil, s.apiError(err)
	}
	slices.SortFunc(all, func(a, b *tenurev1.OutboxHold) int {
		return cmp.Or(cmp.Compare(a.GetOutbox(), b.GetOutbox()), cmp.Compare(a.GetRow(), b.GetRow()))
	})
	return connect.NewResponse(&tenurev1.ListOutboxHoldsResponse{Holds: all}), nil
}

// ReportOutboxes makes ListOutboxes answer what report gives: the
// outboxes the process relays (tenure server --outbox-postgres).
func (s *Server) ReportOutboxes(report func() []*tenurev1.Outbox) { s.outboxes.Store(&report) }

// ListOutboxes lists the outboxes this server relays, ordered by name.
func (o outboxService) ListOutboxes(context.Context, *connect.Request[tenurev1.ListOutboxesRequest]) (*connect.Response[tenurev1.ListOutboxesResponse], error) {
	out := &tenurev1.ListOutboxesResponse{}
	if report := o.s.outboxes.Load(); report != nil {
		out.Outboxes = (*report)()
		slices.SortFunc(out.Outboxes, func(a, b *tenurev1.Outbox) int { return cmp.Compare(a.GetName(), b.GetName()) })
	}
	return connect.NewResponse(out), nil
}
