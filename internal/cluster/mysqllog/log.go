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
	pendingBatches        = 4 // Append blocks beyond this many MaxBatchBytes queued
	rowOverheadBytes      = 64
)

// Errors.
var (
	// ErrFenced: another writer took over the partition (its epoch moved on,
	// or a row at one of our LSNs exists). Fatal and sticky.
	ErrFenced = errors.New("mysqllog: fenced: the partition has a newer owner")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("mysqllog: log closed")
	// ErrTooLarge is returned by Append for a payload over MaxRecordBytes.
	ErrTooLarge = errors.New("mysqllog: record too large")
	// ErrInvalidEntry is returned by Append for type 0, which is reserved.
	ErrInvalidEntry = errors.New("mysqllog: invalid entry")
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

func (o Options) withDefaults() Options {
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxBatchRecords == 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.ReplayPageRecords == 0 {
		o.ReplayPageRecords = DefaultReplayPageRecords
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	if o.SnapshotChunkBytes == 0 {
		o.SnapshotChunkBytes = DefaultSnapshotChunkBytes
	}
	if o.DeleteBatchRows == 0 {
		o.DeleteBatchRows = DefaultDeleteBatchRows
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return o
}

func (o Options) validate() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"MaxRecordBytes", o.MaxRecordBytes, maxMaxRecordBytes},
		{"MaxBatchBytes", o.MaxBatchBytes, maxMaxBatchBytes},
		{"MaxBatchRecords", o.MaxBatchRecords, maxMaxBatchRecords},
		{"ReplayPageRecords", o.ReplayPageRecords, maxReplayPageRecords},
		{"SnapshotChunkBytes", o.SnapshotChunkBytes, maxSnapshotChunkBytes},
		{"DeleteBatchRows", o.DeleteBatchRows, maxDeleteBatchRows},
	} {
		if f.v < 1 || f.v > f.max {
			return fmt.Errorf("mysqllog: Options.%s is %d; want 1 to %d", f.name, f.v, f.max)
		}
	}
	if o.StatementTimeout < time.Millisecond || o.StatementTimeout > time.Hour {
		return fmt.Errorf("mysqllog: Options.StatementTimeout is %v; want 1ms to 1h", o.StatementTimeout)
	}
	return nil
}

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

	mu           sync.Mutex
	workCond     sync.Cond // pending became non-empty, or closing was set
	spaceCond    sync.Cond // the writer took pending, failed or stopped
	pending      []wal.Entry
	pendingBytes int
	pendingFirst uint64
	closing      bool
	stopped      bool
	err          error // sticky
	notify       chan struct{}
	notifyUsed   bool

	lastLSN atomic.Uint64 // stored under mu
	durable atomic.Uint64 // stored under mu
	// first is the first LSN the log still holds (partition_log_start),
	// raised by DeleteBefore under compactMu.
	first     atomic.Uint64
	compactMu sync.Mutex

	done      chan struct{}
	closeOnce sync.Once

	buf []byte // the writer's round row, reused

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
	ctx, cancel := context.WithTimeout(ctx, opts.StatementTimeout)
	defer cancel()
	var have uint64
	err := db.QueryRowContext(ctx, "SELECT epoch FROM partitions WHERE id = ?", partitionID).Scan(&have)
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
	l := &Log{
		db:     db,
		id:     partitionID,
		epoch:  epoch,
		opts:   opts,
		notify: make(chan struct{}),
		done:   make(chan struct{}),
	}
	l.workCond.L = &l.mu
	l.spaceCond.L = &l.mu
	l.lastLSN.Store(last)
	l.durable.Store(last)
	l.first.Store(first)
	opts.Logger.Info("mysqllog: opened", slog.Uint64("partition", partitionID), slog.Uint64("epoch", epoch),
		slog.Uint64("first_lsn", first), slog.Uint64("last_lsn", last))
	go l.run()
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
	need := 0
	for i, e := range entries {
		if len(e.Payload) > l.opts.MaxRecordBytes {
			return 0, fmt.Errorf("%w: entry %d has a %d-byte payload, over Options.MaxRecordBytes = %d",
				ErrTooLarge, i, len(e.Payload), l.opts.MaxRecordBytes)
		}
		if e.Type == 0 {
			return 0, fmt.Errorf("%w: entry %d has type 0, which is reserved", ErrInvalidEntry, i)
		}
		need += len(e.Payload)
	}
	// The log keeps the payloads until their round is written: one copy of
	// them all for the call, not an allocation per record, made before
	// the lock.
	held := make([]byte, 0, need)
	for _, e := range entries {
		held = append(held, e.Payload...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.err != nil {
			return 0, l.err
		}
		if l.closing {
			return 0, ErrClosed
		}
		if len(l.pending) == 0 || l.pendingBytes+need <= pendingBatches*l.opts.MaxBatchBytes {
			break
		}
		l.spaceCond.Wait()
	}
	lsn := l.lastLSN.Load()
	if len(entries) == 0 {
		return lsn, nil
	}
	if len(l.pending) == 0 {
		l.pendingFirst = lsn + 1
	}
	l.pending = slices.Grow(l.pending, len(entries))
	for _, e := range entries {
		end := len(e.Payload)
		l.pending = append(l.pending, wal.Entry{Type: e.Type, Payload: held[:end:end]})
		held = held[end:]
	}
	l.pendingBytes += need
	lsn += uint64(len(entries))
	l.lastLSN.Store(lsn)
	l.workCond.Signal()
	return lsn, nil
}

// Wait blocks until every LSN up to lsn is durable (committed). It returns
// nil at once if that is already so, even after a failure or Close;
// otherwise the sticky fatal error, ErrClosed, an error for an LSN never
// assigned, or ctx.Err().
func (l *Log) Wait(ctx context.Context, lsn uint64) error {
	if lsn <= l.durable.Load() {
		return nil
	}
	l.mu.Lock()
	for {
		if lsn <= l.durable.Load() {
			l.mu.Unlock()
			return nil
		}
		if l.err != nil {
			err := l.err
			l.mu.Unlock()
			return err
		}
		last := l.lastLSN.Load()
		if l.stopped || (l.closing && lsn > last) {
			l.mu.Unlock()
			return ErrClosed
		}
		if lsn > last {
			l.mu.Unlock()
			return fmt.Errorf("mysqllog: wait for lsn %d, but the last assigned lsn is %d", lsn, last)
		}
		ch := l.notify
		l.notifyUsed = true
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
}

// LastLSN is the last LSN handed out (0 for an empty log).
func (l *Log) LastLSN() uint64 { return l.lastLSN.Load() }

// FirstLSN is the first LSN the log still holds: 1 until DeleteBefore
// deleted rows, then the LSN after the last row deleted (LastLSN+1 when
// every row was). It is never 0, and Replay(FirstLSN(), ...) is always
// valid. coordinator.Recover reads it to choose a snapshot.
func (l *Log) FirstLSN() uint64 { return l.first.Load() }

// DurableLSN is the last committed LSN.
func (l *Log) DurableLSN() uint64 { return l.durable.Load() }

// Err is the sticky fatal error, nil while the log is healthy.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close stops accepting appends, commits everything appended before it
// and stops the writer. It returns the sticky fatal error if the log
// failed; calling it again returns the same.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closing = true
		l.workCond.Signal()
		l.spaceCond.Broadcast()
		l.mu.Unlock()
	})
	<-l.done
	return l.Err()
}

// run is the writer goroutine: one statement per round (writeOnce).
func (l *Log) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closing {
			l.workCond.Wait()
		}
		if len(l.pending) == 0 {
			l.stopLocked(nil)
			l.mu.Unlock()
			return
		}
		n, bytes := 0, 0
		for n < len(l.pending) && n < l.opts.MaxBatchRecords {
			b := len(l.pending[n].Payload)
			if n > 0 && bytes+b > l.opts.MaxBatchBytes {
				break
			}
			n, bytes = n+1, bytes+b
		}
		batch, first := l.pending[:n:n], l.pendingFirst
		l.pending = l.pending[n:]
		if len(l.pending) == 0 {
			l.pending = nil // let the backing array go with the batch
		}
		l.pendingFirst += uint64(n)
		l.pendingBytes -= bytes
		l.spaceCond.Broadcast()
		l.mu.Unlock()

		start := l.opts.Clock.Now()
		err := l.write(first, batch)
		if err == nil && l.opts.Observer != nil {
			l.opts.Observer.Committed(n, l.opts.Clock.Now().Sub(start))
		}

		l.mu.Lock()
		if err != nil {
			l.pending = nil // nothing after a failed round is ever written
			l.stopLocked(err)
			l.mu.Unlock()
			return
		}
		l.rounds.Add(1)
		l.records.Add(uint64(n))
		l.durable.Store(first + uint64(n) - 1)
		l.wakeLocked()
		l.mu.Unlock()
	}
}

func (l *Log) stopLocked(err error) {
	if err != nil && l.err == nil {
		l.err = err
		lvl := slog.LevelError
		if errors.Is(err, ErrFenced) {
			lvl = slog.LevelWarn
		}
		l.opts.Logger.Log(context.Background(), lvl, "mysqllog: log failed; stop serving the partition",
			slog.Uint64("partition", l.id), slog.Uint64("epoch", l.epoch), slog.Any("err", err))
	}
	l.stopped = true
	l.spaceCond.Broadcast()
	l.wakeLocked()
}

func (l *Log) wakeLocked() {
	if l.notifyUsed {
		close(l.notify)
		l.notify = make(chan struct{})
		l.notifyUsed = false
	}
}

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
	limit := l.durable.Load()
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
