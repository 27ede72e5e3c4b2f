package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/coordinator"
)

// Error is a call that a remote node answered with an error, or that could
// not reach it. Error() is the remote node's message as it sent it (or, for
// a node that could not be reached, a message naming its address); errors.Is
// matches the coordinator error (or context error) of its code.
type Error struct {
	// Code is the Connect code: the far node's, or the one the call failed
	// with on the way.
	Code connect.Code
	// Node is the base URL of the remote node.
	Node string
	msg  string
	// kind is the sentinel errors.Is matches; nil for codes with none.
	kind error
	// cause is what Unwrap returns: the *coordinator.FieldError or
	// *coordinator.LimitError the message spells, or the error of a call
	// that did not reach the node.
	cause error
}

func (e *Error) Error() string { return e.msg }

// Is matches the coordinator error of the code (see the package comment).
func (e *Error) Is(target error) bool { return e.kind != nil && target == e.kind }

func (e *Error) Unwrap() error { return e.cause }

// apiError converts the error of a call to node. ctx is the call's.
func apiError(ctx context.Context, node string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		// The generated clients return only *connect.Error; anything else
		// did not come from the far node.
		return unreachable(node, err)
	}
	if connect.IsWireError(ce) {
		return wireError(node, ce.Code(), ce.Message())
	}
	// The client made up the error: the call did not get an answer.
	switch code := ce.Code(); {
	case ctx.Err() != nil:
		code = connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return &Error{Code: code, Node: node, msg: ce.Message(), kind: ctx.Err(), cause: ce}
	case code == connect.CodeCanceled, code == connect.CodeDeadlineExceeded:
		e := wireError(node, code, ce.Message())
		e.cause = ce
		return e
	case code == connect.CodeUnavailable:
		return unreachable(node, ce.Unwrap())
	default:
		return &Error{Code: code, Node: node, msg: fmt.Sprintf("tenure node %s: %s", node, ce.Message()), cause: ce}
	}
}

// unreachable is a call that could not reach node (refused, reset, timed
// out in the network, or answered by something that is not a tenure node).
func unreachable(node string, err error) *Error {
	return &Error{
		Code:  connect.CodeUnavailable,
		Node:  node,
		msg:   fmt.Sprintf("%v: tenure node %s could not be reached: %v; retry", coordinator.ErrUnavailable, node, err),
		kind:  coordinator.ErrUnavailable,
		cause: err,
	}
}

// wireError is the error the far node answered: code and message as sent.
func wireError(node string, code connect.Code, msg string) *Error {
	e := &Error{Code: code, Node: node, msg: msg}
	switch code {
	case connect.CodeInvalidArgument:
		e.kind = coordinator.ErrInvalidArgument
		e.cause = fieldError(msg)
	case connect.CodeResourceExhausted:
		e.kind = coordinator.ErrTooLarge
		e.cause = limitError(msg)
	case connect.CodeNotFound:
		e.kind = coordinator.ErrNotFound
	case connect.CodeAlreadyExists:
		e.kind = coordinator.ErrAlreadyCommitted
	case connect.CodeFailedPrecondition:
		// Both map to failed_precondition; the coordinator's messages
		// start with the sentinel's text.
		e.kind = coordinator.ErrLeaseLost
		if strings.HasPrefix(msg, coordinator.ErrWrongState.Error()+":") {
			e.kind = coordinator.ErrWrongState
		}
	case connect.CodeUnavailable:
		e.kind = coordinator.ErrUnavailable
	case connect.CodeCanceled:
		e.kind = context.Canceled
	case connect.CodeDeadlineExceeded:
		e.kind = context.DeadlineExceeded
	}
	return e
}

// fieldError returns the *coordinator.FieldError whose message msg is, or
// nil.
func fieldError(msg string) error {
	prefix := coordinator.ErrInvalidArgument.Error() + ": "
	rest, ok := strings.CutPrefix(msg, prefix)
	if !ok {
		return nil
	}
	field, problem, ok := strings.Cut(rest, ": ")
	if !ok || field == "" || strings.ContainsAny(field, " \t") {
		return nil
	}
	fe := &coordinator.FieldError{Field: field, Problem: problem}
	if fe.Error() != msg {
		return nil
	}
	return fe
}

// limitError returns the *coordinator.LimitError whose message msg is, or
// nil.
func limitError(msg string) error {
	le := &coordinator.LimitError{}
	if _, err := fmt.Sscanf(msg, "too large: %s is %d bytes, the limit is %d bytes;", &le.Field, &le.Size, &le.Limit); err != nil {
		return nil
	}
	if le.Error() != msg {
		return nil
	}
	return le
}

// itemError converts one CompleteBatch result's code and message ("" code:
// no error).
func itemError(node, code, msg string) error {
	if code == "" {
		return nil
	}
	var c connect.Code
	if err := c.UnmarshalText([]byte(code)); err != nil {
		c = connect.CodeUnknown
	}
	return wireError(node, c, msg)
}
