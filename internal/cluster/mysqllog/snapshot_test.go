package mysqllog_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

var (
	_ coordinator.SnapshotStore      = (*mysqllog.SnapshotStore)(nil)
	_ coordinator.Compactor          = (*mysqllog.Log)(nil)
	_ interface{ FirstLSN() uint64 } = (*mysqllog.Log)(nil)
)

// Small chunks, so that every snapshot of the tests spans many rows.
const testChunkBytes = 2 << 10

func snapOpts() mysqllog.Options {
	return mysqllog.Options{SnapshotChunkBytes: testChunkBytes}
}

func coordConfig(clk clock.Clock) coordinator.Config {
	return coordinator.Config{Clock: clk}
}

func newClock() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

// workload submits n tasks to c, leases a third of them and completes half
// of those: pending, leased and completed tasks, with payloads and results.
func workload(t *testing.T, c *coordinator.Coordinator, tag string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		_, err := c.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: fmt.Sprintf("%s-%d", tag, i),
			Payload: fmt.Appendf(nil, "%s-%d %s", tag, i, strings.Repeat("p", 200+i%50))})
		if err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w-" + tag, Queue: "q", MaxTasks: max(n/3, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if i%2 == 0 {
			if err := c.Complete(ctx, l.TaskID, l.LeaseID, fmt.Appendf(nil, "result of %s", l.TaskID)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func openCoord(t *testing.T, l coordinator.Log, clk clock.Clock) *coordinator.Coordinator {
	t.Helper()
	c, err := coordinator.Open(context.Background(), l, coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// worked is a partition owned by node-a, its log with snapshot options,
// and a coordinator on it, on clock clk, that ran a workload.
type worked struct {
	db  *sql.DB
	id  uint64
	l   *mysqllog.Log
	c   *coordinator.Coordinator
	clk *clock.Fake
}

// newWorked is a worked whose workload submitted tasks tasks; the test
// closes its coordinator.
func newWorked(t *testing.T, tasks int) worked {
	t.Helper()
	db, id, epoch := ownedPartition(t)
	w := worked{db: db, id: id, clk: newClock()}
	w.l = openLog(t, db, id, epoch, snapOpts())
	w.c = openCoord(t, w.l, w.clk)
	workload(t, w.c, "a", tasks)
	return w
}

func takeSnapshot(t *testing.T, c *coordinator.Coordinator, store coordinator.SnapshotStore, keep int) coordinator.SnapshotResult {
	t.Helper()
	res, err := c.Snapshot(context.Background(), coordinator.SnapshotConfig{Store: store, Keep: keep})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return res
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func logRows(t *testing.T, db *sql.DB, id uint64) int {
	return count(t, db, "SELECT COUNT(*) FROM partition_log WHERE partition_id = ?", id)
}

// logLSNs returns the LSNs of the records the partition's rows hold, in
// row order.
func logLSNs(t *testing.T, db *sql.DB, id uint64) []uint64 {
	t.Helper()
	rows, err := db.Query("SELECT lsn, type, payload FROM partition_log WHERE partition_id = ? ORDER BY lsn", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var lsn uint64
		var typ uint16
		var payload []byte
		if err := rows.Scan(&lsn, &typ, &payload); err != nil {
			t.Fatal(err)
		}
		if err := mysqllog.RowRecords(lsn, typ, payload, mysqllog.DefaultMaxRecordBytes, func(at uint64, _ wal.Entry) error {
			out = append(out, at)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func chunkRows(t *testing.T, db *sql.DB, id uint64) int {
	return count(t, db, "SELECT COUNT(*) FROM partition_snapshot_chunks WHERE partition_id = ?", id)
}

func exportEqual(t *testing.T, what string, got, want state.Export) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the state differs from the original (lsn %d, %d tasks; want lsn %d, %d tasks)",
			what, got.LastLSN, len(got.Tasks), want.LastLSN, len(want.Tasks))
	}
}

// A snapshot saved through coordinator.Snapshot, loaded by a new owner and
// replayed with the tail of the log gives back the original state, by
// OpenFrom and by Recover.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	w := newWorked(t, 60)
	db, id, la, ca, clk := w.db, w.id, w.l, w.c, w.clk
	ctx := context.Background()
	storeA := la.Snapshots()
	res := takeSnapshot(t, ca, storeA, 2)
	if res.LSN != la.LastLSN() || res.Tasks != 60 || res.Path != storeA.Name(res.LSN) {
		t.Fatalf("Snapshot = %+v; log at lsn %d", res, la.LastLSN())
	}
	if !strings.Contains(res.Path, fmt.Sprintf("partition %d snapshot at lsn %d", id, res.LSN)) {
		t.Fatalf("snapshot name %q", res.Path)
	}
	if n := chunkRows(t, db, id); n < 5 {
		t.Fatalf("the snapshot has %d chunk rows; want many of %d bytes", n, testChunkBytes)
	}
	_, sum, err := storeA.Read(res.LSN)
	if err != nil || sum.LastLSN != res.LSN || sum.Tasks != 60 {
		t.Fatalf("Read = %+v, %v", sum, err)
	}
	workload(t, ca, "b", 20) // the tail, after the snapshot
	want := ca.Export()
	ca.Close()
	if err := la.Close(); err != nil {
		t.Fatal(err)
	}

	// The next owner: the newest snapshot, then the rows after it.
	lb := openLog(t, db, id, reassign(t, db, id, "node-b"), snapOpts())
	if lb.FirstLSN() != res.LSN+1 || lb.LastLSN() != want.LastLSN {
		t.Fatalf("reopened log: first %d last %d; want %d and %d", lb.FirstLSN(), lb.LastLSN(), res.LSN+1, want.LastLSN)
	}
	store := lb.Snapshots()
	lsns, err := store.List()
	if err != nil || !slices.Equal(lsns, []uint64{res.LSN}) {
		t.Fatalf("List = %v, %v; want [%d]", lsns, err, res.LSN)
	}
	st, err := store.Load(lsns[len(lsns)-1])
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.OpenFrom(ctx, lb, st, coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	exportEqual(t, "OpenFrom(newest snapshot) + tail", c.Export(), want)
	c.Close()

	c, err = coordinator.Recover(ctx, lb, store, coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	exportEqual(t, "Recover", c.Export(), want)
	c.Close()

	// As the member runs it: Recover with the fence, then snapshots at the
	// new epoch.
	cfg := coordConfig(clk)
	cfg.Fence = &coordinator.Fence{Epoch: lb.Epoch(), NodeID: "node-b"}
	c, err = coordinator.Recover(ctx, lb, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	workload(t, c, "c", 5)
	res2 := takeSnapshot(t, c, store, 2)
	if lsns, _ := store.List(); !slices.Equal(lsns, []uint64{res.LSN, res2.LSN}) {
		t.Fatalf("List = %v", lsns)
	}
	var snapEpoch uint64
	if err := db.QueryRow("SELECT epoch FROM partition_snapshots WHERE partition_id = ? AND lsn = ?", id, res2.LSN).Scan(&snapEpoch); err != nil || snapEpoch != lb.Epoch() {
		t.Fatalf("the new snapshot's epoch = %d, %v; want %d", snapEpoch, err, lb.Epoch())
	}
}

// Compaction deletes the rows below the oldest kept snapshot, in batches;
// a replay from LSN 1 then fails with wal.ErrCompacted and the coordinator
// starts from the snapshot. A log whose every row was deleted reopens at
// the right LSNs.
func TestCompaction(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	ctx := context.Background()
	clk := newClock()
	opts := snapOpts()
	opts.DeleteBatchRows = 7
	l := openLog(t, db, id, epoch, opts)
	c := openCoord(t, l, clk)
	workload(t, c, "a", 30)
	last := l.LastLSN()

	// Nothing is deleted without a snapshot that holds it.
	if n, err := l.DeleteBefore(last + 1); err != nil || n != 0 || len(logLSNs(t, db, id)) != int(last) || l.FirstLSN() != 1 {
		t.Fatalf("DeleteBefore without a snapshot = %d, %v; %d records left, first lsn %d", n, err, len(logLSNs(t, db, id)), l.FirstLSN())
	}

	// The first snapshot is the oldest kept: every row up to it goes, in
	// batches of 7; nothing is after it, so no row is left.
	rows := logRows(t, db, id)
	if rows <= 7 {
		t.Fatalf("the workload wrote %d rows; the test wants more than one batch of 7", rows)
	}
	s1 := takeSnapshot(t, c, l.Snapshots(), 2)
	if s1.LSN > last {
		rows++ // the snapshot's own records, one round
	}
	if s1.DeletedSegments != rows || logRows(t, db, id) != 0 {
		t.Fatalf("first snapshot at lsn %d deleted %d rows of %d, %d left", s1.LSN, s1.DeletedSegments, rows, logRows(t, db, id))
	}
	if l.FirstLSN() != s1.LSN+1 || l.LastLSN() != s1.LSN {
		t.Fatalf("after compaction: first %d last %d; want %d, %d", l.FirstLSN(), l.LastLSN(), s1.LSN+1, s1.LSN)
	}
	err := l.Replay(1, func(uint64, wal.Entry) error { return nil })
	if !errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("Replay(1) of a compacted log = %v, want wal.ErrCompacted", err)
	}
	if got := replayFrom(t, l, l.FirstLSN()); len(got) != 0 {
		t.Fatalf("Replay(FirstLSN) = %d records", len(got))
	}
	want := c.Export()
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened with no row at all: it ends where the rows did.
	l = openLog(t, db, id, epoch, opts)
	if l.FirstLSN() != s1.LSN+1 || l.LastLSN() != s1.LSN {
		t.Fatalf("reopened with no rows: first %d last %d; want %d, %d", l.FirstLSN(), l.LastLSN(), s1.LSN+1, s1.LSN)
	}
	if _, err := coordinator.Open(ctx, l, coordConfig(clk)); !errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("coordinator.Open (replay from lsn 1) of a compacted log = %v, want wal.ErrCompacted", err)
	}
	c, err = coordinator.Recover(ctx, l, l.Snapshots(), coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	exportEqual(t, "Recover with no rows left", c.Export(), want)

	// Appends continue after the snapshot.
	workload(t, c, "b", 20)
	s2 := takeSnapshot(t, c, l.Snapshots(), 2)
	rows = logRows(t, db, id)
	if got := logLSNs(t, db, id); s2.DeletedSegments != 0 || len(got) != int(s2.LSN-s1.LSN) {
		t.Fatalf("second snapshot deleted %d rows, %d records left; want 0 deleted, %d left", s2.DeletedSegments, len(got), s2.LSN-s1.LSN)
	}
	workload(t, c, "c", 20)
	// The third removes the first, and the rows up to the second go.
	s3 := takeSnapshot(t, c, l.Snapshots(), 2)
	if !slices.Equal(s3.Removed, []uint64{s1.LSN}) || s3.DeletedSegments != rows {
		t.Fatalf("third snapshot: removed %v, deleted %d rows; want [%d], %d", s3.Removed, s3.DeletedSegments, s1.LSN, rows)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ?", id, s1.LSN); n != 0 {
		t.Fatalf("the removed snapshot left %d chunk rows", n)
	}
	got := logLSNs(t, db, id)
	if got[0] != s2.LSN+1 || got[len(got)-1] != s3.LSN || l.FirstLSN() != s2.LSN+1 {
		t.Fatalf("records %d..%d, first lsn %d; want %d..%d", got[0], got[len(got)-1], l.FirstLSN(), s2.LSN+1, s3.LSN)
	}
	// Never beyond the newest snapshot, whatever the caller asks.
	rows = logRows(t, db, id)
	if n, err := l.DeleteBefore(l.LastLSN() + 100); err != nil || n != rows {
		t.Fatalf("DeleteBefore past the end = %d, %v; want the %d rows up to the newest snapshot", n, err, rows)
	}
	if l.FirstLSN() != s3.LSN+1 || logRows(t, db, id) != 0 {
		t.Fatalf("first lsn %d, %d rows", l.FirstLSN(), logRows(t, db, id))
	}
	workload(t, c, "d", 5)
	want = c.Export()
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// A new owner: whole replay refused, replay from the snapshot works.
	epoch = reassign(t, db, id, "node-b")
	l = openLog(t, db, id, epoch, opts)
	if err := l.Replay(1, func(uint64, wal.Entry) error { return nil }); !errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("Replay(1) = %v, want wal.ErrCompacted", err)
	}
	if err := l.Replay(s3.LSN, func(uint64, wal.Entry) error { return nil }); !errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("Replay(%d), one below the first row = %v, want wal.ErrCompacted", s3.LSN, err)
	}
	if got := replayFrom(t, l, s3.LSN+1); len(got) != int(want.LastLSN-s3.LSN) {
		t.Fatalf("Replay after the snapshot saw %d records, want %d", len(got), want.LastLSN-s3.LSN)
	}
	c, err = coordinator.Recover(ctx, l, l.Snapshots(), coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	exportEqual(t, "Recover after compaction", c.Export(), want)
	c.Close()

	// A hole above the first lsn is still corruption, not compaction.
	if logRows(t, db, id) < 2 {
		t.Fatal("the workload after the snapshot wrote one row; the test wants two")
	}
	if _, err := db.Exec("DELETE FROM partition_log WHERE partition_id = ? AND lsn > ? ORDER BY lsn LIMIT 1", id, s3.LSN+1); err != nil {
		t.Fatal(err)
	}
	if err := l.Replay(s3.LSN+1, func(uint64, wal.Entry) error { return nil }); !errors.Is(err, mysqllog.ErrCorrupt) || errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("Replay over a hole = %v, want ErrCorrupt", err)
	}
}

type replayed struct {
	lsn uint64
	typ uint16
}

func replayFrom(t *testing.T, l *mysqllog.Log, from uint64) []replayed {
	t.Helper()
	var out []replayed
	if err := l.Replay(from, func(lsn uint64, e wal.Entry) error {
		out = append(out, replayed{lsn, e.Type})
		return nil
	}); err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// Compaction that overtakes a running replay is reported as such.
func TestCompactionDuringReplay(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	opts := snapOpts()
	opts.ReplayPageRecords = 5
	l := openLog(t, db, id, epoch, opts)
	c := openCoord(t, l, newClock())
	defer c.Close()
	workload(t, c, "a", 30)
	calls := 0
	err := l.Replay(1, func(lsn uint64, e wal.Entry) error {
		calls++
		if calls == 1 {
			takeSnapshot(t, c, l.Snapshots(), 1)
		}
		return nil
	})
	if !errors.Is(err, wal.ErrCompacted) || calls != 5 {
		t.Fatalf("Replay overtaken by compaction = %v after %d records; want wal.ErrCompacted after the first page of 5", err, calls)
	}
}

// A deposed owner saves, removes, discards and deletes nothing.
func TestSnapshotFenced(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	l := openLog(t, db, id, epoch, snapOpts())
	c := openCoord(t, l, newClock())
	defer c.Close()
	workload(t, c, "a", 30)
	s1 := takeSnapshot(t, c, l.Snapshots(), 2)
	workload(t, c, "b", 10)
	store := l.Snapshots()
	st, err := store.Load(s1.LSN)
	if err != nil {
		t.Fatal(err)
	}
	img := st.Image()
	img.LastLSN = l.LastLSN()

	type counts struct{ snaps, chunks, rows, start int }
	snapshotOf := func() counts {
		return counts{
			count(t, db, "SELECT COUNT(*) FROM partition_snapshots WHERE partition_id = ? AND discarded_at IS NULL", id),
			chunkRows(t, db, id),
			logRows(t, db, id),
			count(t, db, "SELECT COALESCE(SUM(first_lsn), 0) FROM partition_log_start WHERE partition_id = ?", id),
		}
	}

	// Deposed while Save writes its chunks: the epoch check at its end
	// refuses, and the transaction leaves nothing.
	before := snapshotOf()
	lockTx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer lockTx.Rollback()
	if _, err := lockTx.Exec("SELECT epoch FROM partitions WHERE id = ? FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	saved := make(chan error, 1)
	go func() {
		_, err := store.Save(img)
		saved <- err
	}()
	waitForLockWait(t, db, fmt.Sprintf("%%FROM partitions WHERE id = %d FOR UPDATE%%", id), saved)
	if _, err := lockTx.Exec("UPDATE partitions SET owner_node_id = 'node-b', epoch = epoch + 1 WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	if err := lockTx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-saved; !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Save by an owner deposed during the write = %v, want ErrFenced", err)
	}
	if got := snapshotOf(); got != before {
		t.Fatalf("the fenced Save changed the tables: %+v, before %+v", got, before)
	}

	// Known deposed: every write refused at once.
	img.LastLSN++
	if _, err := store.Save(img); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Save by a deposed owner = %v, want ErrFenced", err)
	}
	if n, err := l.DeleteBefore(l.LastLSN() + 1); !errors.Is(err, mysqllog.ErrFenced) || n != 0 {
		t.Fatalf("DeleteBefore by a deposed owner = %d, %v; want ErrFenced", n, err)
	}
	if err := store.Remove(s1.LSN); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Remove by a deposed owner = %v, want ErrFenced", err)
	}
	if _, err := store.Discard(s1.LSN); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Discard by a deposed owner = %v, want ErrFenced", err)
	}
	if _, err := c.Snapshot(context.Background(), coordinator.SnapshotConfig{Store: store}); err == nil {
		t.Fatal("the deposed coordinator took a snapshot")
	}
	if got := snapshotOf(); got != before {
		t.Fatalf("the deposed owner changed the tables: %+v, before %+v", got, before)
	}
	if lsns, err := store.List(); err != nil || !slices.Equal(lsns, []uint64{s1.LSN}) {
		t.Fatalf("List = %v, %v", lsns, err)
	}
	// Reading still works at any epoch.
	if _, err := store.Load(s1.LSN); err != nil {
		t.Fatal(err)
	}
}

// waitForLockWait waits until a transaction whose query matches pattern
// waits for a lock; the call that should wait must not end first (done).
// InnoDB refreshes INNODB_TRX only when it was not read for 100 ms: poll
// slower than that.
func waitForLockWait(t *testing.T, db *sql.DB, pattern string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if count(t, db, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?", pattern) > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the call returned (%v) without waiting for the lock a query like %q takes", err, pattern)
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Fatalf("no transaction waits for a lock with a query like %q", pattern)
}

// setChunk replaces the data of one chunk row.
func setChunk(t *testing.T, db *sql.DB, id, lsn uint64, chunk int, data []byte) {
	t.Helper()
	if _, err := db.Exec("UPDATE partition_snapshot_chunks SET data = ? WHERE partition_id = ? AND lsn = ? AND chunk = ?", data, id, lsn, chunk); err != nil {
		t.Fatal(err)
	}
}

func getChunk(t *testing.T, db *sql.DB, id, lsn uint64, chunk int) []byte {
	t.Helper()
	var data []byte
	if err := db.QueryRow("SELECT data FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk = ?", id, lsn, chunk).Scan(&data); err != nil {
		t.Fatal(err)
	}
	return data
}

// Damage anywhere in a snapshot's rows makes Load fail with
// snapshot.ErrCorrupt; Recover then discards it and starts from the older
// one.
func TestSnapshotCorrupt(t *testing.T) {
	t.Parallel()
	w := newWorked(t, 40)
	db, id, l, c, clk := w.db, w.id, w.l, w.c, w.clk
	ctx := context.Background()
	s1 := takeSnapshot(t, c, l.Snapshots(), 2)
	workload(t, c, "b", 40)
	s2 := takeSnapshot(t, c, l.Snapshots(), 2)
	want := c.Export()
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	store := l.Snapshots()
	mustLoad := func() {
		t.Helper()
		if _, err := store.Load(s2.LSN); err != nil {
			t.Fatalf("Load of the intact snapshot: %v", err)
		}
	}
	mustBeCorrupt := func(what string) {
		t.Helper()
		_, err := store.Load(s2.LSN)
		if !errors.Is(err, snapshot.ErrCorrupt) {
			t.Fatalf("Load with %s = %v, want snapshot.ErrCorrupt", what, err)
		}
		if !strings.Contains(err.Error(), store.Name(s2.LSN)) {
			t.Fatalf("the error does not name the snapshot: %v", err)
		}
	}
	mustLoad()

	// One byte flipped in a chunk, at several places.
	for _, at := range []struct{ chunk, off int }{{0, 3}, {0, 20}, {3, 100}, {5, 0}} {
		orig := getChunk(t, db, id, s2.LSN, at.chunk)
		bad := slices.Clone(orig)
		bad[at.off] ^= 0x20
		setChunk(t, db, id, s2.LSN, at.chunk, bad)
		mustBeCorrupt(fmt.Sprintf("a flipped byte at chunk %d offset %d", at.chunk, at.off))
		setChunk(t, db, id, s2.LSN, at.chunk, orig)
		mustLoad()
	}
	var chunks int
	if err := db.QueryRow("SELECT chunks FROM partition_snapshots WHERE partition_id = ? AND lsn = ?", id, s2.LSN).Scan(&chunks); err != nil {
		t.Fatal(err)
	}
	// The last chunk (the trailer) cut short.
	orig := getChunk(t, db, id, s2.LSN, chunks-1)
	setChunk(t, db, id, s2.LSN, chunks-1, orig[:len(orig)-1])
	mustBeCorrupt("a chunk cut short")
	setChunk(t, db, id, s2.LSN, chunks-1, orig)
	// The index row wrong.
	for _, col := range []string{"crc = crc ^ 1", "chunks = chunks + 1", "bytes = bytes - 1"} {
		if _, err := db.Exec("UPDATE partition_snapshots SET "+col+" WHERE partition_id = ? AND lsn = ?", id, s2.LSN); err != nil {
			t.Fatal(err)
		}
		mustBeCorrupt("index row " + col)
		undo := strings.NewReplacer("^ 1", "^ 1", "+ 1", "- 1", "- 1", "+ 1").Replace(col)
		if _, err := db.Exec("UPDATE partition_snapshots SET "+undo+" WHERE partition_id = ? AND lsn = ?", id, s2.LSN); err != nil {
			t.Fatal(err)
		}
		mustLoad()
	}
	// A chunk missing, and an extra one.
	orig = getChunk(t, db, id, s2.LSN, 2)
	if _, err := db.Exec("DELETE FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk = 2", id, s2.LSN); err != nil {
		t.Fatal(err)
	}
	mustBeCorrupt("a missing chunk")
	if _, err := db.Exec("INSERT INTO partition_snapshot_chunks (partition_id, lsn, chunk, data) VALUES (?, ?, 2, ?)", id, s2.LSN, orig); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO partition_snapshot_chunks (partition_id, lsn, chunk, data) VALUES (?, ?, ?, 'x')", id, s2.LSN, chunks); err != nil {
		t.Fatal(err)
	}
	mustBeCorrupt("an extra chunk")
	if _, err := db.Exec("DELETE FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk = ?", id, s2.LSN, chunks); err != nil {
		t.Fatal(err)
	}
	mustLoad()

	// Damaged for good: the next owner starts from the older snapshot
	// (whose rows after it were kept) and discards the damaged one.
	bad := getChunk(t, db, id, s2.LSN, 1)
	bad[len(bad)/2] ^= 1
	setChunk(t, db, id, s2.LSN, 1, bad)
	l2 := openLog(t, db, id, reassign(t, db, id, "node-b"), snapOpts())
	c2, err := coordinator.Recover(ctx, l2, l2.Snapshots(), coordConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	exportEqual(t, "Recover past a damaged snapshot", c2.Export(), want)
	if lsns, err := l2.Snapshots().List(); err != nil || !slices.Equal(lsns, []uint64{s1.LSN}) {
		t.Fatalf("List after the discard = %v, %v; want [%d]", lsns, err, s1.LSN)
	}
	if _, err := l2.Snapshots().Load(s2.LSN); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Load of the discarded snapshot = %v, want ErrNoSnapshot", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ?", id, s2.LSN); n != chunks {
		t.Fatalf("the discarded snapshot keeps %d chunk rows, want all %d", n, chunks)
	}
}

// snapFixture is a partition's log, a coordinator on it (closed with the
// test) that ran a workload and took snapshot s1, and s1 loaded as st.
type snapFixture struct {
	db    *sql.DB
	id    uint64
	l     *mysqllog.Log
	c     *coordinator.Coordinator
	store *mysqllog.SnapshotStore
	s1    coordinator.SnapshotResult
	st    *state.State
}

// newSnapFixture is a snapFixture whose workload submitted tasks tasks.
func newSnapFixture(t *testing.T, tasks int) snapFixture {
	t.Helper()
	w := newWorked(t, tasks)
	f := snapFixture{db: w.db, id: w.id, l: w.l, c: w.c}
	t.Cleanup(func() { f.c.Close() })
	f.s1 = takeSnapshot(t, f.c, f.l.Snapshots(), 2)
	f.store = f.l.Snapshots()
	var err error
	if f.st, err = f.store.Load(f.s1.LSN); err != nil {
		t.Fatal(err)
	}
	return f
}

// Chunks without an index row are no snapshot; a Save that fails part way
// leaves none of its rows.
func TestSnapshotIncomplete(t *testing.T) {
	t.Parallel()
	f := newSnapFixture(t, 30)
	db, id, l, store, s1, st := f.db, f.id, f.l, f.store, f.s1, f.st

	// The chunks of a snapshot at a later lsn, without its index row.
	orphan := s1.LSN + 50
	for i := range 3 {
		if _, err := db.Exec(`INSERT INTO partition_snapshot_chunks (partition_id, lsn, chunk, data)
			SELECT partition_id, ?, chunk, data FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk = ?`,
			orphan, id, s1.LSN, i); err != nil {
			t.Fatal(err)
		}
	}
	if lsns, err := store.List(); err != nil || !slices.Equal(lsns, []uint64{s1.LSN}) {
		t.Fatalf("List with an incomplete snapshot = %v, %v; want [%d]", lsns, err, s1.LSN)
	}
	if _, err := store.Load(orphan); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Load of an incomplete snapshot = %v, want ErrNoSnapshot", err)
	}
	// It does not count as the log's end either.
	l.Close()
	l2 := openLog(t, db, id, epochOf(t, db, id), snapOpts())
	if l2.LastLSN() != l.LastLSN() {
		t.Fatalf("reopened at lsn %d, want %d", l2.LastLSN(), l.LastLSN())
	}

	// A Save at that lsn collides with the leftover chunk 2 only after it
	// inserted chunks 0 and 1: the transaction leaves nothing.
	if _, err := db.Exec("DELETE FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk < 2", id, orphan); err != nil {
		t.Fatal(err)
	}
	img := st.Image()
	img.LastLSN = orphan
	if _, err := l2.Snapshots().Save(img); err == nil {
		t.Fatal("Save over leftover chunks succeeded")
	}
	if n := count(t, db, "SELECT COUNT(*) FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ?", id, orphan); n != 1 {
		t.Fatalf("the failed Save left %d chunk rows at lsn %d, want only the leftover", n, orphan)
	}
	if lsns, _ := store.List(); !slices.Equal(lsns, []uint64{s1.LSN}) {
		t.Fatalf("List after the failed Save = %v", lsns)
	}
	// Remove clears leftovers too.
	if err := l2.Snapshots().Remove(orphan); err != nil {
		t.Fatal(err)
	}
	if err := l2.Snapshots().Remove(orphan); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Remove of nothing = %v, want ErrNoSnapshot", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ?", id, orphan); n != 0 {
		t.Fatalf("Remove left %d chunk rows", n)
	}
}

// Discard takes a snapshot out of use and keeps its rows; saving needs an
// lsn of its own.
func TestSnapshotDiscard(t *testing.T) {
	t.Parallel()
	f := newSnapFixture(t, 10)
	db, id, store, s1, st := f.db, f.id, f.store, f.s1, f.st
	if _, err := store.Save(st.Image()); err == nil || errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("a second Save at lsn %d = %v; want an error that it exists", s1.LSN, err)
	}
	where, err := store.Discard(s1.LSN)
	if err != nil || !strings.Contains(where, store.Name(s1.LSN)) {
		t.Fatalf("Discard = %q, %v", where, err)
	}
	if again, err := store.Discard(s1.LSN); err != nil || again != where {
		t.Fatalf("Discard again = %q, %v", again, err)
	}
	if lsns, err := store.List(); err != nil || len(lsns) != 0 {
		t.Fatalf("List after Discard = %v, %v", lsns, err)
	}
	if _, err := store.Load(s1.LSN); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Load of a discarded snapshot = %v", err)
	}
	if _, err := store.Discard(s1.LSN + 1000); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Discard of nothing = %v", err)
	}
	if chunkRows(t, db, id) == 0 {
		t.Fatal("Discard deleted the rows")
	}
	if err := store.Remove(s1.LSN); err != nil || chunkRows(t, db, id) != 0 {
		t.Fatalf("Remove of a discarded snapshot = %v, %d chunk rows left", err, chunkRows(t, db, id))
	}
	// An empty state saves and loads too.
	empty := state.New().Image()
	if _, err := store.Save(empty); err != nil {
		t.Fatal(err)
	}
	if st, err := store.Load(0); err != nil || st.Len() != 0 {
		t.Fatalf("Load of an empty snapshot = %v", err)
	}
}

func TestNewSnapshotStore(t *testing.T) {
	t.Parallel()
	db, id, epoch := ownedPartition(t)
	if _, err := mysqllog.NewSnapshotStore(db, id, epoch, mysqllog.Options{SnapshotChunkBytes: -1}); err == nil {
		t.Fatal("a negative SnapshotChunkBytes was accepted")
	}
	s, err := mysqllog.NewSnapshotStore(db, id, epoch, mysqllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if lsns, err := s.List(); err != nil || len(lsns) != 0 {
		t.Fatalf("List of a new partition = %v, %v", lsns, err)
	}
	if _, err := s.Load(1); !errors.Is(err, mysqllog.ErrNoSnapshot) {
		t.Fatalf("Load of nothing = %v", err)
	}
	if _, err := s.Save(state.New().Image()); err != nil {
		t.Fatal(err)
	}
	stale, err := mysqllog.NewSnapshotStore(db, id, epoch-1, mysqllog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img := state.New().Image()
	img.LastLSN = 5
	if _, err := stale.Save(img); !errors.Is(err, mysqllog.ErrFenced) {
		t.Fatalf("Save at an old epoch = %v", err)
	}
}
