package coordinator

import (
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/internal/state"
)

// The error kinds a caller branches on (with errors.Is). The API layer maps
// each to one status code. Messages say what happened and what to do.
var (
	// ErrNotFound: no task has that id.
	ErrNotFound = errors.New("task not found")
	// ErrLeaseLost: the lease is not the task's current lease any more (it
	// expired, or the task was leased again, killed or finished). The worker
	// must stop and must not apply effects.
	ErrLeaseLost = errors.New("lease lost")
	// ErrAlreadyCommitted: another attempt committed the task first. The
	// caller must not apply effects.
	ErrAlreadyCommitted = errors.New("already committed")
	// ErrWrongState: the task's state does not allow the operation.
	ErrWrongState = errors.New("operation not allowed in the task's state")
	// ErrAlreadyExists: what a create names exists already, defined
	// otherwise.
	ErrAlreadyExists = errors.New("already exists")
	// ErrInvalidArgument is wrapped by *FieldError.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge is wrapped by *LimitError.
	ErrTooLarge = errors.New("too large")
	// ErrUnavailable: the log failed or the coordinator is closed; nothing
	// more is acknowledged until it is reopened from its log.
	ErrUnavailable = errors.New("unavailable")
	// ErrFull is wrapped by *FullError: the node holds as much as its
	// memory budget allows; retry later.
	ErrFull = errors.New("full")
)

// FieldError is an invalid argument, naming the field.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("invalid argument: %s: %s", e.Field, e.Problem)
}

func (e *FieldError) Unwrap() error { return ErrInvalidArgument }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// ItemError names item i of a batch in the field of err, if err is (or
// wraps) a *FieldError or a *LimitError: "requests[i]." is prefixed to a
// copy. Other errors, and nil, are returned as they are. Batches check
// their items unnamed and name only the one that fails, so that the path
// every item takes builds no field names.
func ItemError(err error, i int) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: fmt.Sprintf("requests[%d].%s", i, fe.Field), Problem: fe.Problem}
	}
	var le *LimitError
	if errors.As(err, &le) {
		return &LimitError{Field: fmt.Sprintf("requests[%d].%s", i, le.Field), Size: le.Size, Limit: le.Limit}
	}
	return err
}

// LimitError is a value over a size limit, naming the field and the limit.
type LimitError struct {
	Field string
	Size  int
	Limit int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("too large: %s is %d bytes, the limit is %d bytes; send less (store large data elsewhere and pass a reference)", e.Field, e.Size, e.Limit)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// TaskError is a refusal about one task. errors.Is matches its Kind
// (ErrNotFound, ErrLeaseLost, ErrAlreadyCommitted or ErrWrongState); its
// fields carry what a caller needs to act on it, so that the API can hand
// them on as structured detail instead of a sentence to parse.
type TaskError struct {
	Kind   error
	TaskID string
	// LeaseID is the lease the refused call named, if it named one.
	LeaseID string
	// CommittedBy is the lease whose commit won (ErrAlreadyCommitted).
	CommittedBy string
	// State is the task's state when the call was refused (ErrWrongState).
	State state.TaskState
	msg   string
}

func (e *TaskError) Error() string { return e.msg }

func (e *TaskError) Unwrap() error { return e.Kind }

func leaseLost(taskID, leaseID, why string) error {
	return &TaskError{Kind: ErrLeaseLost, TaskID: taskID, LeaseID: leaseID,
		msg: fmt.Sprintf("%v: task %s: lease %s %s; stop working on this task and do not apply its effects", ErrLeaseLost, taskID, leaseID, why)}
}

func alreadyCommitted(taskID, leaseID, by string) error {
	return &TaskError{Kind: ErrAlreadyCommitted, TaskID: taskID, LeaseID: leaseID, CommittedBy: by,
		msg: fmt.Sprintf("%v: task %s was committed by lease %s; do not apply effects from this attempt", ErrAlreadyCommitted, taskID, by)}
}

func notFound(taskID string) error {
	return &TaskError{Kind: ErrNotFound, TaskID: taskID,
		msg: fmt.Sprintf("%v: no task %q (check the id; finished tasks leave after the retention period)", ErrNotFound, taskID)}
}

// wrongState refuses a call that t's state does not allow; the message
// continues after "task <id>".
func wrongState(t *state.Task, format string, args ...any) error {
	return &TaskError{Kind: ErrWrongState, TaskID: t.ID, State: t.State,
		msg: fmt.Sprintf("%v: task %s%s", ErrWrongState, t.ID, fmt.Sprintf(format, args...))}
}
