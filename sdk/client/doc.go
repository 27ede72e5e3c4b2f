// Package client is the Go SDK of tenure: a typed client over the tenure.v1
// API (TaskService, WorkerService, QueueService, ScheduleService and
// EventService) for submitting, inspecting, killing and retrying tasks,
// for the worker protocol (lease, heartbeat, commit, complete, fail), for
// queue statistics, pause and resume, for schedules, and for following
// every event of the log (Watch). Most workers should
// use package worker, which runs that protocol for them.
//
// The SDK speaks in its own types: Task, Execution, LeasedTask,
// HistoryEntry, FencingToken, FailResult, Queue, BulkResult; states are
// TaskState and ExecutionStatus constants; times are time.Time (zero when
// unset) and durations time.Duration. The methods are named after the
// API's calls, and have one shape: each takes ctx and a request struct
// (XRequest) and returns what the API answers; the listings return an
// iter.Seq2 that fetches the pages as the loop asks for them:
//
//	TaskService      Submit, SubmitBatch, GetTask, ListTasks (ListTasksPage),
//	                 KillTask, RetryTask, RetryTasks, KillTasks, PurgeTasks,
//	                 GetTaskHistory
//	WorkerService    Lease, Start, Heartbeat, Commit, Complete, CompleteBatch, Fail
//	QueueService     ListQueues, GetQueue, PauseQueue, ResumeQueue, SetQueueLimits
//	ScheduleService  CreateSchedule, GetSchedule, ListSchedules, UpdateSchedule,
//	                 PauseSchedule, ResumeSchedule, DeleteSchedule, BackfillSchedule
//	EventService     Watch (WatchEvents: an iter.Seq2 of the log's events, each
//	                 with the cursor after it, that resumes by itself)
//
// Interceptors (Options.Interceptors) run around every call: for logging,
// metrics, tracing, or headers of your own; once the call returns they see
// the API's answer as the server sent it (Call.Reply).
//
// The calls an operator makes (KillTask, RetryTask, the bulk actions,
// PauseQueue, ResumeQueue, SetQueueLimits, the schedule calls that change one) record who
// asked: the request's RequestedBy, or
// Options.RequestedBy. It is what the caller declares: a server with
// authentication on records the token's name instead.
//
// What it promises:
//
//   - One protocol per Client, chosen in Options.Protocol: "connect" (the
//     default, protobuf bodies), "json" (Connect with JSON bodies, easy to
//     read in a proxy) or "grpc" (over unencrypted HTTP/2 for http:// URLs).
//   - TLS: an https:// base URL speaks HTTP/2 over TLS (every protocol;
//     HTTP/1.1 if the server offers only that). Options.TLSConfig sets the
//     CA to trust and a client certificate for servers that require one;
//     LoadTLSConfig builds it from PEM files. A handshake that fails for
//     good (an untrusted certificate on either side) is not retried: it is
//     ErrTLSRefused.
//   - A call that fails as unavailable (the server is restarting, reopening
//     its log, or unreachable) is retried up to Options.MaxRetries times
//     with a doubling, jittered backoff; nothing else is retried, and the
//     wait always ends when ctx does. Retrying is safe for every call of
//     the API:
//   - Submit and SubmitBatch carry a request id. When the caller gives none,
//     the SDK generates a random one (crypto/rand) before the first try, so
//     its own retries can never create a second task. Give your own request
//     id to make your retries (across processes) idempotent too.
//   - Start, Heartbeat, Commit, Complete and CompleteBatch are fenced by the
//     lease id, and the server answers a repeated Commit or Complete of the
//     same lease as it answered the first. CompleteBatch answers each item
//     on its own (CompleteBatchResult.Errors[i]), and a retry of the whole call repeats each item.
//   - Fail, KillTask and RetryTask are not repeatable in the same way: when
//     the first try took effect but its answer was lost, the retry is
//     refused (the lease is no longer current; the task is already DEAD, or
//     no longer FAILED or DEAD). The task is then in the state the caller
//     asked for.
//   - PauseQueue, ResumeQueue, SetQueueLimits, PauseSchedule and ResumeSchedule repeated
//     change nothing more (Changed is false). CreateSchedule repeated with
//     the same definition returns the schedule (created false);
//     BackfillSchedule repeated fires no tick twice (each tick has its own
//     request id); DeleteSchedule repeated after it took effect is
//     ErrNotFound. RetryTasks, KillTasks and PurgeTasks repeated act on what
//     the first try left (a retry continues a call that failed part way),
//     and count only what the last try did.
//   - A Lease whose grant took effect but whose answer was lost leaves a
//     lease nobody holds: it simply expires after the task's execution
//     window and the task is retried (the lost attempt counts against its
//     retry policy).
//   - Errors: a refused call returns an *Error (possibly wrapped) naming
//     the call, the status code, the server's reason and message, and the
//     task, lease, state, field or limit concerned. Branch with errors.Is on
//     ErrLeaseLost, ErrAlreadyCommitted, ErrWrongState, ErrNotFound,
//     ErrInvalidArgument, ErrTooLarge, ErrUnavailable and ErrAlreadyExists; they are decided
//     from the reason the server sends, never from the message.
//     ErrUnauthenticated and ErrPermissionDenied, from a server that
//     authenticates callers, are decided by the status code alone.
//   - Authentication: Options.Token is sent with every call as its bearer
//     token (Authorization: Bearer; gRPC metadata alike).
//
// The commit boundary: only the attempt whose Commit wins may apply a
// task's external effects, keyed by the FencingToken; an attempt told
// ErrLeaseLost or ErrAlreadyCommitted applies none. That is what keeps a
// stalled worker, whose lease expired while another attempt ran, from
// applying the effects a second time (docs/design/state-machine.md).
//
// A Client is safe for concurrent use; create one per server and share it.
package client
