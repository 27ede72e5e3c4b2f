package node_test

// Tests of the node's snapshots: the background schedule, recovery from
// snapshots after a restart, and power loss at every step of a snapshot.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
)

func snapConfig(dataDir string, f fsys.FS, clk clock.Clock) node.Config {
	return node.Config{
		DataDir:        dataDir,
		FS:             f,
		SegmentBytes:   4096,
		RestartBackoff: 5 * time.Millisecond,
		Snapshots:      host.Schedule{Disabled: true, Retention: time.Minute},
		Clock:          clk,
	}
}

// churn submits n tasks and completes them, one second of fake time apart.
// With leave, every third task stays leased (and expires in time); without,
// every third task stays waiting in another queue, and no lease is left to
// expire, so that no background expiry runs at an unpredictable moment.
func churn(t *testing.T, n *node.Node, clk *clock.Fake, count int, leave bool) {
	t.Helper()
	ctx := context.Background()
	for i := range count {
		if !leave && i%3 == 0 {
			if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "idle"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint("task ", i))}); err != nil {
			t.Fatal(err)
		}
		ls, err := n.Coordinator().Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q"})
		if err != nil || len(ls) != 1 {
			t.Fatalf("lease: %v (%d)", err, len(ls))
		}
		if !leave || i%3 != 0 {
			if err := n.Coordinator().Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Second)
	}
}

// settle moves the fake clock by d and waits until the node's two loops
// (the snapshot schedule and the lease expiry scan) are waiting again:
// then whatever the move made due has run.
func settle(clk *clock.Fake, d time.Duration) {
	clk.Advance(d)
	clk.WaitForTimers(2)
}

// TestBackgroundSnapshots: the schedule snapshots once enough records were
// written, keeps the newest two and deletes the WAL segments below them;
// a restart loads the newest and replays the rest to the same state.
func TestBackgroundSnapshots(t *testing.T) {
	dataDir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := snapConfig(dataDir, nil, clk)
	// Checked every hour of fake time: churn (a second per task) never
	// reaches a check, settle does.
	cfg.Snapshots = host.Schedule{EveryRecords: 100, Every: 100 * time.Hour, CheckInterval: time.Hour, Retention: time.Minute}
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { n.Close() }()
	store := snapshot.Dir{Path: filepath.Join(dataDir, node.SnapshotDir)}
	settle(clk, time.Hour)
	if lsns, _ := store.List(); len(lsns) != 0 {
		t.Fatalf("snapshots %v before any record was written", lsns)
	}
	var taken []uint64
	for range 3 {
		churn(t, n, clk, 40, true)
		settle(clk, time.Hour)
		lsns, _ := store.List()
		if len(lsns) == 0 || (len(taken) > 0 && lsns[len(lsns)-1] == taken[len(taken)-1]) {
			t.Fatalf("after 40 more tasks (over 100 records) and a check: snapshots %v, taken before %v", lsns, taken)
		}
		taken = append(taken, lsns[len(lsns)-1])
	}
	if lsns, _ := store.List(); !reflect.DeepEqual(lsns, taken[1:]) {
		t.Fatalf("snapshots %v, want the newest two of %v", lsns, taken)
	}
	segs, _ := filepath.Glob(filepath.Join(dataDir, node.WALDir, "*.wal"))
	if first := filepath.Base(segs[0]); first == fmt.Sprintf("%016x.wal", 1) {
		t.Fatal("no WAL segment was deleted")
	}
	before := n.Coordinator().Export()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = node.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, n.Coordinator().Export()) {
		t.Fatal("state after restart differs")
	}
	// Retention: tasks completed over a minute (of fake time) before the
	// last snapshot are gone.
	if got := n.Coordinator().Stats().ByState[state.Completed]; got > 30 {
		t.Fatalf("%d completed tasks kept with a one-minute retention", got)
	}
}

// TestTimedSnapshot: a snapshot is taken SnapshotEvery after the last one
// if anything was written since, and not otherwise — driven by the fake
// clock alone.
func TestTimedSnapshot(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := snapConfig(dataDir, nil, clk)
	cfg.Snapshots = host.Schedule{Every: 10 * time.Minute, CheckInterval: time.Second}
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	store := snapshot.Dir{Path: filepath.Join(dataDir, node.SnapshotDir)}
	for range 3 {
		if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	settle(clk, 10*time.Minute-time.Second)
	if lsns, _ := store.List(); len(lsns) != 0 {
		t.Fatalf("snapshots %v before the interval passed", lsns)
	}
	settle(clk, time.Second)
	// The three submits and the snapshot's purge record.
	if lsns, _ := store.List(); !reflect.DeepEqual(lsns, []uint64{4}) {
		t.Fatalf("snapshots %v once the interval passed, want [4]", lsns)
	}
	settle(clk, 10*time.Minute)
	if lsns, _ := store.List(); !reflect.DeepEqual(lsns, []uint64{4}) {
		t.Fatalf("snapshots %v after an interval without records, want [4]", lsns)
	}
	if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	settle(clk, 10*time.Minute)
	if lsns, _ := store.List(); !reflect.DeepEqual(lsns, []uint64{4, 6}) {
		t.Fatalf("snapshots %v after a record and an interval, want [4 6]", lsns)
	}
}

// TestPurgeBetweenSnapshots: finished tasks leave the state every
// PurgeEvery once past the retention, with no snapshot taken, and a purge
// with nothing to drop writes nothing.
func TestPurgeBetweenSnapshots(t *testing.T) {
	dataDir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := snapConfig(dataDir, nil, clk)
	// Purges every 6 s (a tenth of the retention); snapshots only hourly.
	cfg.Snapshots = host.Schedule{Every: time.Hour, CheckInterval: time.Second, Retention: time.Minute}
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	churn(t, n, clk, 30, false)
	if got := n.Coordinator().Stats().ByState[state.Completed]; got != 30 {
		t.Fatalf("%d completed tasks after the churn, want 30", got)
	}
	settle(clk, time.Second) // the first tasks are 31 s old: within the retention
	if got := n.Coordinator().Stats().ByState[state.Completed]; got != 30 {
		t.Fatalf("%d completed tasks within the retention, want 30", got)
	}
	settle(clk, 45*time.Second) // now 16 to 75 s old
	if got := n.Coordinator().Stats().ByState[state.Completed]; got == 0 || got == 30 {
		t.Fatalf("%d completed tasks when part of them is past the retention, want some purged and some not", got)
	}
	settle(clk, 45*time.Second)
	if got := n.Coordinator().Stats().ByState[state.Completed]; got != 0 {
		t.Fatalf("%d completed tasks past the retention, want 0", got)
	}
	if got := n.Coordinator().Stats().ByState[state.Waiting]; got != 10 {
		t.Fatalf("%d waiting tasks, want the 10 left waiting", got)
	}
	store := snapshot.Dir{Path: filepath.Join(dataDir, node.SnapshotDir)}
	if lsns, _ := store.List(); len(lsns) != 0 {
		t.Fatalf("snapshots %v: the purges were to run without one", lsns)
	}
	last := n.Coordinator().Export().LastLSN
	for range 5 {
		settle(clk, 10*time.Second)
	}
	if got := n.Coordinator().Export().LastLSN; got != last {
		t.Fatalf("the log moved from lsn %d to %d with nothing to purge", last, got)
	}
}

func TestAdminSnapshot(t *testing.T) {
	dataDir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	n, err := node.Open(context.Background(), snapConfig(dataDir, nil, clk))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	churn(t, n, clk, 120, true)
	res, err := n.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Purged == 0 || res.Tasks != n.Coordinator().Stats().Tasks || res.Path != filepath.Join(dataDir, node.SnapshotDir, snapshot.FileName(res.LSN)) {
		t.Fatalf("snapshot result %+v", res)
	}
}

func TestLockShared(t *testing.T) {
	dataDir := t.TempDir()
	// No LOCK file yet: nothing to lock.
	release, err := node.LockShared(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	release()
	n, err := node.Open(context.Background(), node.Config{DataDir: dataDir, Snapshots: host.Schedule{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.LockShared(dataDir); !errors.Is(err, node.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("LockShared while a node runs: %v", err)
	}
	n.Close()
	release, err = node.LockShared(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Open(context.Background(), node.Config{DataDir: dataDir}); !errors.Is(err, node.ErrLocked) {
		t.Fatalf("a node started while a reader holds the lock: %v", err)
	}
	release()
}

// TestSnapshotPowerLossAtEveryOp cuts the power after every disk operation
// of a snapshot (purge record, snapshot file, removal of the older
// snapshot, deletion of WAL segments): the node always restarts, and its
// state is the state before the snapshot, or that state after the purge.
func TestSnapshotPowerLossAtEveryOp(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// setup runs the same workload each time: two snapshots taken, then
	// more work, leaving the node just before a third.
	setup := func(t *testing.T) (string, *faultfs.FS, *node.Node, *clock.Fake) {
		dataDir := t.TempDir()
		f := faultfs.NewWithDir(dataDir)
		clk := clock.NewFake(start)
		cfg := snapConfig(dataDir, f, clk)
		cfg.Coordinator.ExpiryScanInterval = time.Hour
		n, err := node.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			churn(t, n, clk, 60, false)
			if _, err := n.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
		churn(t, n, clk, 60, false)
		return dataDir, f, n, clk
	}
	_, probe, pn, _ := setup(t)
	from := probe.Ops()
	res, err := pn.Snapshot(ctx)
	if err != nil || res.Purged == 0 || res.DeletedSegments == 0 || len(res.Removed) != 1 {
		t.Fatalf("probe snapshot: %+v, %v (the test needs a purge, a removal and deleted segments)", res, err)
	}
	to := probe.Ops()
	pn.Close()

	outcomes := map[string]int{}
	for cut := from + 1; cut <= to; cut++ {
		dataDir, f, n, clk := setup(t)
		if f.Ops() != from {
			t.Fatalf("the workload took %d operations, the probe %d: not deterministic", f.Ops(), from)
		}
		before := n.Coordinator().Export()
		cutoff := state.TimeOf(clk.Now().Add(-time.Minute))
		f.CutPowerAfter(cut)
		n.Snapshot(ctx)
		n.Close()
		disk := f.PowerLoss()
		n2, err := node.Open(ctx, snapConfig(dataDir, disk, clock.NewFake(clk.Now())))
		if err != nil {
			t.Fatalf("cut after op %d (%v): restart: %v", cut, probe.Trace()[cut-1].Kind, err)
		}
		got := n2.Coordinator().Export()
		n2.Close()
		if reflect.DeepEqual(got, before) {
			outcomes["before"]++
			continue
		}
		outcomes["purged"]++
		// The purge keeps every queue: each counted events within the hour.
		purged := state.Export{LastLSN: before.LastLSN + 1, Epoch: before.Epoch, Queues: before.Queues}
		for _, tk := range before.Tasks {
			if !tk.State.Terminal() || tk.UpdatedAt >= cutoff {
				purged.Tasks = append(purged.Tasks, tk)
			}
		}
		if !reflect.DeepEqual(got, purged) {
			t.Fatalf("cut after op %d (%v): state after restart is neither the state before the snapshot nor after its purge (lsn %d, %d tasks; before: lsn %d, %d tasks)",
				cut, probe.Trace()[cut-1].Kind, got.LastLSN, len(got.Tasks), before.LastLSN, len(before.Tasks))
		}
	}
	if outcomes["before"] == 0 || outcomes["purged"] == 0 {
		t.Fatalf("outcomes %v over %d cut points: the test should see both", outcomes, to-from)
	}
	t.Logf("outcomes over %d cut points: %v", to-from, outcomes)
}
