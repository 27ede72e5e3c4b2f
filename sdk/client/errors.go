package client

import (
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The cases of a failed call a program branches on, with errors.Is. Each
// is decided from the reason the server attaches to its answer; an answer
// without one (from a proxy, or an older server) is classified by its
// status code instead (see Reason). Do not match error messages: they are
// written for people and may change.
var (
	// ErrLeaseLost: the lease named is not the task's current lease any
	// more (it expired, or the task was leased again, killed or finished).
	// Stop working on the task and apply no effects.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrAlreadyCommitted: another attempt committed the task first
	// (Error.CommittedBy names its lease). Apply no effects from this
	// attempt.
	ErrAlreadyCommitted = errors.New("client: already committed")
	// ErrWrongState: the task's state does not allow the call (Error.State
	// says which it was): killing a finished task, failing a committed
	// one, starting an execution that already committed.
	ErrWrongState = errors.New("client: wrong state")
	// ErrNotFound: no task has the id (or it left after the server's
	// retention period), or the queue named does not exist (no task, not
	// paused, no event in the last hour), or the schedule named does not.
	ErrNotFound = errors.New("client: not found")
	// ErrInvalidArgument: a field of the request is invalid (Error.Field
	// names it). Fix the request; retrying it as it is fails again.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrAlreadyExists: what a create names exists already with another
	// definition (CreateSchedule: a schedule of that name in that
	// namespace and queue). Update it, or delete it first.
	ErrAlreadyExists = errors.New("client: already exists")
	// ErrTooLarge: a value is over a size limit (Error.Field, Error.Size
	// and Error.Limit say which). Send less.
	ErrTooLarge = errors.New("client: too large")
	// ErrFull: the server holds as much as its memory budget allows, so it
	// refused to create a task or schedule (nothing was created; every
	// other call is served, so workers keep draining). Error.RetryAfter
	// says when to try again; Error.Size and Error.Limit are what the
	// server holds and its budget, in bytes.
	ErrFull = errors.New("client: server full")
	// ErrUnavailable: the server could not serve the call (down,
	// restarting, reopening its log, moving the partition), even after the
	// client's retries. Nothing was changed that was not also made
	// durable: try again later.
	ErrUnavailable = errors.New("client: unavailable")
	// ErrUnauthenticated: the server authenticates callers and the call
	// carried no token, or one it does not know (revoked, mistyped, of
	// another server). Set Options.Token. Decided by the status code
	// (unauthenticated), which says it alone.
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrPermissionDenied: the token's role or scope does not allow the
	// call; the message names the role or the namespace (or queue) it
	// lacks. Decided by the status code (permission_denied).
	ErrPermissionDenied = errors.New("client: permission denied")
	// ErrTLSRefused: the TLS handshake failed for good: this client does
	// not trust the server's certificate (Options.TLSConfig's CA), or the
	// server refused this client's. The call was not sent, nor retried:
	// fix the TLS configuration. (Its Code is unavailable, as Connect
	// reports it, but it does not match ErrUnavailable.)
	ErrTLSRefused = errors.New("client: TLS handshake refused")
	// ErrCursorExpired: a Watch cursor names a position the server's log
	// no longer holds (older records were replaced by a snapshot).
	// Error.OldestCursor is the oldest position still available: Watch
	// from it only if skipping what came before is acceptable.
	ErrCursorExpired = errors.New("client: cursor expired")
)

// Reason is the case of a failed call, as the server reports it. The
// values are the API's enum numbers (tenure.v1.ErrorReason).
type Reason uint8

const (
	// ReasonUnspecified: an error without a tenure reason (an internal
	// error, a cancelled call); no sentinel error matches it.
	ReasonUnspecified Reason = iota
	ReasonNotFound
	ReasonLeaseLost
	ReasonAlreadyCommitted
	ReasonWrongState
	ReasonInvalidArgument
	ReasonTooLarge
	ReasonUnavailable
	ReasonAlreadyExists
	ReasonFull
	ReasonCursorExpired
)

var reasonNames = [...]string{"UNSPECIFIED", "NOT_FOUND", "LEASE_LOST", "ALREADY_COMMITTED", "WRONG_STATE", "INVALID_ARGUMENT", "TOO_LARGE", "UNAVAILABLE",
	"ALREADY_EXISTS", "FULL", "CURSOR_EXPIRED"}

// String returns the reason's name as the API spells it without its
// prefix: "LEASE_LOST", ...
func (r Reason) String() string { return enumName(reasonNames[:], uint8(r), "Reason") }

// sentinels maps each reason to the error errors.Is matches.
var sentinels = [...]error{
	ReasonNotFound:         ErrNotFound,
	ReasonLeaseLost:        ErrLeaseLost,
	ReasonAlreadyCommitted: ErrAlreadyCommitted,
	ReasonWrongState:       ErrWrongState,
	ReasonInvalidArgument:  ErrInvalidArgument,
	ReasonTooLarge:         ErrTooLarge,
	ReasonUnavailable:      ErrUnavailable,
	ReasonAlreadyExists:    ErrAlreadyExists,
	ReasonFull:             ErrFull,
	ReasonCursorExpired:    ErrCursorExpired,
}

// reasonOfCode classifies an answer that carries no reason by its status
// code, as the API documents each code: failed_precondition is "lease
// lost" (it cannot be told apart from wrong state without the reason), and
// already_exists "already committed" (a schedule that exists answers it
// with its reason).
func reasonOfCode(c connect.Code) Reason {
	switch c {
	case connect.CodeNotFound:
		return ReasonNotFound
	case connect.CodeFailedPrecondition:
		return ReasonLeaseLost
	case connect.CodeAlreadyExists:
		return ReasonAlreadyCommitted
	case connect.CodeInvalidArgument:
		return ReasonInvalidArgument
	case connect.CodeResourceExhausted:
		return ReasonTooLarge
	case connect.CodeUnavailable:
		return ReasonUnavailable
	case connect.CodeOutOfRange:
		return ReasonCursorExpired
	}
	return ReasonUnspecified
}

// Error is a call the server (or the client, checking a request before
// sending it) refused. Every error a Client method returns for a refused
// call is, or wraps, an *Error: get it with errors.As to read the fields,
// or test its case with errors.Is(err, ErrLeaseLost) and the other
// sentinels. It unwraps to the *connect.Error of the answer, so
// connect.CodeOf and context errors (errors.Is(err, context.Canceled)) see
// through it too.
type Error struct {
	// Op is the call that failed, e.g. "Commit".
	Op string
	// Code is the answer's status code (failed_precondition, not_found,
	// ...): the coarse class. Reason says which case of it happened.
	Code connect.Code
	// Reason is the case the server reported, or the one its code implies
	// when it reported none.
	Reason Reason
	// Message is the server's explanation, for people.
	Message string
	// TaskID is the task the error is about, if any.
	TaskID string
	// LeaseID is the lease the call named (ErrLeaseLost,
	// ErrAlreadyCommitted).
	LeaseID string
	// CommittedBy is the lease whose commit won (ErrAlreadyCommitted).
	CommittedBy string
	// State is the task's state when the call was refused (ErrWrongState).
	State TaskState
	// Field names the offending field as the request spells it, e.g.
	// "requests[3].queue" (ErrInvalidArgument, ErrTooLarge).
	Field string
	// Size and Limit are the field's size and its limit in bytes
	// (ErrTooLarge); what the server holds and its memory budget (ErrFull).
	Size, Limit int64
	// RetryAfter is how long to wait before trying again (ErrFull).
	RetryAfter time.Duration
	// OldestCursor is the oldest position the server's log still holds
	// (ErrCursorExpired): a cursor to Watch from.
	OldestCursor string

	err        error // the *connect.Error answered
	tlsRefused bool  // the call failed in a TLS handshake that cannot succeed
}

// Error returns "client: <Op>: <code>: <message>", without the code
// when the message says it already ("client: Submit: invalid argument:
// …", not "invalid_argument: invalid argument: …").
func (e *Error) Error() string {
	code := e.Code.String()
	if strings.Contains(e.Message, strings.ReplaceAll(code, "_", " ")) || strings.Contains(e.Message, code) {
		return "client: " + e.Op + ": " + e.Message
	}
	return "client: " + e.Op + ": " + code + ": " + e.Message
}

// Is reports whether target is the sentinel of e's reason, of its code
// for ErrUnauthenticated and ErrPermissionDenied, or ErrTLSRefused for a
// failed TLS handshake.
func (e *Error) Is(target error) bool {
	if e.tlsRefused {
		return target == ErrTLSRefused
	}
	switch target {
	case ErrUnauthenticated:
		return e.Code == connect.CodeUnauthenticated
	case ErrPermissionDenied:
		return e.Code == connect.CodePermissionDenied
	}
	return int(e.Reason) < len(sentinels) && target != nil && sentinels[e.Reason] == target
}

// Unwrap returns the *connect.Error of the answer.
func (e *Error) Unwrap() error { return e.err }

// newError builds the *Error of op from an error a Connect call returned.
func newError(op string, err error) *Error {
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		// Connect returns its own errors only; anything else is unknown.
		ce = connect.NewError(connect.CodeUnknown, err)
	}
	e := &Error{Op: op, Code: ce.Code(), Message: ce.Message(), err: ce}
	e.setDetail(detailOf(ce))
	if e.Code == connect.CodeUnavailable && tlsRefused(err) {
		e.tlsRefused, e.Reason = true, ReasonUnspecified
	}
	return e
}

// itemError builds the *Error of one item of a CompleteBatch answer.
func itemError(r *tenurev1.CompleteResult) *Error {
	var code connect.Code
	if code.UnmarshalText([]byte(r.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	e := &Error{Op: "CompleteBatch", Code: code, Message: r.GetMessage(), err: connect.NewError(code, errors.New(r.GetMessage()))}
	e.setDetail(r.GetDetail())
	if e.TaskID == "" {
		e.TaskID = r.GetTaskId()
	}
	return e
}

// setDetail fills e's reason and fields from the server's detail; without
// one the reason follows e.Code.
func (e *Error) setDetail(d *tenurev1.ErrorDetail) {
	e.Reason = Reason(d.GetReason())
	if e.Reason == ReasonUnspecified || int(e.Reason) >= len(reasonNames) {
		// No detail, or a reason this SDK does not know (a newer server):
		// the code still says what class of failure it is.
		e.Reason = reasonOfCode(e.Code)
	}
	e.TaskID, e.LeaseID, e.CommittedBy = d.GetTaskId(), d.GetLeaseId(), d.GetCommittedBy()
	e.State = TaskState(d.GetState())
	e.Field, e.Size, e.Limit = d.GetField(), d.GetSize(), d.GetLimit()
	if d.GetRetryAfter() != nil {
		e.RetryAfter = d.GetRetryAfter().AsDuration()
	}
	e.OldestCursor = d.GetOldestCursor()
}

// detailOf returns the tenure detail of ce, or nil.
func detailOf(ce *connect.Error) *tenurev1.ErrorDetail {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if td, ok := v.(*tenurev1.ErrorDetail); ok {
				return td
			}
		}
	}
	return nil
}

// invalid is the *Error of a request the client refuses before sending it.
func invalid(op, field, msg string) *Error {
	return &Error{Op: op, Code: connect.CodeInvalidArgument, Reason: ReasonInvalidArgument, Message: msg, Field: field,
		err: connect.NewError(connect.CodeInvalidArgument, errors.New(msg))}
}
