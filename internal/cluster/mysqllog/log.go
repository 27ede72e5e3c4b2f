package mysqllog

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/groupcommit"
	"github.com/tenurehq/tenure/internal/wal"
)

// Defaults and limits of Options.
const (
	DefaultMaxRecordBytes     = 4 << 20
	DefaultMaxBatchBytes      = 4 << 20
	DefaultMaxBatchRecords    = 1000
	DefaultReplayPageRecords  = 1000
	DefaultStatementTimeout   = 30 * time.Second
	DefaultSnapshotChunkBytes = 4 << 20
	DefaultDeleteBatchRows    = 10_000

	maxMaxRecordBytes     = 64 << 20
	maxMaxBatchBytes      = 64 << 20
	maxMaxBatchRecords    = 10_000
	maxReplayPageRecords  = 100_000
	maxSnapshotChunkBytes = 64 << 20
	maxDeleteBatchRows    = 100_000
	rowOverheadBytes      = 64
)

// Errors.
var (
	// ErrFenced: another writer took over the partition (its epoch moved on,
	// or a row at one of our LSNs exists). Fatal and sticky.
	ErrFenced = errors.New("mysqllog: fenced: the partition has a newer owner")
	// ErrClosed is returned after Close; it and the two below are the
	// group-commit core's, as the file WAL's are.
	ErrClosed = groupcommit.ErrClosed
	// ErrTooLarge is returned by Append for a payload over MaxRecordBytes.
	ErrTooLarge = groupcommit.ErrTooLarge
	// ErrInvalidEntry is returned by Append for type 0, which is reserved.
	ErrInvalidEntry = groupcommit.ErrInvalidEntry
	// ErrCorrupt is returned by Replay for rows that break the log's rules.
	ErrCorrupt = errors.New("mysqllog: corrupt log")
	// ErrNoPartition is returned by Open for an unknown partition id.
	ErrNoPartition = errors.New("mysqllog: no such partition")
	// ErrNoSnapshot is returned by SnapshotStore for a snapshot that does
	// not exist, is incomplete, or was discarded.
	ErrNoSnapshot = errors.New("mysqllog: no such snapshot")
)

// Options configure a Log. Zero fields take their defaults.
type Options struct {
	MaxRecordBytes    int           // largest payload, default 4 MiB, at most 64 MiB
	MaxBatchBytes     int           // payload bytes per round, default 4 MiB, at most 64 MiB
	MaxBatchRecords   int           // records per round, default 1000, at most 10,000
	ReplayPageRecords int           // rows per Replay query, default 1000, at most 100,000
	StatementTimeout  time.Duration // per statement or transaction, default 30 s
	// SnapshotChunkBytes is the size of the rows a SnapshotStore cuts a
	// snapshot into (default 4 MiB, at most 64 MiB). Reading accepts any
	// chunk size up to 64 MiB, whatever wrote it.
	SnapshotChunkBytes int
	// DeleteBatchRows is how many rows one transaction of DeleteBefore
	// deletes at most (default 10,000, at most 100,000).
	DeleteBatchRows int
	Logger          *slog.Logger
	// Clock times the operations the log reports (default clock.Real).
	Clock clock.Clock
	// Observer, if set, is told of every committed round (metrics).
	Observer Observer
}

// Observer is told of a log's commits, for metrics. The writer goroutine of
// each partition's log calls it after every round: it must be cheap and must
// not block.
type Observer interface {
	// Committed: one round of records (the epoch check and the insert of
	// its row, one statement that commits itself) took took.
	Committed(records int, took time.Duration)
}

// settings are o's numeric options with their defaults and limits.
func (o *Options) settings() []groupcommit.Setting {
	type n = groupcommit.Number[int]
	return []groupcommit.Setting{
		n{Field: "MaxRecordBytes", Value: &o.MaxRecordBytes, Default: DefaultMaxRecordBytes, Min: 1, Max: maxMaxRecordBytes},
		n{Field: "MaxBatchBytes", Value: &o.MaxBatchBytes, Default: DefaultMaxBatchBytes, Min: 1, Max: maxMaxBatchBytes},
		n{Field: "MaxBatchRecords", Value: &o.MaxBatchRecords, Default: DefaultMaxBatchRecords, Min: 1, Max: maxMaxBatchRecords},
		n{Field: "ReplayPageRecords", Value: &o.ReplayPageRecords, Default: DefaultReplayPageRecords, Min: 1, Max: maxReplayPageRecords},
		n{Field: "SnapshotChunkBytes", Value: &o.SnapshotChunkBytes, Default: DefaultSnapshotChunkBytes, Min: 1, Max: maxSnapshotChunkBytes},
		n{Field: "DeleteBatchRows", Value: &o.DeleteBatchRows, Default: DefaultDeleteBatchRows, Min: 1, Max: maxDeleteBatchRows},
		groupcommit.Number[time.Duration]{Field: "StatementTimeout", Value: &o.StatementTimeout, Default: DefaultStatementTimeout, Min: time.Millisecond, Max: time.Hour},
	}
}

func (o Options) withDefaults() Options {
	groupcommit.SetDefaults(o.settings()...)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return o
}

func (o Options) validate() error { return groupcommit.CheckSettings("mysqllog", o.settings()...) }

// packetBytes is the largest statement a round, or the insert of a
// snapshot chunk, can send.
func (o Options) packetBytes() int {
	return 2*max(o.MaxBatchBytes, o.MaxRecordBytes, o.SnapshotChunkBytes) + rowOverheadBytes*o.MaxBatchRecords + 4096
}

// Log is one partition's log. Its methods are safe for concurrent use.
type Log struct {
	db    *sql.DB
	id    uint64
	epoch uint64
	opts  Options

	// gc is the group-commit core: LSNs, the queue of records for the
	// writer, the round loop, DurableLSN and its waiters, the sticky error.
	gc *groupcommit.Core
	// pending holds the records the writer has not taken yet (the core's
	// queue); gc's lock guards it.
	pending []wal.Entry
	// first is the first LSN the log still holds (partition_log_start),
	// raised by DeleteBefore under compactMu.
	first     atomic.Uint64
	compactMu sync.Mutex

	// Owned by the writer goroutine.
	batch []wal.Entry // the round being written (Take, Write)
	buf   []byte      // the round's row, reused

	rounds, records atomic.Uint64
}

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	Rounds  uint64 // committed transactions (one per round)
	Records uint64 // records committed
}

// Stats returns the counters since Open.
func (l *Log) Stats() Stats {
	return Stats{Rounds: l.rounds.Load(), Records: l.records.Load()}
}

// Open opens the log of the partition with the given id (partitions.id) for
// a writer at epoch, which must be the partition's epoch now (ErrFenced
// otherwise). It reads where the log starts and ends and starts the writer
// goroutine, which runs until Close or a fatal error. db should come from
// cluster.OpenDB.
//
// The log starts at FirstLSN: partition_log_start.first_lsn, or 1 for a
// log never compacted. It ends at LastLSN, the largest of the last row's
// LSN, FirstLSN-1 and the newest complete snapshot's LSN, so that a log
// whose every row was deleted (all replaced by a snapshot) still continues
// after them. A log opened on a compacted partition needs
// coordinator.Recover (the newest usable snapshot, then the rows after it);
// coordinator.Open replays from LSN 1 and fails with wal.ErrCompacted.
func Open(ctx context.Context, db *sql.DB, partitionID, epoch uint64, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	l := &Log{db: db, id: partitionID, epoch: epoch, opts: opts}
	gc, err := groupcommit.New(groupcommit.Options{
		Name:           "mysqllog",
		MaxRecordBytes: opts.MaxRecordBytes,
		MaxBatchBytes:  opts.MaxBatchBytes,
		Clock:          opts.Clock,
		Failed: func(err error) {
			lvl := slog.LevelError
			if errors.Is(err, ErrFenced) {
				lvl = slog.LevelWarn
			}
			opts.Logger.Log(context.Background(), lvl, "mysqllog: log failed; stop serving the partition",
				slog.Uint64("partition", partitionID), slog.Uint64("epoch", epoch), slog.Any("err", err))
		},
	})
	if err != nil {
		return nil, err
	}
	l.gc = gc
	ctx, cancel := context.WithTimeout(ctx, opts.StatementTimeout)
	defer cancel()
	var have uint64
	err = db.QueryRowContext(ctx, "SELECT epoch FROM partitions WHERE id = ?", partitionID).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d", ErrNoPartition, partitionID)
	}
	if err != nil {
		return nil, fmt.Errorf("mysqllog: open partition %d: %w", partitionID, err)
	}
	if have != epoch {
		return nil, fmt.Errorf("%w: partition %d is at epoch %d, the writer has epoch %d", ErrFenced, partitionID, have, epoch)
	}
	var packet int
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&packet); err != nil {
		return nil, fmt.Errorf("mysqllog: open partition %d: reading max_allowed_packet: %w", partitionID, err)
	}
	if need := opts.packetBytes(); packet < need {
		return nil, fmt.Errorf("mysqllog: the server's max_allowed_packet is %d bytes; Options (MaxBatchBytes %d, MaxRecordBytes %d, SnapshotChunkBytes %d) need %d: raise it or lower them",
			packet, opts.MaxBatchBytes, opts.MaxRecordBytes, opts.SnapshotChunkBytes, need)
	}
	var start, lastSnap sql.Null[uint64]
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT first_lsn FROM partition_log_start WHERE partition_id = ?),
		(SELECT MAX(lsn) FROM partition_snapshots WHERE partition_id = ? AND discarded_at IS NULL)`,
		partitionID, partitionID).Scan(&start, &lastSnap); err != nil {
		return nil, fmt.Errorf("mysqllog: open partition %d: reading where the log starts and ends: %w", partitionID, err)
	}
	_, lastRow, _, err := lastRowBelow(ctx, db, partitionID, math.MaxUint64)
	if err != nil {
		return nil, fmt.Errorf("mysqllog: open partition %d: reading its last row: %w", partitionID, err)
	}
	first := max(start.V, 1)
	last := max(lastRow, first-1, lastSnap.V)
	l.first.Store(first)
	opts.Logger.Info("mysqllog: opened", slog.Uint64("partition", partitionID), slog.Uint64("epoch", epoch),
		slog.Uint64("first_lsn", first), slog.Uint64("last_lsn", last))
	gc.Start(last, writer{l})
	return l, nil
}

// lastRowBelow returns the last row of the partition with an LSN below
// below: its LSN and the LSN of its last record (a round's); ok is false
// without one.
func lastRowBelow(ctx context.Context, q queryer, partitionID, below uint64) (lsn, end uint64, ok bool, err error) {
	var typ uint16
	var head []byte
	err = q.QueryRowContext(ctx, "SELECT lsn, type, SUBSTRING(payload, 1, ?) FROM partition_log WHERE partition_id = ? AND lsn < ? ORDER BY lsn DESC LIMIT 1",
		binary.MaxVarintLen64, partitionID, below).Scan(&lsn, &typ, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	n, err := rowRecords(lsn, typ, head)
	if err != nil {
		return 0, 0, false, err
	}
	return lsn, lsn + n - 1, true, nil
}

// PartitionID is the partition's id.
func (l *Log) PartitionID() uint64 { return l.id }

// Epoch is the epoch the log writes at.
func (l *Log) Epoch() uint64 { return l.epoch }

// Append assigns the next dense LSNs to entries, in order, queues them for
// the writer and returns the last LSN. The records are NOT durable yet:
// Wait for them. Append copies the payloads. It blocks only while
// 4×MaxBatchBytes are queued. It returns the sticky fatal error once the
// log has failed, ErrClosed after Close, ErrTooLarge or ErrInvalidEntry
// for a bad entry; then nothing was appended.
func (l *Log) Append(entries []wal.Entry) (lastLSN uint64, err error) {
	need, err := l.gc.Check(entries)
	if err != nil {
		return 0, err
	}
	// The log keeps the payloads until their round is written: one copy of
	// them all for the call, not an allocation per record, made before
	// the lock.
	held := make([]byte, 0, need)
	for _, e := range entries {
		held = append(held, e.Payload...)
	}
	return l.gc.Append(len(entries), need, func(uint64) {
		l.pending = slices.Grow(l.pending, len(entries))
		for _, e := range entries {
			end := len(e.Payload)
			l.pending = append(l.pending, wal.Entry{Type: e.Type, Payload: held[:end:end]})
			held = held[end:]
		}
	})
}

// Wait blocks until every LSN up to lsn is durable (committed). It returns
// nil at once if that is already so, even after a failure or Close;
// otherwise the sticky fatal error, ErrClosed, an error for an LSN never
// assigned, or ctx.Err().
func (l *Log) Wait(ctx context.Context, lsn uint64) error { return l.gc.Wait(ctx, lsn) }

// LastLSN is the last LSN handed out (0 for an empty log).
func (l *Log) LastLSN() uint64 { return l.gc.LastLSN() }

// FirstLSN is the first LSN the log still holds: 1 until DeleteBefore
// deleted rows, then the LSN after the last row deleted (LastLSN+1 when
// every row was). It is never 0, and Replay(FirstLSN(), ...) is always
// valid. coordinator.Recover reads it to choose a snapshot.
func (l *Log) FirstLSN() uint64 { return l.first.Load() }

// DurableLSN is the last committed LSN.
func (l *Log) DurableLSN() uint64 { return l.gc.DurableLSN() }

// Err is the sticky fatal error, nil while the log is healthy.
func (l *Log) Err() error { return l.gc.Err() }

// Close stops accepting appends, commits everything appended before it
// and stops the writer. It returns the sticky fatal error if the log
// failed; calling it again returns the same.
func (l *Log) Close() error {
	l.gc.Close()
	return l.gc.Err()
}

// writer is the log's side of the group-commit core's round loop
// (groupcommit.Writer): one statement per round (writeOnce).
type writer struct{ *Log }

// Take takes a round of at most MaxBatchRecords records and MaxBatchBytes
// of payload (at least one record, whatever its size).
func (w writer) Take(_, queued uint64) (uint64, int) {
	n, bytes := 0, 0
	for n < len(w.pending) && n < w.opts.MaxBatchRecords {
		b := len(w.pending[n].Payload)
		if n > 0 && bytes+b > w.opts.MaxBatchBytes {
			break
		}
		n, bytes = n+1, bytes+b
	}
	if uint64(len(w.pending)) != queued {
		panic(fmt.Sprintf("mysqllog: internal error: %d records queued, the core counts %d", len(w.pending), queued))
	}
	w.batch = w.pending[:n:n]
	w.pending = w.pending[n:]
	if len(w.pending) == 0 {
		w.pending = nil // let the backing array go with the batch
	}
	return uint64(n), bytes
}

// Write commits the round.
func (w writer) Write(first, _ uint64) error {
	start := w.opts.Clock.Now()
	err := w.write(first, w.batch)
	if err == nil && w.opts.Observer != nil {
		w.opts.Observer.Committed(len(w.batch), w.opts.Clock.Now().Sub(start))
	}
	if err == nil {
		w.rounds.Add(1)
		w.records.Add(uint64(len(w.batch)))
	}
	w.batch = nil
	return err
}

// Drain has nothing to do: a committed round is durable.
func (writer) Drain() error { return nil }

// maxRoundTries bounds the tries of one round that the database rolled
// back and said so (cluster.IsRetryable).
const maxRoundTries = 3

// write commits one round: the epoch check and the INSERT of its row, one
// statement (writeOnce). A try the database rolled back and said so is
// tried again: on Galera a conflicting write committed through another
// node first (certification failure or brute-force abort, error 1213,
// where a single server would have answered 1062 or made the epoch read
// wait). The retry's statement begins with a causal wait (cluster.OpenDB:
// an INSERT waits for wsrep_sync_wait), so if that write was a new
// owner's — its new epoch, or its fence at our round's LSN — the retry
// fails with ErrFenced; if it was not, the retry commits.
func (l *Log) write(first uint64, batch []wal.Entry) error {
	if need := roundBytes(batch); cap(l.buf) < need || cap(l.buf) > 4*need+64<<10 {
		l.buf = make([]byte, 0, need) // neither regrown in the round nor kept far larger than rounds are
	}
	l.buf = appendRound(l.buf[:0], batch)
	var err error
	for try := 1; try <= maxRoundTries; try++ {
		if err = l.writeOnce(first, len(batch), l.buf); !cluster.IsRetryable(err) {
			return err
		}
		l.opts.Logger.Info("mysqllog: the database rolled the round back; trying it again",
			slog.Uint64("partition", l.id), slog.Int("try", try), slog.Any("err", err))
	}
	return err
}

// insertRound inserts a round's row if the partition is still at the
// writer's epoch, reading the partition's row with FOR UPDATE: it holds
// that row until the statement's transaction ends (the statement commits
// itself: OpenDB's sessions run with autocommit on), so an owner change
// waits for the round, and the round commits before the change or not at
// all. Each connection prepares it once (cluster.Prepared): the server
// never parses a round's text, and the row's bytes travel as they are.
// Arguments: lsn, payload, partition id, epoch.
const insertRound = cluster.Prepared + "INSERT INTO partition_log (partition_id, lsn, type, payload) SELECT id, ?, 0, ? FROM partitions WHERE id = ? AND epoch = ? FOR UPDATE"

// writeOnce is one try of write: the row of the round of n records from
// first, inserted only at the writer's epoch, in one statement that is its
// own transaction (insertRound, in autocommit): the epoch check, the
// insert and the commit are one round trip to the database, where BEGIN,
// the statement and COMMIT were three (docs/design/cluster.md, "One statement
// per round"). The row's primary key is (partition, first): a row another
// writer put at first fences the round (every writer's rounds start where
// the log's committed records end, so two writers that both think they
// own the partition collide at the first LSN after them). An error other
// than a duplicate key or a rollback the database announced leaves the
// outcome unknown (the connection may have broken after the commit), and
// like every write error it is fatal: reopening and replaying shows what
// was committed.
func (l *Log) writeOnce(first uint64, n int, row []byte) error {
	last := first + uint64(n) - 1
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.StatementTimeout)
	defer cancel()
	fail := func(what string, err error) error {
		return fmt.Errorf("mysqllog: partition %d, lsns %d..%d: %s: %w", l.id, first, last, what, err)
	}
	res, err := l.db.ExecContext(ctx, insertRound, first, row, l.id, l.epoch)
	if err != nil {
		if cluster.IsDuplicateKey(err) {
			return fmt.Errorf("%w: partition %d: a row at lsn %d was written by another writer; lsns %d..%d not written",
				ErrFenced, l.id, first, first, last)
		}
		if cluster.IsRetryable(err) {
			return fail("insert rolled back by the database", err)
		}
		return fail("insert and commit (outcome unknown; reopen to see what was committed)", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		// Not at our epoch (or gone): say which, as the check reads it.
		what := fmt.Sprintf("lsns %d..%d not written", first, last)
		if err := checkEpoch(ctx, l.db, l.id, l.epoch, false, what); err != nil {
			return err
		}
		return fail("insert", fmt.Errorf("%d rows inserted, want 1 (%v)", n, err))
	}
	return nil
}

// Replay calls fn for every durable record with an LSN >= from (0 means 1),
// in order, up to DurableLSN as of the call. fn must not keep e.Payload.
// It returns fn's error unwrapped; an error wrapping wal.ErrCompacted if
// from is below FirstLSN, or if DeleteBefore deleted rows the replay had
// not reached yet (possibly after fn saw some); ErrCorrupt for any other
// missing row or a bad row.
func (l *Log) Replay(from uint64, fn func(lsn uint64, e wal.Entry) error) error {
	from = max(from, 1)
	limit := l.gc.DurableLSN()
	if first := l.first.Load(); from < first {
		return fmt.Errorf("mysqllog: partition %d: replay from lsn %d, but the log starts at lsn %d (the records before it were replaced by a snapshot): %w",
			l.id, from, first, wal.ErrCompacted)
	}
	next := from
	for next <= limit {
		n, err := l.replayPage(next, limit, fn)
		if g, ok := err.(gapError); ok {
			return l.gap(g.want, g.found)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return l.gap(next, 0)
		}
		next += uint64(n)
	}
	return nil
}

// gapError is replayPage's report of a missing row: want is missing, found
// the next row (0 for none).
type gapError struct{ want, found uint64 }

func (g gapError) Error() string { return fmt.Sprintf("lsn %d is missing", g.want) }

// gap explains a missing row: compaction deleted it (wal.ErrCompacted) or
// the log is damaged (ErrCorrupt). partition_log_start is raised in the
// transaction that deletes, so it says which, even while FirstLSN has not
// caught up yet.
func (l *Log) gap(want, found uint64) error {
	next := "no later row up to the durable lsn"
	if found != 0 {
		next = fmt.Sprintf("the next row is lsn %d", found)
	}
	first := l.first.Load()
	if want >= first {
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.StatementTimeout)
		defer cancel()
		var start sql.Null[uint64]
		err := l.db.QueryRowContext(ctx, "SELECT first_lsn FROM partition_log_start WHERE partition_id = ?", l.id).Scan(&start)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("mysqllog: partition %d: lsn %d is missing (%s), and reading where the log starts failed: %w", l.id, want, next, err)
		}
		first = max(first, start.V)
	}
	if want < first {
		return fmt.Errorf("mysqllog: partition %d: lsn %d was deleted during the replay (the log now starts at lsn %d): %w",
			l.id, want, first, wal.ErrCompacted)
	}
	return fmt.Errorf("%w: partition %d: lsn %d is missing (%s)", ErrCorrupt, l.id, want, next)
}

// replayPage replays the records of up to one page of rows from next (the
// first row is the one that holds next) and returns how many records it
// visited.
func (l *Log) replayPage(next, limit uint64, fn func(uint64, wal.Entry) error) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.StatementTimeout)
	defer cancel()
	rows, err := l.db.QueryContext(ctx, `SELECT lsn, type, payload FROM partition_log
		WHERE partition_id = ? AND lsn <= ? AND lsn >= (SELECT COALESCE(MAX(lsn), 0) FROM partition_log WHERE partition_id = ? AND lsn <= ?)
		ORDER BY lsn LIMIT ?`,
		l.id, limit, l.id, next, l.opts.ReplayPageRecords)
	if err != nil {
		return 0, fmt.Errorf("mysqllog: replay partition %d from lsn %d: %w", l.id, next, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var lsn uint64
		var typ uint16
		var payload sql.RawBytes // valid until the next Next: fn must not keep it
		if err := rows.Scan(&lsn, &typ, &payload); err != nil {
			return 0, fmt.Errorf("mysqllog: replay partition %d: %w", l.id, err)
		}
		want := next + uint64(n)
		if lsn > want {
			return 0, gapError{want: want, found: lsn}
		}
		if lsn < want && n > 0 {
			return 0, fmt.Errorf("%w: partition %d: the row at lsn %d overlaps the records before lsn %d", ErrCorrupt, l.id, lsn, want)
		}
		err := RowRecords(lsn, typ, payload, l.opts.MaxRecordBytes, func(at uint64, e wal.Entry) error {
			if at < want || at > limit {
				return nil // before the replay's start, in the row that holds it; or not durable when it began
			}
			n++
			return fn(at, e)
		})
		if errors.Is(err, ErrCorrupt) {
			return 0, fmt.Errorf("partition %d: %w", l.id, err)
		}
		if err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("mysqllog: replay partition %d: %w", l.id, err)
	}
	return n, nil
}
