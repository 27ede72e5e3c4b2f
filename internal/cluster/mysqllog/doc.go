// Package mysqllog is one partition's write-ahead log kept in the database
// (cluster mode, docs/design/cluster.md): a coordinator.Log whose records, dense
// LSNs from 1, are kept in rows of partition_log keyed by (partition_id,
// lsn): one row per group-commit round, at the LSN of its first record
// (type 0; docs/design/formats.md), or, as tenure wrote them before schema
// migration 4, one row per record (its type, never 0). Replay reads both.
//
// # Durability and group commit
//
// Append assigns LSNs and queues the records in memory; it does not write.
// One writer goroutine (internal/groupcommit's round loop, which the file
// WAL shares) takes everything queued since its last round (up to
// MaxBatchRecords and MaxBatchBytes) and writes it in ONE statement, its
// own transaction (the sessions of cluster.OpenDB run in autocommit): the
// INSERT of the round's one row, which checks the epoch as it inserts, a
// statement prepared once per connection (cluster.Prepared): the server
// never parses a round's text, and the row travels unescaped in the
// binary protocol. A round is one round trip to the database. When the
// statement commits, every LSN in it is durable and Wait returns for it;
// if it fails, nothing of it is written. While a round commits, appends collect
// for the next, so rounds grow with the load without a timer. A record is
// durable exactly when the database has committed it (with
// innodb_flush_log_at_trx_commit=1, the server's default, that survives a
// crash of the database server too).
//
// # Fencing
//
// The log is opened at the partition's epoch (partitions.epoch, bumped at
// each change of owner). Every round inserts its row with INSERT … SELECT
// … FROM partitions … FOR UPDATE, one statement that reads that epoch,
// locks the partition's row until the statement commits (an owner change
// waits for the round) and inserts nothing unless the epoch is still the
// log's: once the coordinator reassigns the partition, the old owner's
// next round fails. Independently, the primary key fences by itself: the new owner
// replays the partition and appends a Fence record at the next LSN, and
// the old owner's next round begins at that same LSN (every writer's
// rounds begin where the committed records end), so its row collides with
// the new owner's. Either way the error wraps
// ErrFenced, and it is fatal and sticky, as every write error is: nothing
// in or after the failed round is ever acknowledged, every later Append and
// Wait returns the error, and the owner stops serving the partition. A
// round whose outcome is unknown (the connection broke during it) is
// fatal in the same way; reopening and replaying shows what was committed.
//
// On a replicated database (Galera) the old owner's round and the new
// owner's write can run on different servers at once; the database then
// rolls one back with a certification failure (error 1213) rather than a
// duplicate key. A round rolled back and said so is tried again (at most 3
// times); the retry's statement begins with a causal wait (an INSERT
// waits for wsrep_sync_wait), so its epoch check and its insert meet the
// new owner's writes: ErrFenced, as on one server.
//
// # Replay
//
// Replay reads the durable rows in LSN order, ReplayPageRecords rows per
// query, from the row that holds its first LSN, and checks that the rows'
// records are dense, that each round decodes whole, types are non-zero and
// payloads within MaxRecordBytes; a violation is ErrCorrupt. Replay from below FirstLSN,
// or past rows that compaction deleted meanwhile, wraps wal.ErrCompacted.
//
// # Snapshots
//
// SnapshotStore (Log.Snapshots) is the partition's coordinator.SnapshotStore:
// the bytes of package snapshot, as embedded mode writes them to files, cut
// into rows of partition_snapshot_chunks of SnapshotChunkBytes (default
// 4 MiB), and one row of partition_snapshots that makes the snapshot
// visible, inserted last in the same transaction. Save, Remove and Discard
// are fenced like appends: the transaction reads the partition's epoch
// with FOR UPDATE before it commits and writes nothing unless it is still
// the store's (ErrFenced). Load checks the rows against the index row
// (count, length, CRC-32C) and snapshot.Decode checks the content; any
// problem is a *snapshot.CorruptError. Discard sets discarded_at and keeps
// the rows.
//
// # Compaction
//
// DeleteBefore (coordinator.Compactor) deletes the rows below a snapshot,
// DeleteBatchRows per transaction, each fenced like an append round, and
// never below the newest complete snapshot's LSN + 1. A round that holds
// records on both sides of the new start stays whole until a later
// snapshot covers it; replay skips its records below FirstLSN. In the transaction
// that deletes, partition_log_start.first_lsn records where the log now
// starts, which is FirstLSN. Open takes the last LSN as the largest of the
// last row's, FirstLSN-1 and the newest snapshot's, so a log whose every
// row was deleted continues after them. A compacted log must be opened
// with coordinator.Recover (newest usable snapshot, then the rows after
// it): a replay from LSN 1 fails with wal.ErrCompacted.
//
// # Limits
//
// A record's payload is at most MaxRecordBytes (default 4 MiB). A round
// holds at most MaxBatchRecords records (default 1000) and about
// MaxBatchBytes of payload (default 4 MiB; a larger single record goes
// alone). Open checks that the server's max_allowed_packet admits twice
// the larger of the two (and of SnapshotChunkBytes): statements that are
// not prepared escape their payloads into the text, which can double their
// size. Append blocks while
// 4×MaxBatchBytes are queued.
// Every statement has StatementTimeout (default 30 s).
package mysqllog
