// Package events serves a partition's log as a stream of events
// (docs/design/events.md): the cursor a stream resumes from, the feed of
// each partition — its most recent durable records in memory, handed over
// by the log's writer right after each group commit, and the log itself
// behind them for a stream that falls behind — and the reading of several
// partitions in turn.
//
// What it promises:
//
//   - Only durable records are read, each partition's in LSN order, each
//     exactly once per stream: a stream's position in a partition moves by
//     one record at a time, and a cursor names only positions read.
//   - The log's writer never waits for a stream: Publish copies a write's
//     records into the feed's ring under a lock that readers hold only to
//     take references, and wakes waiting streams without blocking. While no
//     stream reads a partition, the writer does nothing but one atomic load
//     per write.
//   - A stream that falls behind the ring reads the log from its position,
//     and comes back to the ring when it catches up: what it holds is one
//     batch and its reader's buffer, however far behind it is.
//   - A position older than the log's first record is refused with the
//     oldest position available (ExpiredError), never moved forward
//     silently; one past the log's end is refused too (AheadError).
//
// The package knows records only as typed bytes (wal.Entry): decoding,
// filtering and the API's messages are the server's.
package events
