package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// Peer calls the API of one other node. It is safe for concurrent use.
type Peer struct {
	tenurev1connect.TaskServiceClient
	tenurev1connect.WorkerServiceClient
	tenurev1connect.QueueServiceClient
	tenurev1connect.ScheduleServiceClient
	tenurev1connect.OutboxServiceClient
	tenurev1connect.WorkflowServiceClient
	addr string
}

var _ route.Peer = (*Peer)(nil)

// New returns the Peer of the node at baseURL (e.g. "http://10.0.0.7:7070"),
// called through hc (http.DefaultClient if nil), marking every request as
// forwarded by the node with id from. hc must not time out a Lease
// long-poll: calls end with their ctx, whose deadline the far node also
// sees. Every call runs through interceptors first (metrics count them).
func New(baseURL string, hc connect.HTTPClient, from Signer, interceptors ...connect.Interceptor) *Peer {
	if hc == nil {
		hc = http.DefaultClient
	}
	opts := []connect.ClientOption{connect.WithInterceptors(interceptors...), connect.WithInterceptors(forwardedBy(from), unanswered(baseURL))}
	return &Peer{
		TaskServiceClient:     tenurev1connect.NewTaskServiceClient(hc, baseURL, opts...),
		WorkerServiceClient:   tenurev1connect.NewWorkerServiceClient(hc, baseURL, opts...),
		QueueServiceClient:    tenurev1connect.NewQueueServiceClient(hc, baseURL, opts...),
		ScheduleServiceClient: tenurev1connect.NewScheduleServiceClient(hc, baseURL, opts...),
		OutboxServiceClient:   tenurev1connect.NewOutboxServiceClient(hc, baseURL, opts...),
		WorkflowServiceClient: tenurev1connect.NewWorkflowServiceClient(hc, baseURL, opts...),
		addr:                  baseURL,
	}
}

// Addr returns the base URL of the node.
func (p *Peer) Addr() string { return p.addr }

// Signer marks a request as one this node forwards to procedure for the
// caller principal ("" without authentication): route.ForwardedHeader
// with the node's id, and what lets the far node check that it comes from
// a node of its cluster (package nodeauth).
type Signer interface {
	SignForwarded(h http.Header, procedure, principal string)
}

// forwardedBy signs every request as forwarded by from, for the principal
// of its context.
func forwardedBy(from Signer) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			from.SignForwarded(req.Header(), req.Spec().Procedure, principal.From(ctx))
			return next(ctx, req)
		}
	}
}

// unanswered turns the error of a call that got no answer from the node
// into unavailable, naming the node; errors the node answered pass
// unchanged.
func unanswered(addr string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil {
				return resp, nil
			}
			var ce *connect.Error
			if errors.As(err, &ce) && connect.IsWireError(ce) {
				return nil, err
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, connect.NewError(connect.CodeOf(ctxErr), ctxErr)
			}
			e := connect.NewError(connect.CodeUnavailable, fmt.Errorf("tenure node %s could not be reached: %v; retry", addr, err))
			if d, derr := connect.NewErrorDetail(&tenurev1.ErrorDetail{Reason: tenurev1.ErrorReason_ERROR_REASON_UNAVAILABLE}); derr == nil {
				e.AddDetail(d)
			}
			return nil, e
		}
	}
}
