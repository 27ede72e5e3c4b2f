package mysqllog_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/logtest"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

var _ coordinator.Log = (*mysqllog.Log)(nil)

const testMaxRecordBytes = 64 << 10

var queueSeq atomic.Int64

// newPartition creates a one-partition queue and returns its id, at
// epoch 0 (unassigned).
func newPartition(t testing.TB, db *sql.DB) uint64 {
	t.Helper()
	ctx := context.Background()
	q := fmt.Sprint("q", queueSeq.Add(1))
	s := partition.New(db)
	if err := s.EnsureQueue(ctx, "ns", q, 1); err != nil {
		t.Fatal(err)
	}
	a, err := s.Get(ctx, partitionKey(q))
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}

func epochOf(t *testing.T, db *sql.DB, id uint64) uint64 {
	t.Helper()
	var e uint64
	if err := db.QueryRow("SELECT epoch FROM partitions WHERE id = ?", id).Scan(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// reassign is the coordinator moving the partition to a new owner: the
// epoch grows by one.
func reassign(t *testing.T, db *sql.DB, id uint64, owner string) uint64 {
	t.Helper()
	if _, err := db.Exec("UPDATE partitions SET owner_node_id = ?, epoch = epoch + 1 WHERE id = ?", owner, id); err != nil {
		t.Fatal(err)
	}
	return epochOf(t, db, id)
}

// ownedPartition makes a database of the test's own with a one-partition
// queue, moves the partition to node-a, and returns the database, the
// partition's id and node-a's epoch.
func ownedPartition(t *testing.T) (db *sql.DB, id, epoch uint64) {
	t.Helper()
	_, db = clustertest.DB(t)
	id = newPartition(t, db)
	return db, id, reassign(t, db, id, "node-a")
}

func openLog(t testing.TB, db *sql.DB, id, epoch uint64, opts mysqllog.Options) *mysqllog.Log {
	t.Helper()
	if opts.MaxRecordBytes == 0 {
		opts.MaxRecordBytes = testMaxRecordBytes
	}
	l, err := mysqllog.Open(context.Background(), db, id, epoch, opts)
	if err != nil {
		t.Fatalf("mysqllog.Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) {
	_, db := clustertest.DB(t)
	logtest.Run(t, logtest.Subject{
		MaxRecordBytes: testMaxRecordBytes,
		New: func(t *testing.T) logtest.Instance {
			id := newPartition(t, db)
			return logtest.Instance{
				// Opens as the partition's current owner, whatever its epoch.
				Open: func(t *testing.T) logtest.Log {
					l, err := mysqllog.Open(context.Background(), db, id, epochOf(t, db, id), mysqllog.Options{MaxRecordBytes: testMaxRecordBytes})
					if err != nil {
						t.Fatalf("mysqllog.Open: %v", err)
					}
					return l
				},
				// The coordinator gives the partition to another node.
				Break: func(t *testing.T) { reassign(t, db, id, "elsewhere") },
			}
		},
	})
}

func fence(t *testing.T, epoch uint64, node string) wal.Entry {
	t.Helper()
	typ, payload, err := record.Encode(nil, &state.Fence{Epoch: epoch, NodeID: node, At: state.TimeOf(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return wal.Entry{Type: uint16(typ), Payload: payload}
}

// newLog opens the log of a new partition, at epoch 0, on a new database.
func newLog(t testing.TB) (db *sql.DB, id uint64, l *mysqllog.Log) {
	t.Helper()
	_, db = clustertest.DB(t)
	id = newPartition(t, db)
	return db, id, openLog(t, db, id, 0, mysqllog.Options{})
}

func payloads(n int, tag string) []wal.Entry {
	es := make([]wal.Entry, n)
	for i := range es {
		es[i] = wal.Entry{Type: uint16(record.TypeTaskCreated), Payload: fmt.Appendf(nil, "%s-%d", tag, i)}
	}
	return es
}

func appendWait(t testing.TB, l *mysqllog.Log, es []wal.Entry) uint64 {
	t.Helper()
	last, err := l.Append(es)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	return last
}

type row struct {
	lsn uint64
	typ uint16
	val string
}

func replayAll(t *testing.T, l *mysqllog.Log) []row {
	t.Helper()
	var out []row
	if err := l.Replay(1, func(lsn uint64, e wal.Entry) error {
		out = append(out, row{lsn, e.Type, string(e.Payload)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The handover of a partition (docs/design/cluster.md, "Fencing"): B gains the partition (higher
// epoch), replays it, appends a Fence at the next LSN. A's next append
// fails with ErrFenced and A acknowledges nothing after.
func TestHandoverFencesPreviousOwner(t *testing.T) {
	t.Parallel()
	db, id, epochA := ownedPartition(t)
	a := openLog(t, db, id, epochA, mysqllog.Options{})
	lastA := appendWait(t, a, payloads(10, "a"))

	epochB := reassign(t, db, id, "node-b")
	b := openLog(t, db, id, epochB, mysqllog.Options{})
	if b.LastLSN() != lastA || len(replayAll(t, b)) != int(lastA) {
		t.Fatalf("node-b sees lsn %d, want %d", b.LastLSN(), lastA)
	}
	fenceLSN := appendWait(t, b, []wal.Entry{fence(t, epochB, "node-b")})
	if fenceLSN != lastA+1 {
		t.Fatalf("fence at lsn %d, want %d", fenceLSN, lastA+1)
	}

	// A does not know yet: its append gets the LSN B's fence holds.
	lsn, err := a.Append(payloads(3, "a-late"))
	if err != nil {
		t.Fatalf("Append is not expected to fail before the write: %v", err)
	}
	if err := a.Wait(context.Background(), lsn); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("node-a Wait after the handover = %v, want ErrFenced", err)
	}
	// Sticky: nothing more from A is accepted or acknowledged.
	if _, err := a.Append(payloads(1, "a-later")); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("node-a Append after being fenced = %v", err)
	}
	if err := a.Close(); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("node-a Close = %v", err)
	}
	// A's acknowledged records and B's fence, nothing else.
	rows := replayAll(t, b)
	if len(rows) != int(fenceLSN) || rows[fenceLSN-1].typ != uint16(record.TypeFence) {
		t.Fatalf("log after the handover: %+v", rows)
	}
	r, err := record.Decode(record.TypeFence, []byte(rows[fenceLSN-1].val))
	if err != nil || r.(*state.Fence).Epoch != epochB || r.(*state.Fence).NodeID != "node-b" {
		t.Fatalf("fence record = %+v, %v", r, err)
	}
	// B keeps writing.
	if got := appendWait(t, b, payloads(2, "b")); got != fenceLSN+2 {
		t.Fatalf("node-b appended at %d", got)
	}
}

// The primary key fences on its own: two writers at the same epoch (say
// the epoch check were stale) cannot both write an LSN; the loser's round
// fails whole with ErrFenced and is never acknowledged.
func TestPrimaryKeyFences(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	a := openLog(t, db, id, epoch, mysqllog.Options{})
	appendWait(t, a, payloads(5, "a"))
	b := openLog(t, db, id, epoch, mysqllog.Options{})
	fenceLSN := appendWait(t, b, []wal.Entry{fence(t, epoch, "node-b")})

	// A's round covers lsns 6..9, and 6 is taken: none of it is written.
	lsn, err := a.Append(payloads(4, "a-late"))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Wait(context.Background(), lsn)
	if !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("node-a Wait = %v, want ErrFenced", err)
	}
	if a.DurableLSN() != 5 {
		t.Fatalf("node-a DurableLSN = %d after being fenced, want 5", a.DurableLSN())
	}
	rows := replayAll(t, b)
	if len(rows) != int(fenceLSN) {
		t.Fatalf("the fenced round left rows: %+v", rows)
	}
}

// A round is one row, at the LSN of its first record: another writer's
// row there (its fence, as a record of the format before rounds) fences
// the whole round, and nothing of it is written.
func TestFencedRound(t *testing.T) {
	t.Parallel()
	db, id, l := newLog(t)
	appendWait(t, l, payloads(5, "a"))
	if _, err := db.Exec("INSERT INTO partition_log (partition_id, lsn, type, payload) VALUES (?, 6, 1, 'other')", id); err != nil {
		t.Fatal(err)
	}
	lsn, err := l.Append(payloads(7, "late"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Wait(context.Background(), lsn); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Wait = %v, want ErrFenced", err)
	}
	if got := logLSNs(t, db, id); len(got) != 6 {
		t.Fatalf("the log holds the records %v; want 1..5 and the other writer's 6", got)
	}
	if l.DurableLSN() != 5 {
		t.Fatalf("DurableLSN = %d after the fenced round, want 5", l.DurableLSN())
	}
}

// A round is one statement that commits itself, so it relies on
// autocommit; OpenDB turns it on whatever the DSN (or the server's
// default) says. A log on a pool whose DSN asks for autocommit=0 still
// commits every round it acknowledges: another pool, as another node,
// reads the rows as soon as Wait returns. Without OpenDB's setting the
// rounds would sit in a transaction the log never commits.
func TestRoundsCommitWhateverTheDSNSaysOfAutocommit(t *testing.T) {
	t.Parallel()
	dsn, db := clustertest.DB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["autocommit"] = "0"
	off := clustertest.Open(t, cfg.FormatDSN())
	id := newPartition(t, db)
	l := openLog(t, off, id, 0, mysqllog.Options{})
	appendWait(t, l, payloads(3, "a"))
	appendWait(t, l, payloads(2, "b"))
	if got := logLSNs(t, db, id); len(got) != 5 {
		t.Fatalf("another pool reads the records %v after Wait; want 1..5", got)
	}
}

// Group commit: one Append of many entries is one round, one statement;
// MaxBatchRecords splits it.
func TestGroupCommitRounds(t *testing.T) {
	t.Parallel()
	db, _, l := newLog(t)
	appendWait(t, l, payloads(500, "x"))
	if s := l.Stats(); s.Rounds != 1 || s.Records != 500 {
		t.Fatalf("Stats = %+v; want 500 records in 1 round", s)
	}
	small := openLog(t, db, newPartition(t, db), 0, mysqllog.Options{MaxBatchRecords: 100})
	appendWait(t, small, payloads(500, "y"))
	if s := small.Stats(); s.Rounds != 5 || s.Records != 500 {
		t.Fatalf("Stats = %+v; want 500 records in 5 rounds of 100", s)
	}
}

func TestOpenChecks(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	ctx := context.Background()
	if _, err := mysqllog.Open(ctx, db, id, epoch-1, mysqllog.Options{}); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Open at an old epoch = %v, want ErrFenced", err)
	}
	if _, err := mysqllog.Open(ctx, db, 1<<60, 0, mysqllog.Options{}); !errors.Is(err, mysqllog.ErrNoPartition) {
		t.Fatalf("Open of an unknown partition = %v", err)
	}
	if _, err := mysqllog.Open(ctx, db, id, epoch, mysqllog.Options{MaxBatchBytes: 64 << 20}); err == nil {
		t.Fatal("Open accepted batches larger than max_allowed_packet admits")
	}
	if _, err := mysqllog.Open(ctx, db, id, epoch, mysqllog.Options{MaxBatchRecords: -1}); err == nil {
		t.Fatal("Open accepted a negative MaxBatchRecords")
	}
}

// A hole in the rows is corruption, reported with its LSN.
func TestReplayDetectsGap(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	id := newPartition(t, db)
	l := openLog(t, db, id, 0, mysqllog.Options{ReplayPageRecords: 3})
	for _, n := range []int{2, 3, 1, 1, 3} { // rounds 1..2, 3..5, 6, 7, 8..10
		appendWait(t, l, payloads(n, "x"))
	}
	if got := replayAll(t, l); len(got) != 10 {
		t.Fatalf("paged replay saw %d records", len(got))
	}
	if _, err := db.Exec("DELETE FROM partition_log WHERE partition_id = ? AND lsn = 7", id); err != nil {
		t.Fatal(err)
	}
	err := l.Replay(1, func(uint64, wal.Entry) error { return nil })
	if !errors.Is(err, mysqllog.ErrCorrupt) {
		t.Fatalf("Replay over a hole = %v, want ErrCorrupt", err)
	}
}

func partitionKey(q string) (k cluster.PartitionKey) {
	k.Namespace, k.Queue, k.Partition = "ns", q, 0
	return k
}

// The coordinator runs on the MySQL log as on the file WAL: node-a serves
// the partition, node-b gains it, fences it and replays node-a's tasks.
func TestCoordinatorOnMySQLLog(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	ctx := context.Background()
	la := openLog(t, db, id, epoch, mysqllog.Options{})
	ca, err := coordinator.Open(ctx, la, coordinator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 20 {
		res, err := ca.Submit(ctx, coordinator.SubmitRequest{Queue: "q", Payload: fmt.Appendf(nil, "task %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}

	epochB := reassign(t, db, id, "node-b")
	lb := openLog(t, db, id, epochB, mysqllog.Options{})
	appendWait(t, lb, []wal.Entry{fence(t, epochB, "node-b")})
	cb, err := coordinator.Open(ctx, lb, coordinator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range ids {
		if _, err := cb.Get(ctx, tid); err != nil {
			t.Fatalf("node-b lost task %s: %v", tid, err)
		}
	}
	// node-a's next decision is refused: it can no longer acknowledge.
	if _, err := ca.Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err == nil {
		t.Fatal("the deposed coordinator acknowledged a submit")
	}
	cb.Close()
	ca.Close()
}
