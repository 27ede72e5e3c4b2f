package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/logbuf"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// snapEnv is a coordinator over a file WAL with small segments and a
// snapshot directory, opened with Recover, with a fake clock and a log
// captured for assertions.
type snapEnv struct {
	t     *testing.T
	dir   string
	clock *clock.Fake
	rand  *seededRand
	logs  *logbuf.Buffer
	log   *wal.Log
	c     *Coordinator
	store snapshot.Dir
	// noCompact hides the log's DeleteBefore, keeping every record.
	noCompact bool
	// accept is Config.AcceptLostRecords of the next open.
	accept LSNRange
	// maxPurged is Config.MaxPurgedPerRecord of the next open.
	maxPurged int
}

// plainLog is a Log without the optional capabilities.
type plainLog struct{ Log }

func newSnapEnv(t *testing.T, seed uint64) *snapEnv {
	t.Helper()
	dir := t.TempDir()
	e := &snapEnv{t: t, dir: dir, clock: clock.NewFake(epoch), rand: newSeededRand(seed), logs: &logbuf.Buffer{},
		store: snapshot.Dir{Path: filepath.Join(dir, "snapshots")}}
	t.Cleanup(e.close)
	return e
}

func (e *snapEnv) open() error {
	e.t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(e.dir, "wal"), Sync: wal.SyncNone, SegmentBytes: 4096})
	if err != nil {
		e.t.Fatalf("open wal: %v", err)
	}
	var lg Log = l
	if e.noCompact {
		lg = plainLog{l}
	}
	cfg := Config{Clock: e.clock, Rand: e.rand, Logger: slog.New(slog.NewTextHandler(e.logs, nil)), AcceptLostRecords: e.accept,
		MaxPurgedPerRecord: e.maxPurged}
	c, err := Recover(ctx, lg, e.store, cfg)
	if err != nil {
		l.Close()
		return err
	}
	e.log, e.c = l, c
	return nil
}

func (e *snapEnv) mustOpen() {
	e.t.Helper()
	if err := e.open(); err != nil {
		e.t.Fatalf("open: %v", err)
	}
}

func (e *snapEnv) close() {
	if e.c != nil {
		e.c.Close()
		e.log.Close()
		e.c = nil
	}
}

func (e *snapEnv) snapshot(retention time.Duration) SnapshotResult {
	e.t.Helper()
	res, err := e.c.Snapshot(ctx, SnapshotConfig{Store: e.store, Retention: retention})
	if err != nil {
		e.t.Fatalf("snapshot: %v", err)
	}
	if err := e.c.CheckInvariants(); err != nil {
		e.t.Fatal(err)
	}
	return res
}

// work submits n tasks and completes every other one, one second apart.
func (e *snapEnv) work(n int) {
	e.t.Helper()
	for i := range n {
		rid := e.rand.r.Uint64() % 1000 // a repeated id is a retry: same payload
		res, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint("p", rid)), RequestID: fmt.Sprint("r", rid)})
		if err != nil {
			e.t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		if i%2 == 0 && !res.Duplicate {
			ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 1})
			if err != nil || len(ls) != 1 {
				e.t.Fatalf("lease: %v %d", err, len(ls))
			}
			if err := e.c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// replayEqual checks that the whole log, from LSN 1, gives the live state
// (for an environment with noCompact).
func (e *snapEnv) replayEqual() {
	e.t.Helper()
	want := e.c.Export()
	st := state.New()
	if err := Replay(e.log, st, 1); err != nil {
		e.t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Export(), want) {
		e.t.Fatal("full replay differs from the live state")
	}
}

func (e *snapEnv) restartEqual() {
	e.t.Helper()
	before := e.c.Export()
	e.close()
	e.mustOpen()
	if after := e.c.Export(); !reflect.DeepEqual(before, after) {
		e.t.Fatal("state after restart differs from the state before")
	}
}

// TestRestartFromSnapshotReplaysTail: after snapshots and segment deletion
// the log starts well after LSN 1, a restart loads the newest snapshot,
// replays only the records after it, and equals the live state.
func TestRestartFromSnapshotReplaysTail(t *testing.T) {
	e := newSnapEnv(t, 1)
	e.mustOpen()
	e.work(200)
	first := e.snapshot(time.Hour)
	e.work(200)
	second := e.snapshot(time.Hour)
	if first.DeletedSegments+second.DeletedSegments == 0 || e.log.FirstLSN() <= 1 || e.log.FirstLSN() > first.LSN+1 {
		t.Fatalf("deleted %d segments; log starts at %d; oldest kept snapshot at %d", first.DeletedSegments+second.DeletedSegments, e.log.FirstLSN(), first.LSN)
	}
	e.work(100) // the tail after the newest snapshot
	tail := e.c.Stats().LastLSN - second.LSN
	e.restartEqual()
	if want := fmt.Sprintf("from_lsn=%d records=%d", second.LSN+1, tail); !strings.Contains(e.logs.String(), want) {
		t.Fatalf("restart did not replay only the tail (%s):\n%s", want, e.logs.String())
	}
	// A third snapshot keeps two and removes the oldest.
	e.work(50)
	third := e.snapshot(time.Hour)
	if !reflect.DeepEqual(third.Removed, []uint64{first.LSN}) {
		t.Fatalf("removed %v, want [%d]", third.Removed, first.LSN)
	}
	if lsns, _ := e.store.List(); !reflect.DeepEqual(lsns, []uint64{second.LSN, third.LSN}) {
		t.Fatalf("kept %v", lsns)
	}
	e.restartEqual()
	// History still answers for a task whose first records were deleted.
	var old *state.Task
	e.c.mu.Lock()
	e.c.st.Scan(0, func(t *state.Task) bool { old = t.Clone(); return false })
	e.c.mu.Unlock()
	if old.CreatedLSN >= e.log.FirstLSN() {
		t.Fatalf("oldest task created at %d, log starts at %d: the test needs an older one", old.CreatedLSN, e.log.FirstLSN())
	}
	if _, err := e.c.History(ctx, old.ID); err != nil {
		t.Fatalf("history of a task whose creation was compacted: %v", err)
	}
}

// TestDamagedSnapshotFallsBack flips a byte of the newest snapshot: the
// restart says so, names the file, starts from the previous snapshot and
// still reaches the same state; it discards the damaged file.
func TestDamagedSnapshotFallsBack(t *testing.T) {
	e := newSnapEnv(t, 2)
	e.mustOpen()
	e.work(150)
	older := e.snapshot(time.Hour)
	e.work(150)
	newest := e.snapshot(time.Hour)
	e.work(20)
	want := e.c.Export()
	e.close()
	flipByte(t, e.store.File(newest.LSN), 100)

	e.mustOpen()
	if got := e.c.Export(); !reflect.DeepEqual(got, want) {
		t.Fatal("state after falling back differs")
	}
	logs := e.logs.String()
	for _, s := range []string{"snapshot unusable; trying an older one", e.store.File(newest.LSN), "checksum mismatch",
		fmt.Sprintf("from_lsn=%d", older.LSN+1), "discarded unusable snapshot"} {
		if !strings.Contains(logs, s) {
			t.Fatalf("log lacks %q:\n%s", s, logs)
		}
	}
	if lsns, _ := e.store.List(); !reflect.DeepEqual(lsns, []uint64{older.LSN}) {
		t.Fatalf("snapshots after the fallback: %v", lsns)
	}
	if _, err := os.Stat(e.store.File(newest.LSN) + ".discarded"); err != nil {
		t.Fatalf("damaged snapshot not set aside: %v", err)
	}
	// The next snapshot does not count the damaged one.
	e.snapshot(time.Hour)
	e.restartEqual()
}

// TestAllSnapshotsDamaged: with the whole log on disk, a full replay; with
// the log compacted, a refusal naming every snapshot tried.
func TestAllSnapshotsDamaged(t *testing.T) {
	t.Run("full replay", func(t *testing.T) {
		e := newSnapEnv(t, 3)
		e.noCompact = true
		e.mustOpen()
		e.work(100)
		s := e.snapshot(time.Hour)
		e.work(10)
		want := e.c.Export()
		e.close()
		flipByte(t, e.store.File(s.LSN), 40)
		e.mustOpen()
		if !reflect.DeepEqual(e.c.Export(), want) {
			t.Fatal("full replay differs")
		}
		if logs := e.logs.String(); !strings.Contains(logs, "no usable snapshot; replaying the whole log") || !strings.Contains(logs, "from_lsn=1 ") {
			t.Fatalf("log:\n%s", logs)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		e := newSnapEnv(t, 4)
		e.mustOpen()
		e.work(150)
		a := e.snapshot(time.Hour)
		e.work(150)
		b := e.snapshot(time.Hour)
		e.close()
		flipByte(t, e.store.File(a.LSN), 60)
		flipByte(t, e.store.File(b.LSN), 60)
		err := e.open()
		if err == nil {
			t.Fatal("started without a usable snapshot or a full log")
		}
		for _, s := range []string{"cannot start", "the log starts at lsn", e.store.File(a.LSN), e.store.File(b.LSN), "restore the data directory"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("error lacks %q: %v", s, err)
			}
		}
		// Nothing was discarded by a start that failed.
		if lsns, _ := e.store.List(); len(lsns) != 2 {
			t.Fatalf("snapshots after a refused start: %v", lsns)
		}
	})
}

// cutLogBelow deletes the WAL segment holding lsn and every later one, as
// a log that lost its end would be, and returns the log's last LSN now.
func (e *snapEnv) cutLogBelow(lsn uint64) uint64 {
	e.t.Helper()
	segs, err := filepath.Glob(filepath.Join(e.dir, "wal", "*.wal"))
	if err != nil {
		e.t.Fatal(err)
	}
	var cut uint64
	for _, p := range segs {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".wal"), 16, 64)
		if err != nil {
			e.t.Fatal(err)
		}
		if first <= lsn {
			cut = max(cut, first)
		}
	}
	if cut <= 1 {
		e.t.Fatalf("lsn %d is in the first segment; the test needs a later one", lsn)
	}
	for _, p := range segs {
		first, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".wal"), 16, 64)
		if first >= cut {
			if err := os.Remove(p); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return cut - 1
}

// forgetTail deletes the WAL's tail file, as in a data directory written
// before it existed: only snapshots can then tell that records are gone.
func (e *snapEnv) forgetTail() {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.dir, "wal", "TAIL")); err != nil {
		e.t.Fatal(err)
	}
}

// snapshotAheadOfLog leaves e closed with a snapshot s that ends after the
// log's last record, last: it snapshots after 150 records, writes 20 more,
// and deletes the log from s's segment on, and the TAIL file with it.
func (e *snapEnv) snapshotAheadOfLog() (s SnapshotResult, last uint64) {
	e.t.Helper()
	e.noCompact = true
	e.mustOpen()
	e.work(150)
	s = e.snapshot(time.Hour)
	e.work(20)
	e.close()
	last = e.cutLogBelow(s.LSN)
	e.forgetTail()
	return s, last
}

// TestSnapshotAheadOfLogRefused: a snapshot that verifies and ends after
// the log's last record proves acknowledged records gone; Recover refuses,
// naming the snapshot and the range, and changes nothing, unless exactly
// that range is accepted: then it serves the log, says so at error level
// and sets the snapshot aside. A range that does not match accepts nothing.
func TestSnapshotAheadOfLogRefused(t *testing.T) {
	e := newSnapEnv(t, 5)
	s, last := e.snapshotAheadOfLog()
	lost := LSNRange{First: last + 1, Last: s.LSN}

	err := e.open()
	le, ok := errors.AsType[*LostRecordsError](err)
	if !ok {
		t.Fatalf("open with a snapshot at lsn %d after the log's end %d = %v, want a *LostRecordsError", s.LSN, last, err)
	}
	if le.Lost != lost || le.SnapshotLSN != s.LSN || le.LogLastLSN != last || !le.Accepted.IsZero() {
		t.Fatalf("error %+v, want lost %v, snapshot lsn %d, log's last lsn %d", le, lost, s.LSN, last)
	}
	for _, want := range []string{e.store.File(s.LSN), fmt.Sprintf("records %s", lost), fmt.Sprintf("ends at lsn %d", last), "acknowledged work"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error lacks %q: %v", want, err)
		}
	}
	unchanged := func(what string) {
		t.Helper()
		if lsns, _ := e.store.List(); !reflect.DeepEqual(lsns, []uint64{s.LSN}) {
			t.Fatalf("%s: snapshots %v, want [%d] untouched", what, lsns, s.LSN)
		}
		if d, _ := e.store.Discarded(); len(d) != 0 {
			t.Fatalf("%s: discarded %v", what, d)
		}
	}
	unchanged("refused start")

	for _, wrong := range []LSNRange{{lost.First, lost.Last - 1}, {lost.First + 1, lost.Last}, {lost.First, lost.Last + 1}} {
		e.accept = wrong
		err := e.open()
		le, ok := errors.AsType[*LostRecordsError](err)
		if !ok || le.Lost != lost || le.Accepted != wrong || !strings.Contains(err.Error(), wrong.String()+", is not this one") {
			t.Fatalf("open accepting %v of the lost %v = %v, want a refusal naming both", wrong, lost, err)
		}
		unchanged("accepting " + wrong.String())
	}

	e.accept = lost
	e.mustOpen()
	if got := e.c.Stats().LastLSN; got != last {
		t.Fatalf("serving up to lsn %d, want the log's last %d", got, last)
	}
	if err := e.c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	for _, want := range []string{"level=ERROR msg=\"accepted the loss of acknowledged records", "accepted=" + lost.String(), "discarded unusable snapshot"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %q:\n%s", want, logs)
		}
	}
	if lsns, _ := e.store.List(); len(lsns) != 0 {
		t.Fatalf("snapshots after the accepted loss: %v", lsns)
	}
	if d, _ := e.store.Discarded(); !reflect.DeepEqual(d, []string{e.store.File(s.LSN) + ".discarded"}) {
		t.Fatalf("discarded %v", d)
	}
	// The setting left in place accepts nothing more and says so.
	e.restartEqual()
	if !strings.Contains(e.logs.String(), "but no records are lost: remove the setting") {
		t.Fatalf("a restart with nothing to accept does not say so:\n%s", e.logs.String())
	}
}

// TestSnapshotAheadOfLogDamaged: a damaged snapshot after the log's end
// proves nothing; it is discarded as any damaged one, and the log served.
func TestSnapshotAheadOfLogDamaged(t *testing.T) {
	e := newSnapEnv(t, 9)
	s, last := e.snapshotAheadOfLog()
	flipByte(t, e.store.File(s.LSN), 100)
	e.mustOpen()
	if got := e.c.Stats().LastLSN; got != last {
		t.Fatalf("serving up to lsn %d, want %d", got, last)
	}
	if lsns, _ := e.store.List(); len(lsns) != 0 || !strings.Contains(e.logs.String(), "checksum mismatch") {
		t.Fatalf("damaged snapshot kept (%v):\n%s", lsns, e.logs.String())
	}
}

// TestLostRangeFromNewestVerifiedSnapshot: of several snapshots after the
// log's end, the newest that verifies bounds the loss (a damaged newer one
// proves nothing); accepted, every one of them is set aside and the start
// is from the older snapshot still within the log.
func TestLostRangeFromNewestVerifiedSnapshot(t *testing.T) {
	e := newSnapEnv(t, 10)
	e.mustOpen()
	snap := func() SnapshotResult {
		res, err := e.c.Snapshot(ctx, SnapshotConfig{Store: e.store, Retention: time.Hour, Keep: 3})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e.work(100)
	a := snap()
	e.work(100)
	b := snap()
	e.work(100)
	c := snap()
	e.close()
	last := e.cutLogBelow(b.LSN)
	e.forgetTail()
	if last < a.LSN {
		t.Fatalf("the log now ends at %d, before snapshot %d; the test needs it after", last, a.LSN)
	}
	flipByte(t, e.store.File(c.LSN), 100)
	lost := LSNRange{First: last + 1, Last: b.LSN}
	err := e.open()
	if le, ok := errors.AsType[*LostRecordsError](err); !ok || le.Lost != lost || le.Snapshot != e.store.Name(b.LSN) {
		t.Fatalf("open = %v, want the loss of %v proved by snapshot %d", err, lost, b.LSN)
	}
	e.accept = lost
	e.mustOpen()
	if want := fmt.Sprintf("from_lsn=%d ", a.LSN+1); !strings.Contains(e.logs.String(), want) {
		t.Fatalf("did not start from snapshot %d (%s):\n%s", a.LSN, want, e.logs.String())
	}
	if lsns, _ := e.store.List(); !reflect.DeepEqual(lsns, []uint64{a.LSN}) {
		t.Fatalf("snapshots %v, want [%d]", lsns, a.LSN)
	}
	if d, _ := e.store.Discarded(); len(d) != 2 {
		t.Fatalf("discarded %v, want snapshots %d and %d", d, b.LSN, c.LSN)
	}
}

// TestLogTailProvesLoss: the WAL records how far it reached, so newest
// segments deleted after a clean close are a loss up to the log's last
// record, with or without a snapshot past the cut (the later of the two
// bounds it). Accepted, the log gives the records up and takes appends
// again after what is left, and a restart finds nothing missing.
func TestLogTailProvesLoss(t *testing.T) {
	for _, withSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", withSnapshot), func(t *testing.T) {
			e := newSnapEnv(t, 11)
			e.mustOpen()
			e.work(100)
			older := e.snapshot(time.Hour) // within what is left of the log
			e.work(100)
			cutAt := e.c.Stats().LastLSN - 20
			var snap SnapshotResult
			if withSnapshot {
				snap = e.snapshot(time.Hour)
				cutAt = snap.LSN
			}
			e.work(20)
			end := e.c.Stats().LastLSN
			e.close()
			last := e.cutLogBelow(cutAt)
			if last <= older.LSN {
				t.Fatalf("the log now ends at %d, not after the older snapshot %d; the test needs it after", last, older.LSN)
			}
			lost := LSNRange{First: last + 1, Last: end}

			err := e.open()
			le, ok := errors.AsType[*LostRecordsError](err)
			if !ok || le.Lost != lost || le.Missing == nil || le.Missing.Last != end || le.LogLastLSN != last {
				t.Fatalf("open after the newest segments were deleted = %v, want the loss of %v known from the WAL's tail file", err, lost)
			}
			if withSnapshot && (le.SnapshotLSN != snap.LSN || !strings.Contains(err.Error(), e.store.File(snap.LSN))) {
				t.Fatalf("the refusal does not name the snapshot at lsn %d too: %v", snap.LSN, err)
			}
			for _, want := range []string{"TAIL says the log held every record up to lsn " + fmt.Sprint(end), "is gone", "records " + lost.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("refusal lacks %q: %v", want, err)
				}
			}
			e.accept = LSNRange{First: lost.First, Last: lost.Last - 1}
			if err := e.open(); err == nil || !strings.Contains(err.Error(), "is not this one") {
				t.Fatalf("open accepting part of the loss = %v, want a refusal", err)
			}
			e.accept = lost
			e.mustOpen()
			if got := e.c.Stats().LastLSN; got != last {
				t.Fatalf("serving up to lsn %d, want the log's last %d", got, last)
			}
			if !strings.Contains(e.logs.String(), "log_knew=") {
				t.Fatalf("the accepted loss is not logged with what the log knew:\n%s", e.logs.String())
			}
			e.work(5) // appends continue after what is left
			e.accept = LSNRange{}
			e.restartEqual()
			if m := e.log.Missing(); m != nil {
				t.Fatalf("after the accepted loss and a restart: missing %v", m)
			}
		})
	}
}

func TestParseLSNRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LSNRange
	}{{"251-501", LSNRange{251, 501}}, {" 7-7 ", LSNRange{7, 7}}} {
		if got, err := ParseLSNRange(tc.in); err != nil || got != tc.want || got.String() != strings.TrimSpace(tc.in) {
			t.Fatalf("ParseLSNRange(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, bad := range []string{"", "251", "501-251", "0-5", "a-b", "1-2-3", "-5", "5-"} {
		if _, err := ParseLSNRange(bad); err == nil || !strings.Contains(err.Error(), "FIRST-LAST") {
			t.Fatalf("ParseLSNRange(%q) = %v, want an error saying the form", bad, err)
		}
	}
}

// TestRetentionPurge: finished tasks older than the retention leave at the
// snapshot, their request ids become free, live tasks stay, and a full
// replay of the log (purges included) equals the live state.
func TestRetentionPurge(t *testing.T) {
	e := newSnapEnv(t, 6)
	e.noCompact = true
	e.mustOpen()
	done, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	failed, _ := e.c.Submit(ctx, SubmitRequest{Queue: "q", Retry: state.RetryPolicy{MaxAttempts: 1}})
	waiting, _ := e.c.Submit(ctx, SubmitRequest{Queue: "later", RequestID: "order-2"})
	leased, _ := e.c.Submit(ctx, SubmitRequest{Queue: "busy", ExecutionWindow: 24 * time.Hour})
	ls, _ := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 2})
	if err := e.c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Fail(ctx, ls[1].TaskID, ls[1].LeaseID, "boom", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "busy"}); err != nil {
		t.Fatal(err)
	}

	// Within the retention: nothing leaves.
	e.clock.Advance(30 * time.Minute)
	if res := e.snapshot(time.Hour); res.Purged != 0 || res.Tasks != 4 {
		t.Fatalf("within retention: %+v", res)
	}
	e.clock.Advance(31 * time.Minute)
	res := e.snapshot(time.Hour)
	if res.Purged != 2 || res.Tasks != 2 {
		t.Fatalf("after retention: purged %d, %d tasks left; want 2 and 2", res.Purged, res.Tasks)
	}
	for _, id := range []string{done.Task.ID, failed.Task.ID} {
		if _, err := e.c.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("purged task %s: %v", id, err)
		}
	}
	for _, id := range []string{waiting.Task.ID, leased.Task.ID} {
		if _, err := e.c.Get(ctx, id); err != nil {
			t.Fatalf("live task %s: %v", id, err)
		}
	}
	// The request id of a purged task no longer deduplicates; a live
	// task's still does.
	again, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "order-1"})
	if err != nil || again.Duplicate || again.Task.ID == done.Task.ID {
		t.Fatalf("request id of a purged task: %+v, %v", again, err)
	}
	if dup, _ := e.c.Submit(ctx, SubmitRequest{Queue: "later", RequestID: "order-2"}); !dup.Duplicate {
		t.Fatal("request id of a live task stopped deduplicating")
	}
	// Replay determinism: the whole log, from LSN 1, gives the live state.
	e.replayEqual()
	e.restartEqual()
}

// TestPurgeInSlices: a purge drops every finished task past the retention
// in records of at most MaxPurgedPerRecord tasks each, frees their request
// ids, writes nothing when nothing is due, and a full replay of the log
// gives the live state; a snapshot after it still moves to a new LSN.
func TestPurgeInSlices(t *testing.T) {
	e := newSnapEnv(t, 9)
	e.noCompact = true
	e.maxPurged = 3
	e.mustOpen()
	var done []string
	for i := range 20 {
		queue := "q"
		if i%4 == 3 {
			queue = "idle" // stays waiting
		}
		res, err := e.c.Submit(ctx, SubmitRequest{Queue: queue, RequestID: fmt.Sprint("r", i)})
		if err != nil {
			t.Fatal(err)
		}
		if queue == "idle" {
			continue
		}
		ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 1})
		if err != nil || len(ls) != 1 || ls[0].TaskID != res.Task.ID {
			t.Fatalf("lease: %v %+v", err, ls)
		}
		if err := e.c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
			t.Fatal(err)
		}
		done = append(done, res.Task.ID)
	}
	e.clock.Advance(2 * time.Hour)
	last := e.c.Export().LastLSN
	res, err := e.c.Purge(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res.Purged != len(done) || res.Records != (len(done)+2)/3 || res.LastLSN != last+uint64(res.Records) {
		t.Fatalf("purge of %d finished tasks, 3 per record: %+v (log was at lsn %d)", len(done), res, last)
	}
	if err := e.c.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if err := e.log.Wait(ctx, res.LastLSN); err != nil {
		t.Fatal(err)
	}
	ranges := 0
	if err := e.log.Replay(last+1, func(lsn uint64, en wal.Entry) error {
		r, err := record.Decode(record.Type(en.Type), en.Payload)
		if err != nil {
			return err
		}
		if _, ok := r.(*state.TasksPurgedRange); !ok {
			return fmt.Errorf("record %d is %T, not a TasksPurgedRange", lsn, r)
		}
		ranges++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ranges != res.Records {
		t.Fatalf("%d TasksPurgedRange records in the log, the purge says %d", ranges, res.Records)
	}
	for _, id := range done {
		if _, err := e.c.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("purged task %s: %v", id, err)
		}
	}
	if st := e.c.Stats(); st.Tasks != 20-len(done) {
		t.Fatalf("%d tasks left, want the %d waiting", st.Tasks, 20-len(done))
	}
	if again, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "r0"}); err != nil || again.Duplicate {
		t.Fatalf("request id of a purged task: %+v, %v", again, err)
	}
	if dup, _ := e.c.Submit(ctx, SubmitRequest{Queue: "idle", RequestID: "r3"}); !dup.Duplicate {
		t.Fatal("request id of a waiting task stopped deduplicating")
	}

	// Nothing due: nothing written.
	last = e.c.Export().LastLSN
	if res, err := e.c.Purge(ctx, time.Hour); err != nil || res.Records != 0 || res.Purged != 0 || e.c.Export().LastLSN != last {
		t.Fatalf("purge with nothing due: %+v, %v; log at %d, was %d", res, err, e.c.Export().LastLSN, last)
	}
	// A snapshot writes a record all the same: every snapshot is at a new
	// LSN.
	if snap := e.snapshot(time.Hour); snap.LSN != last+1 || snap.Purged != 0 {
		t.Fatalf("snapshot with nothing to purge: %+v, want lsn %d", snap, last+1)
	}
	e.replayEqual()
	e.restartEqual()
}

// TestSnapshotConcurrentWithRequests takes snapshots while requests run
// (under -race): every restart equals the state before it.
func TestSnapshotConcurrentWithRequests(t *testing.T) {
	e := newSnapEnv(t, 7)
	e.mustOpen()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				res, err := e.c.Submit(ctx, SubmitRequest{Queue: fmt.Sprint("q", w), Payload: []byte{byte(i)}})
				if err != nil {
					t.Error(err)
					return
				}
				ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprint("w", w), Queue: fmt.Sprint("q", w)})
				if err != nil || len(ls) != 1 {
					t.Errorf("lease: %v", err)
					return
				}
				if err := e.c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
					t.Error(err)
					return
				}
				_ = res
			}
		})
	}
	for range 10 {
		if _, err := e.c.Snapshot(ctx, SnapshotConfig{Store: e.store, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	e.snapshot(time.Hour)
	e.restartEqual()
}

// TestSnapshotCopiesInStepsWhileRequestsRun: a snapshot of more tasks than
// one step of its copy, taken while submits, leases and completions run
// (under -race), restores with the log after it to the state before the
// restart. The workers lease from a queue whose tasks were created last,
// so that they change tasks the copy has not reached yet.
func TestSnapshotCopiesInStepsWhileRequestsRun(t *testing.T) {
	e := newSnapEnv(t, 10)
	e.mustOpen()
	for b := range 3 * snapshotCopyStep / 500 {
		queue := "first"
		if b >= snapshotCopyStep/500 {
			queue = "q"
		}
		reqs := make([]SubmitRequest, 500)
		for i := range reqs {
			reqs[i] = SubmitRequest{Queue: queue, Payload: []byte{byte(i)}}
		}
		if _, err := e.c.SubmitBatch(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte{byte(i)}}); err != nil {
					t.Error(err)
					return
				}
				ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprint("w", w), Queue: "q", MaxTasks: 8})
				if err != nil {
					t.Error(err)
					return
				}
				for _, l := range ls {
					if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	for range 3 {
		res := e.snapshot(time.Hour)
		if res.Tasks <= snapshotCopyStep {
			t.Fatalf("the snapshot holds %d tasks, one step of the copy", res.Tasks)
		}
	}
	close(stop)
	wg.Wait()
	e.restartEqual()
}

func TestOpenRefusesCompactedLogWithoutSnapshot(t *testing.T) {
	e := newSnapEnv(t, 8)
	e.mustOpen()
	e.work(200)
	e.snapshot(time.Hour)
	e.work(200)
	e.snapshot(time.Hour)
	e.close()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(e.dir, "wal"), SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Open(ctx, l, Config{Clock: e.clock}); !errors.Is(err, wal.ErrCompacted) || !strings.Contains(err.Error(), "start from the newest snapshot") {
		t.Fatalf("Open of a compacted log: %v", err)
	}
}

func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedCallsKeepNoTaskAlive: heartbeats that name a lease a killed
// task never had are refused without a record, and do not hold the task
// back from the retention purge, however long they go on.
func TestRefusedCallsKeepNoTaskAlive(t *testing.T) {
	e := newSnapEnv(t, 10)
	e.noCompact = true
	e.mustOpen()
	var ids []string
	for i := range 2 {
		res, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: fmt.Sprint("order-", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.c.Kill(ctx, res.Task.ID, Actor{Reason: "not needed"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	lsn := e.c.Stats().LastLSN
	for range 10 {
		e.clock.Advance(time.Second)
		if _, err := e.c.Heartbeat(ctx, ids[0], "stale"); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("heartbeat with a lease the task never had: %v, want lease lost", err)
		}
	}
	if n := e.c.Stats().LastLSN - lsn; n != 0 {
		t.Errorf("10 refused heartbeats appended %d records, want none", n)
	}
	res := e.snapshot(3 * time.Second)
	if res.Purged != 2 || res.Tasks != 0 {
		t.Errorf("purge after the retention: purged %d, %d tasks left; want both killed tasks purged", res.Purged, res.Tasks)
	}
	for _, id := range ids {
		if _, err := e.c.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("task %s after the purge: %v, want not found", id, err)
		}
	}
	e.restartEqual()
}
