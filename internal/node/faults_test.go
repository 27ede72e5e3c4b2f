package node_test

// Fault-injection tests of the node's recovery from storage failures: after
// a write or fsync failure, or a full disk, the node refuses requests with
// coordinator.ErrUnavailable, reopens its WAL from disk in the background and
// serves again, and nothing acknowledged is lost, even to a power loss.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

func openNode(t *testing.T, dataDir string, f *faultfs.FS) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), node.Config{
		DataDir:           dataDir,
		FS:                f,
		SegmentBytes:      4096,
		RestartBackoff:    5 * time.Millisecond,
		MaxRestartBackoff: 20 * time.Millisecond,
		Clock:             clock.Real, // the reopen's waits; the records' time is the fake one
		Coordinator:       coordinator.Config{Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
	})
	if err != nil {
		t.Fatalf("open node: %v", err)
	}
	return n
}

// submit submits a task through the node, as the API does: a request that
// meets a failed log starts the node's recovery.
func submit(n *node.Node, payload string) (res coordinator.SubmitResult, err error) {
	err = n.Do(func(c *coordinator.Coordinator) error {
		res, err = c.Submit(context.Background(), coordinator.SubmitRequest{Queue: "q", Payload: []byte(payload)})
		return err
	})
	return res, err
}

func get(n *node.Node, id string) (t *state.Task, err error) {
	err = n.Do(func(c *coordinator.Coordinator) error {
		t, err = c.Get(context.Background(), id)
		return err
	})
	return t, err
}

// submitUntil retries a submit while the node reopens its WAL, up to a bound
// (a bound on a wait, not a timing assertion).
func submitUntil(t *testing.T, n *node.Node, payload string) string {
	t.Helper()
	var err error
	for range 2000 {
		var res coordinator.SubmitResult
		res, err = submit(n, payload)
		if err == nil {
			return res.Task.ID
		}
		if !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("submit %q: %v", payload, err)
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the node did not serve again: %v", err)
	return ""
}

func checkTasks(t *testing.T, n *node.Node, ids []string, what string) {
	t.Helper()
	for i, id := range ids {
		task, err := get(n, id)
		if err != nil || string(task.Payload) != fmt.Sprintf("task %d", i) {
			t.Fatalf("%s: acknowledged task %d (%s): %v", what, i, id, err)
		}
	}
}

func TestFaultNodeReopensAfterStorageFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(f *faultfs.FS)
		heal   func(f *faultfs.FS)
		want   string // in the refusal's message
	}{
		{"fsync", func(f *faultfs.FS) { f.FailNext(faultfs.OpSync, nil) }, func(*faultfs.FS) {}, "input/output error"},
		{"write", func(f *faultfs.FS) { f.FailNext(faultfs.OpWrite, nil) }, func(*faultfs.FS) {}, "input/output error"},
		{"enospc", func(f *faultfs.FS) { f.TearWrites(true); f.SetFull(true) }, func(f *faultfs.FS) { f.SetFull(false) }, "space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			f := faultfs.NewWithDir(dataDir)
			n := openNode(t, dataDir, f)
			defer n.Close()
			var ids []string
			for i := range 5 {
				ids = append(ids, submitUntil(t, n, fmt.Sprintf("task %d", i)))
			}

			tc.inject(f)
			_, err := submit(n, "refused")
			if !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("submit after the fault = %v, want ErrUnavailable mentioning %q", err, tc.want)
			}
			if tc.name == "enospc" {
				// While the disk is full, writes keep being refused: the node
				// does not serve until it can write again.
				for range 3 {
					_, err := submit(n, "refused")
					if !errors.Is(err, coordinator.ErrUnavailable) {
						t.Fatalf("submit on a full disk = %v", err)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			tc.heal(f)
			for i := 5; i < 8; i++ {
				ids = append(ids, submitUntil(t, n, fmt.Sprintf("task %d", i)))
			}
			checkTasks(t, n, ids, "after reopening")
			if err := n.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			n = openNode(t, dataDir, f.PowerLoss())
			defer n.Close()
			checkTasks(t, n, ids, "after a power loss")
		})
	}
}

// TestFaultPowerLossWithFsyncOffLosesRecords: with fsync off, a power loss
// after a snapshot takes records from the WAL that the snapshot (fsynced)
// proves were there. The restart refuses, naming the range and fsync none as
// the likely cause, and changes nothing; accepting exactly that range
// serves the WAL as it survived, once.
func TestFaultPowerLossWithFsyncOffLosesRecords(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	f := faultfs.NewWithDir(dataDir)
	cfg := func(f *faultfs.FS) node.Config {
		return node.Config{
			DataDir:     dataDir,
			FS:          f,
			Sync:        wal.SyncNone,
			Snapshots:   host.Schedule{Disabled: true},
			Coordinator: coordinator.Config{Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		}
	}
	n, err := node.Open(ctx, cfg(f))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 10 {
		ids = append(ids, submitUntil(t, n, fmt.Sprintf("task %d", i)))
	}
	// Closing writes back and fsyncs the WAL: these ten are on the disk.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err = node.Open(ctx, cfg(f)); err != nil {
		t.Fatal(err)
	}
	durable := n.Coordinator().Stats().LastLSN
	for i := 10; i < 20; i++ {
		submitUntil(t, n, fmt.Sprintf("task %d", i))
	}
	res, err := n.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	disk := f.PowerLoss() // the process dies with the machine: no Close
	n.Close()

	lost := coordinator.LSNRange{First: durable + 1, Last: res.LSN}
	_, err = node.Open(ctx, cfg(disk))
	le, ok := errors.AsType[*coordinator.LostRecordsError](err)
	if !ok || le.Lost != lost {
		t.Fatalf("restart after the power loss = %v, want a refusal for the loss of records %v", err, lost)
	}
	for _, want := range []string{res.Path, lost.String(), "fsync none", "power loss"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal lacks %q: %v", want, err)
		}
	}
	store := snapshot.Dir{FS: disk, Path: filepath.Join(dataDir, node.SnapshotDir)}
	if lsns, _ := store.List(); len(lsns) != 1 || lsns[0] != res.LSN {
		t.Fatalf("the refused start changed the snapshots: %v", lsns)
	}

	c := cfg(disk)
	c.AcceptLostRecords = lost
	n, err = node.Open(ctx, c)
	if err != nil {
		t.Fatalf("restart accepting %v: %v", lost, err)
	}
	defer n.Close()
	if got := n.Coordinator().Stats(); got.LastLSN != durable || got.Tasks != len(ids) {
		t.Fatalf("serving lsn %d with %d tasks, want the %d durable records' %d tasks", got.LastLSN, got.Tasks, durable, len(ids))
	}
	checkTasks(t, n, ids, "after the accepted loss")
	if d, _ := store.Discarded(); len(d) != 1 {
		t.Fatalf("discarded %v, want the snapshot at lsn %d", d, res.LSN)
	}
}

func TestAcceptLostRecordsOnlyInNodeConfig(t *testing.T) {
	_, err := node.Open(context.Background(), node.Config{DataDir: t.TempDir(),
		Coordinator: coordinator.Config{AcceptLostRecords: coordinator.LSNRange{First: 1, Last: 2}}})
	if err == nil || !strings.Contains(err.Error(), "set Config.AcceptLostRecords") {
		t.Fatalf("open = %v", err)
	}
}

// countOpens counts the host's opens (each a replay of the WAL).
type countOpens struct{ n atomic.Int32 }

func (o *countOpens) Opened(*host.Host, time.Duration)                 { o.n.Add(1) }
func (o *countOpens) Snapshotted(*host.Host, time.Duration, time.Time) {}
func (o *countOpens) Purged(*host.Host, coordinator.PurgeResult)       {}
func (o *countOpens) Closed(*host.Host)                                {}

// writeChecks counts the node's checks that the data directory takes a
// write: one per attempt to open the WAL.
func writeChecks(f *faultfs.FS) int {
	n := 0
	for _, op := range f.Trace() {
		if op.Kind == faultfs.OpCreate && filepath.Base(op.Path) == ".tenure-write-check" {
			n++
		}
	}
	return n
}

// TestFullDiskBacksOffWithoutReplaying: on a full disk the node tries to
// reopen its WAL at once, then after 1, 2, 4, 8, 8... seconds (its clock,
// faked by testing/synctest), and replays the WAL at none of these
// attempts: each stops at the write check. When there is room again, the
// next attempt replays once and serves. A failure after a record became
// durable reopens at once again; one right after a reopen waits.
func TestFullDiskBacksOffWithoutReplaying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dataDir := t.TempDir()
		f := faultfs.NewWithDir(dataDir)
		var opens countOpens
		n, err := node.Open(context.Background(), node.Config{
			DataDir:           dataDir,
			FS:                f,
			SegmentBytes:      4096,
			RestartBackoff:    time.Second,
			MaxRestartBackoff: 8 * time.Second,
			Snapshots:         host.Schedule{Disabled: true},
			Coordinator:       coordinator.Config{ExpiryScanInterval: time.Hour},
			Clock:             clock.Real, // the bubble's fake time
			HostObserver:      &opens,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		var ids []string
		for i := range 3 {
			res, err := submit(n, fmt.Sprintf("task %d", i))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.Task.ID)
		}
		checks := writeChecks(f)
		state := func(what string, wantChecks int, wantOpens int32) {
			t.Helper()
			synctest.Wait()
			if got := writeChecks(f) - checks; got != wantChecks || opens.n.Load() != wantOpens {
				t.Fatalf("%s: %d write checks and %d opens, want %d and %d", what, got, opens.n.Load(), wantChecks, wantOpens)
			}
		}

		f.SetFull(true)
		if _, err := submit(n, "refused"); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("submit on a full disk = %v", err)
		}
		state("at once after the failure", 1, 1)
		attempts := 1
		for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
			time.Sleep(wait - time.Millisecond)
			state(fmt.Sprintf("%v into a wait of %v", wait-time.Millisecond, wait), attempts, 1)
			time.Sleep(time.Millisecond)
			attempts++
			state(fmt.Sprintf("after a wait of %v", wait), attempts, 1)
		}
		_, err = submit(n, "refused")
		if !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "out of disk space") {
			t.Fatalf("submit while the disk stays full = %v, want unavailable naming the full disk", err)
		}

		f.SetFull(false)
		time.Sleep(8 * time.Second)
		state("once there is room", attempts+1, 2)
		ids = append(ids, submitUntil(t, n, "task 3"))
		checkTasks(t, n, ids, "after the disk had room again")

		// A failure after records became durable: reopened at once.
		f.FailNext(faultfs.OpSync, nil)
		if _, err := submit(n, "refused"); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("submit on a failing fsync = %v", err)
		}
		synctest.Wait()
		if opens.n.Load() != 3 || n.Err() != nil {
			t.Fatalf("after a failure that followed durable records: %d opens, Err %v; want a reopen at once", opens.n.Load(), n.Err())
		}
		// Another one before anything became durable: a wait first.
		f.FailNext(faultfs.OpSync, nil)
		if _, err := submit(n, "refused"); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("submit on a failing fsync = %v", err)
		}
		synctest.Wait()
		if opens.n.Load() != 3 {
			t.Fatalf("a failure right after a reopen reopened at once (%d opens)", opens.n.Load())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if opens.n.Load() != 4 || n.Err() != nil {
			t.Fatalf("a second after the failure: %d opens, Err %v; want the reopen", opens.n.Load(), n.Err())
		}
		ids = append(ids, submitUntil(t, n, "task 4"))
		checkTasks(t, n, ids, "after the reopens")
	})
}
