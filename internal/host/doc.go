// Package host serves one partition, the same way in embedded and in
// cluster mode: it opens the partition's storage (a log and a snapshot
// store), recovers the coordinator from the newest usable snapshot and the
// log after it, runs the coordinator's expiry loop, applies the retention
// period and takes snapshots on a schedule (and on demand), which let the
// log's oldest records go, and handles a failure of the log.
//
// What differs between the modes stays with the caller (package node: the
// data directory's lock and its file WAL; package member: the partition's
// database log opened at an assigned epoch, and whether the partition is
// still this node's). The caller passes how to open the storage and what
// to do after a failure:
//
//   - Reopen (embedded mode): the host closes the failed storage and opens
//     it again from what is durable, and serves again. A failed fsync is
//     never retried on the same file handle. The first reopen after a
//     failure that followed durable work is at once; every later attempt
//     (a failed open, or a failure again before anything became durable)
//     waits, RestartBackoff doubling up to MaxRestartBackoff, so a storage
//     that keeps failing (a full disk) is not replayed over and over, and
//     before each the failed state's memory is collected and given back.
//   - Otherwise (cluster mode): the host stops serving for good and calls
//     OnFailure; the owner closes it and opens a new host if the
//     partition is still assigned to it.
//
// Promises:
//   - Do runs a request on the serving coordinator, or answers
//     coordinator.ErrUnavailable while the host reopens or after it
//     stopped. A request that meets the failure starts the recovery at
//     once, not at the next tick.
//   - Snapshots are taken once Schedule.EveryRecords records were appended
//     since the last one, or Schedule.Every after the last one if any
//     record was appended, but never sooner than ten times the last one's
//     duration after it started: snapshots take at most a tenth of the
//     time, however large the state. All time comes from the configured
//     clock, so a test drives the schedule with a fake clock.
//   - The retention period is applied every Schedule.PurgeEvery and before
//     every snapshot, in slices that hold requests for a bounded time
//     (coordinator.Purge), so memory holds about Retention + PurgeEvery of
//     finished tasks whatever the snapshot interval.
//   - One snapshot or purge runs at a time per host; a failed one is logged
//     and tried again after another period, not at every check.
package host
