// Package remote is a server.Backend that serves every call by calling the
// tenure.v1 API of another tenure node: Connect with protobuf bodies, over
// HTTP. Cluster mode uses it to forward a request for a partition that this
// node does not own to the node that owns it.
//
// Every request carries the header server.ForwardedHeader with this node's
// id. The far side sees it through server.Forwarded and serves the request
// from its own partitions only, so a request is forwarded at most once.
//
// # Conversions
//
// Requests and answers are converted as the exact inverse of what package
// server does, so a server over a remote Backend answers its clients what
// the remote node's server would have answered:
//
//   - A task keeps every field the API carries. Task.CommittedBy, and
//     Execution.Finalize, are not in the API but follow from the executions
//     (the lease whose execution committed; an execution granted after
//     that commit), and the task's current lease is the execution the
//     API's lease_id names. Three fields are not carried and stay zero:
//     Task.CreatedLSN and Task.LSNs (the log positions of the owning node),
//     and Execution.Refused (which refusals the owner recorded; the
//     history shows them).
//   - A List page's cursor is the API's page token, a decimal number.
//   - Lease answers do not carry the worker id: it is the request's, as the
//     coordinator grants it.
//   - History: the API summarises each record (its type, time, lease,
//     worker, attempt and a one-line detail). The records are rebuilt from
//     the summary, the times written in the detail, and the task (one more
//     call, GetTask, after the history, for what the summary only names:
//     the payload, retry policy, request id and priority of TaskCreated, the
//     result of TaskCommitted and of a TaskCompleted that committed, the
//     reason of TaskFailed). The action of a TaskCancelled is the first
//     word of its reason, as the coordinator writes it. Not carried: the
//     result a worker passed to a TaskCompleted that finalised an earlier
//     commit (Result stays nil).
//
// # Errors
//
// An error answered by the far node becomes an *Error whose Error() is the
// far node's message and which matches (errors.Is) the coordinator error
// that package server maps to its code: invalid_argument →
// coordinator.ErrInvalidArgument (and, errors.As, the *coordinator.FieldError
// it names), resource_exhausted → ErrTooLarge (and *coordinator.LimitError),
// not_found → ErrNotFound, already_exists → ErrAlreadyCommitted,
// failed_precondition → ErrLeaseLost (ErrWrongState when the message is one
// of its), unavailable → ErrUnavailable, canceled and deadline_exceeded →
// context.Canceled and context.DeadlineExceeded. A server over the Backend
// thus answers the same code and message again. A node that cannot be
// reached is coordinator.ErrUnavailable, with a message naming its address.
package remote
