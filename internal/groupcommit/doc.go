// Package groupcommit is the group-commit core that both of tenure's logs
// run on: the embedded file WAL (internal/wal) and the cluster's MySQL log
// (internal/cluster/mysqllog). The logs differ in what a round writes (a
// segment write and an fsync; one INSERT that commits itself); everything
// around that is here, written once:
//
//   - LSNs: Append assigns the next dense LSNs to a call's entries, in call
//     order, and hands them to the log (the add callback, under the core's
//     lock) to queue however it stores them.
//   - Backpressure: Append blocks while more than PendingBatches ×
//     MaxBatchBytes are queued for the writer (a call that finds the queue
//     empty is always taken, whatever its size).
//   - The round loop: one writer goroutine, from Start until Close or a
//     failure, waits for work, asks the log to take a round off the queue
//     (Writer.Take, under the lock, so that Append goes on filling the queue
//     while the round is written), writes it (Writer.Write, outside the
//     lock) and advances the durable LSN. Appends made while a round is
//     written go out together in the next: batches grow with the load.
//   - CommitInterval: a round that would start within the interval after
//     a round that carried more than one Append call (a sign of concurrent
//     callers) waits out the rest first, so that more calls share its
//     write; Close cuts the wait short.
//   - Waiters: Wait(lsn) returns once every LSN up to lsn is durable. The
//     waiters share one channel, closed and replaced when the durable LSN
//     moves (only if somebody waits), so a round wakes them all with one
//     close whatever their number.
//   - The failure latch: the first failed round is fatal and sticky. The
//     writer stops; DurableLSN never passes the failed round; every pending
//     and later Append and Wait (for an LSN not durable) returns the error,
//     and the log is told once (Options.Failed) to report it. The owner
//     closes the log and opens it again to read what is durable.
//   - Close: no Append is taken after it; everything appended before it is
//     written (and Writer.Drain makes it durable), then the writer stops.
//     Wait for an LSN that never became durable returns ErrClosed.
//
// The core knows nothing of files or databases. Its clock is injected
// (internal/clock), so the commit interval is tested on a fake clock.
package groupcommit
