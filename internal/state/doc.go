// Package state is tenure's pure core: the task state machine
// (docs/design/state-machine.md), its records, and the indexes derived from them.
//
// A State is a pure function of the records applied to it, in LSN order.
// Apply reads no clock, no random source, no network and no disk: every time
// it needs is inside the record, chosen by the coordinator before the
// append. Replaying the same log therefore always yields the same State, and
// a record whose precondition fails during replay means the log is corrupt
// or foreign.
//
// The package imports nothing from the rest of tenure. It is not safe for
// concurrent use: its owner serialises every call.
//
// Task states: WAITING → LEASED → (COMMITTED) → COMPLETED, plus FAILED and
// DEAD (terminal). A task keeps the list of its executions (one per lease),
// whose status LEASED → IN_PROGRESS → COMMITTED → DONE, or ABORTED, explains
// every attempt. COMMITTED is the idempotency boundary: at most one
// execution of a task commits, and a committed task never returns to
// WAITING; if its lease expires it is offered again only to be finalised.
//
// Records: each record type is one file, record_<name>.go, holding its
// struct, its Task method and its apply method (the precondition checked
// and the effect). Apply dispatches to that method; package record numbers
// and encodes the records, and docs/design/records.md describes them all.
//
// Flow control: a queue's limits (limits.go) and the limits of its keys
// (keys*.go, docs/design/keys.md) are checked when a LeaseGranted applies,
// so no replay can exceed them; Schedulable offers only what they admit.
//
// A LeaseExpired on the task's last allowed attempt fails the task instead
// of returning it to WAITING, so a task that crashes its worker every time
// cannot loop forever.
//
// Retention is a record too: TasksPurgedRange drops the terminal tasks
// last updated before its cut-off among those created in its range of LSNs
// (TasksPurged, in older logs, among all), and with them their request ids,
// so a replay of the whole log drops the same tasks at the same point and
// accepts the same reused request ids. PurgeSlice plans the ranges.
//
// Snapshots: Image copies the logical content cheaply (sharing the bytes the
// state never modifies in place); an ImageCopy does it in steps while
// records apply between them, saving a copy of each task a record is about
// to change before the copy reaches it; and a Loader rebuilds a State from such a
// content, task by task, checking each as Invariants would and building
// every derived index, so that Apply continues from it. Package statetest
// generates random valid record sequences for tests.
package state
