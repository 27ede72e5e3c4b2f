package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// apiError maps an error to the Connect error the API answers: its code,
// its message, and a tenurev1.ErrorDetail with what a caller branches on.
// An error that another node answered (a *connect.Error that came back
// from forwarding) passes through as that node sent it: code, message and
// details.
func (s *Server) apiError(err error) *connect.Error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return passThrough(ce)
	}
	code, d := classify(err)
	var e *connect.Error
	if s.opts.Reword != nil {
		e = connect.NewError(code, errors.New(s.opts.Reword(err.Error())))
	} else {
		e = connect.NewError(code, err)
	}
	if d.Reason == tenurev1.ErrorReason_ERROR_REASON_FULL {
		s.hit(LimitMemory)
		// For HTTP clients and retry middleware, in whole seconds (RFC
		// 9110 §10.2.3); in gRPC it is a trailer, which clients ignore.
		e.Meta().Set("Retry-After", strconv.FormatInt(int64((d.GetRetryAfter().AsDuration()+time.Second-1)/time.Second), 10))
	}
	if d.Reason != tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		if detail, derr := connect.NewErrorDetail(d); derr == nil {
			e.AddDetail(detail)
		}
	}
	return e
}

// passThrough is ce as its sender answered it, without the transport's
// metadata (the far node's response headers must not become ours).
func passThrough(ce *connect.Error) *connect.Error {
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}

// classify returns the code and the detail of a coordinator (or context)
// error.
func classify(err error) (connect.Code, *tenurev1.ErrorDetail) {
	d := &tenurev1.ErrorDetail{}
	var te *coordinator.TaskError
	if errors.As(err, &te) {
		d.TaskId, d.LeaseId, d.CommittedBy = te.TaskID, te.LeaseID, te.CommittedBy
		if te.State != 0 {
			d.State = taskStates[te.State]
		}
	}
	var fe *coordinator.FieldError
	if errors.As(err, &fe) {
		d.Field = fe.Field
	}
	var le *coordinator.LimitError
	if errors.As(err, &le) {
		d.Field, d.Size, d.Limit = le.Field, int64(le.Size), int64(le.Limit)
	}
	if le, ok := isLimit(err); ok {
		d.Field, d.Size, d.Limit = le.field, le.size, le.limit
	}
	var full *coordinator.FullError
	if errors.As(err, &full) {
		d.Size, d.Limit, d.RetryAfter = full.HeldBytes, full.LimitBytes, durationpb.New(full.RetryAfter)
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			d.Reason = k.reason
			return k.code, d
		}
	}
	return connect.CodeInternal, d
}

// errorKinds maps each error a caller branches on to its code and reason,
// in the order they are tested.
var errorKinds = []struct {
	err    error
	code   connect.Code
	reason tenurev1.ErrorReason
}{
	{coordinator.ErrInvalidArgument, connect.CodeInvalidArgument, tenurev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT},
	{coordinator.ErrTooLarge, connect.CodeResourceExhausted, tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE},
	{coordinator.ErrNotFound, connect.CodeNotFound, tenurev1.ErrorReason_ERROR_REASON_NOT_FOUND},
	{coordinator.ErrAlreadyCommitted, connect.CodeAlreadyExists, tenurev1.ErrorReason_ERROR_REASON_ALREADY_COMMITTED},
	{coordinator.ErrAlreadyExists, connect.CodeAlreadyExists, tenurev1.ErrorReason_ERROR_REASON_ALREADY_EXISTS},
	{coordinator.ErrLeaseLost, connect.CodeFailedPrecondition, tenurev1.ErrorReason_ERROR_REASON_LEASE_LOST},
	{coordinator.ErrWrongState, connect.CodeFailedPrecondition, tenurev1.ErrorReason_ERROR_REASON_WRONG_STATE},
	{coordinator.ErrUnavailable, connect.CodeUnavailable, tenurev1.ErrorReason_ERROR_REASON_UNAVAILABLE},
	{coordinator.ErrFull, connect.CodeResourceExhausted, tenurev1.ErrorReason_ERROR_REASON_FULL},
	{context.Canceled, connect.CodeCanceled, tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded, tenurev1.ErrorReason_ERROR_REASON_UNSPECIFIED},
}

// detailOf returns the tenure detail of e, or nil.
func detailOf(e *connect.Error) *tenurev1.ErrorDetail {
	for _, d := range e.Details() {
		if v, err := d.Value(); err == nil {
			if td, ok := v.(*tenurev1.ErrorDetail); ok {
				return td
			}
		}
	}
	return nil
}

// closingAnswer is a whole HTTP/1.1 answer of status carrying e as a
// Connect unary error (its code, message and details as JSON), for the
// refusals written below net/http (conns.go). It closes the connection.
func closingAnswer(status int, e *connect.Error) []byte {
	type detail struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	wire := struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Details []detail `json:"details,omitempty"`
	}{Code: e.Code().String(), Message: e.Message()}
	for _, d := range e.Details() {
		wire.Details = append(wire.Details, detail{d.Type(), base64.RawStdEncoding.EncodeToString(d.Bytes())})
	}
	body, err := json.Marshal(wire)
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// badAnswer is an answer from another node that does not fit the request.
func badAnswer(peer route.Peer, format string, args ...any) error {
	return fmt.Errorf("%w: tenure node %s answered something this node cannot use: %s", coordinator.ErrUnavailable, peer.Addr(), fmt.Sprintf(format, args...))
}
