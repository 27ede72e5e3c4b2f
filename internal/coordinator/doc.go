// Package coordinator is the single authority over one partition's tasks
// (docs/design/architecture.md): every request goes request → validate → choose
// records → append → apply → respond, and memory is only a replay of the
// log.
//
// Roles are files rather than services:
//   - TaskManager (tasks.go) validates submissions and builds TaskCreated
//     and TaskDead; it also answers Get, List and History.
//   - LeaseManager (leases.go) decides grants, extensions, expiries, commits,
//     completions and failures, and builds their records.
//   - WorkerRegistry (registry.go) is soft, advisory state that never enters
//     the log.
//
// Guarantees:
//   - An answer is given only after every record it depends on is durable
//     in the log, reads included.
//   - A lease grants permission, not success: the first valid commit wins;
//     any other attempt is told ErrLeaseLost or ErrAlreadyCommitted. A
//     former lease's refused action is recorded as TaskCancelled, once per
//     lease and action; a lease id the task never had leaves no record.
//     Neither keeps a finished task from its retention.
//   - Time only revokes: expiries are written as LeaseExpired, by a periodic
//     scan (Run) and lazily whenever a request meets a past-due lease.
//   - A log failure stops the coordinator (ErrUnavailable) for good; the
//     owner reopens it from the log. It never retries a failed fsync.
//
// Time comes only from the injected clock, and ids from the injected random
// source, so a seeded run with a fake clock is reproducible.
package coordinator
