package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/snapshot"
)

// walFixture is a data directory written by a node: two snapshots, WAL
// segments below the older one deleted, and a tail after the newer one.
type walFixture struct {
	dir     string
	midLSN  uint64             // a point in the middle of the tail
	mid     coordinator.Stats  // the state's counts then
	task    string             // a task WAITING at midLSN, COMPLETED later
	history []record.Type      // its records, in order
	final   coordinator.Stats  // counts at the end
	snaps   []uint64           // snapshot LSNs
	cfg     func() node.Config // to reopen the node
}

func newWALFixture(t *testing.T) *walFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := func() node.Config {
		return node.Config{DataDir: dir, SegmentBytes: 4096, Snapshots: host.Schedule{Disabled: true, Retention: time.Minute},
			Coordinator: coordinator.Config{Clock: clk, ExpiryScanInterval: time.Hour}}
	}
	n, err := node.Open(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer waitUnlocked(t, dir)
	defer n.Close()
	f := &walFixture{dir: dir, cfg: cfg}
	work := func(count int) {
		for i := range count {
			if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint("p", i))}); err != nil {
				t.Fatal(err)
			}
			ls, err := n.Coordinator().Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q"})
			if err != nil || len(ls) != 1 {
				t.Fatalf("lease: %v", err)
			}
			if err := n.Coordinator().Complete(ctx, ls[0].TaskID, ls[0].LeaseID, []byte("ok")); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Second)
		}
	}
	snap := func() {
		res, err := n.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f.snaps = append(f.snaps, res.LSN)
	}
	work(100)
	snap()
	work(100)
	snap()
	work(60)
	res, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "later", Payload: []byte("watch me")})
	if err != nil {
		t.Fatal(err)
	}
	f.task = res.Task.ID
	work(30)
	f.mid = n.Coordinator().Stats()
	f.midLSN = f.mid.LastLSN
	ls, err := n.Coordinator().Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "later"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease: %v", err)
	}
	if err := n.Coordinator().Complete(ctx, ls[0].TaskID, ls[0].LeaseID, []byte("done")); err != nil {
		t.Fatal(err)
	}
	work(60)
	f.final = n.Coordinator().Stats()
	f.history = []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeTaskCompleted}
	return f
}

// waitUnlocked waits until the data directory's lock is free. The node
// released it on Close, but a child this test process forked meanwhile (a
// parallel test starting a server or a CLI) holds a copy of the locked file
// until it execs; the tools would then report the directory in use by this
// very process.
func waitUnlocked(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(dir) // the lock is on the directory itself
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eventually.NoError(t, "the data directory "+dir+" unlocked after its node closed", func() error {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return err
		}
		return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	})
}

func (f *walFixture) segments(t *testing.T) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(f.dir, node.WALDir, "*.wal"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("%d segments (%v); the fixture needs at least 3", len(segs), err)
	}
	return segs
}

func TestWALVerify(t *testing.T) {
	t.Parallel()
	f := newWALFixture(t)
	out := mustCLI(t, "wal", "verify", "--data-dir", f.dir)
	if !strings.Contains(out, "OK: ") || !strings.Contains(out, "2 snapshots") ||
		!strings.Contains(out, fmt.Sprintf("the state after lsn %d has %d tasks", f.final.LastLSN, f.final.Tasks)) {
		t.Fatalf("verify:\n%s", out)
	}
	if segs := f.segments(t); strings.HasSuffix(segs[0], "0000000000000001.wal") {
		t.Fatal("no segment was deleted; the fixture should compact")
	}

	// A running server holds the directory. (The verify above released
	// it, but a child forked meanwhile may hold it until it execs.)
	waitUnlocked(t, f.dir)
	n, err := node.Open(context.Background(), f.cfg())
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs := cli(t, "wal", "verify", "--data-dir", f.dir)
	if code != 1 || !strings.Contains(errs, "in use by a running tenure server") || !strings.Contains(errs, "--force-read") {
		t.Fatalf("verify while a server runs: exit %d, %s", code, errs)
	}
	if code, out, _ := cli(t, "wal", "verify", "--data-dir", f.dir, "--force-read"); code != 0 || !strings.Contains(out, "OK: ") {
		t.Fatalf("verify --force-read: exit %d\n%s", code, out)
	}
	n.Close()

	if code, _, errs := cli(t, "wal", "verify", "--data-dir", filepath.Join(f.dir, "nope")); code != 1 || !strings.Contains(errs, "no data directory") {
		t.Fatalf("missing dir: exit %d, %s", code, errs)
	}
}

func TestWALVerifyFindsDamage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// damage damages the fixture's data directory and returns what
		// verify prints of it.
		damage func(t *testing.T, f *walFixture) []string
	}{
		{"segment", func(t *testing.T, f *walFixture) []string {
			seg := f.segments(t)[1] // not the last: a bad frame there is corruption
			flipAt(t, seg, 200)
			return []string{"FAIL " + seg + " at offset "}
		}},
		{"snapshot", func(t *testing.T, f *walFixture) []string {
			path := filepath.Join(f.dir, node.SnapshotDir, snapshot.FileName(f.snaps[1]))
			flipAt(t, path, 100)
			return []string{"FAIL " + path + " at offset 32: chunk checksum mismatch"}
		}},
		{"record", func(t *testing.T, f *walFixture) []string {
			// A valid frame whose payload is not a record: rewrite a
			// frame's type to an unknown one and fix its checksum.
			seg := f.segments(t)[1]
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			const off = 24 // the first frame
			b[off+8] = 99
			fixFrameCRC(b[off:])
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("FAIL %s at offset %d", seg, off), "unknown record type 99"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newWALFixture(t)
			want := tc.damage(t, f)
			code, out, _ := cli(t, "wal", "verify", "--data-dir", f.dir)
			for _, w := range want {
				if code != 1 || !strings.Contains(out, w) {
					t.Fatalf("exit %d, want 1 and %q:\n%s", code, w, out)
				}
			}
		})
	}
}

// TestWALVerifyFailsOnLostRecords: a snapshot that verifies and ends after
// the log's last record proves records gone; verify fails, naming the
// snapshot and the range, and how to give the records up.
func TestWALVerifyFailsOnLostRecords(t *testing.T) {
	t.Parallel()
	f := newWALFixture(t)
	// Delete the segment holding the newer snapshot's lsn and every later
	// one: the log now ends before that snapshot.
	var cut uint64
	segs := f.segments(t)
	for _, p := range segs {
		if first, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".wal"), 16, 64); first <= f.snaps[1] {
			cut = first
		}
	}
	for _, p := range segs {
		if first, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".wal"), 16, 64); first >= cut {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cut <= f.snaps[0]+1 {
		t.Fatalf("the log now ends at %d, not after the older snapshot %d; the fixture needs more segments", cut-1, f.snaps[0])
	}
	// The node closed cleanly: the WAL's tail file names its last record,
	// and the loss runs up to it.
	lost := fmt.Sprintf("%d-%d", cut, f.final.LastLSN)
	path := filepath.Join(f.dir, node.SnapshotDir, snapshot.FileName(f.snaps[1]))
	code, out, _ := cli(t, "wal", "verify", "--data-dir", f.dir)
	if code != 1 || !strings.Contains(out, "FAIL "+path+" verifies and ends at lsn "+fmt.Sprint(f.snaps[1])) ||
		!strings.Contains(out, fmt.Sprintf("says the log held every record up to lsn %d", f.final.LastLSN)) ||
		!strings.Contains(out, "records "+lost+" (at least) are gone") || !strings.Contains(out, "--accept-lost-records "+lost) {
		t.Fatalf("verify of a log that lost records %s: exit %d\n%s", lost, code, out)
	}
}

func TestWALDump(t *testing.T) {
	t.Parallel()
	f := newWALFixture(t)
	type line struct {
		LSN    uint64         `json:"lsn"`
		Type   string         `json:"type"`
		Record map[string]any `json:"record"`
	}
	parse := func(out string) []line {
		t.Helper()
		var ls []line
		for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
			var l line
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				t.Fatalf("line %q: %v", s, err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	got := parse(mustCLI(t, "wal", "dump", "--data-dir", f.dir, "--task", f.task))
	if len(got) != len(f.history) {
		t.Fatalf("dump --task: %d lines, want %d: %+v", len(got), len(f.history), got)
	}
	for i, l := range got {
		if l.Type != f.history[i].String() || l.Record["taskId"] != f.task || (i > 0 && l.LSN <= got[i-1].LSN) {
			t.Fatalf("line %d: %+v", i, l)
		}
	}
	if got[0].Record["payload"] != "d2F0Y2ggbWU=" { // base64 of "watch me"
		t.Fatalf("payload %v", got[0].Record["payload"])
	}

	from, to := f.midLSN-9, f.midLSN
	got = parse(mustCLI(t, "wal", "dump", "--data-dir", f.dir, "--from", fmt.Sprint(from), "--to", fmt.Sprint(to)))
	if len(got) != 10 || got[0].LSN != from || got[9].LSN != to {
		t.Fatalf("dump --from %d --to %d: %d lines, %d..%d", from, to, len(got), got[0].LSN, got[len(got)-1].LSN)
	}
	// Below the first record still on disk: a note, then from the start.
	code, out, errs := cli(t, "wal", "dump", "--data-dir", f.dir, "--from", "1", "--to", fmt.Sprint(f.final.LastLSN))
	if code != 0 || !strings.Contains(errs, "were deleted") {
		t.Fatalf("dump --from 1: exit %d, %s", code, errs)
	}
	all := parse(out)
	if all[len(all)-1].LSN != f.final.LastLSN || all[0].LSN <= 1 {
		t.Fatalf("dump of everything: %d..%d", all[0].LSN, all[len(all)-1].LSN)
	}
	// Each snapshot's last record is its retention purge.
	purge := false
	for _, l := range all {
		if l.LSN == f.snaps[1] {
			purge = l.Type == "TasksPurgedRange" && l.Record["beforeUnixNanos"] != nil
		}
	}
	if !purge {
		t.Fatalf("the record at lsn %d (the newer snapshot) is not a TasksPurgedRange", f.snaps[1])
	}
	usageRefused(t, []string{"wal", "dump", "--data-dir", f.dir, "--from", "9", "--to", "3"}, "after --to")
}

func TestWALState(t *testing.T) {
	t.Parallel()
	f := newWALFixture(t)
	var st struct {
		LSN          uint64         `json:"lsn"`
		FromSnapshot uint64         `json:"fromSnapshot"`
		Replayed     int            `json:"replayed"`
		Tasks        int            `json:"tasks"`
		ByState      map[string]int `json:"byState"`
		Task         map[string]any `json:"task"`
	}
	out := mustCLI(t, "wal", "state", "--data-dir", f.dir, "--at", fmt.Sprint(f.midLSN), "--task", f.task, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if st.LSN != f.midLSN || st.Tasks != f.mid.Tasks || st.FromSnapshot != f.snaps[1] || st.Replayed != int(f.midLSN-f.snaps[1]) {
		t.Fatalf("state --at %d: %+v (want %d tasks, from snapshot %d)", f.midLSN, st, f.mid.Tasks, f.snaps[1])
	}
	for ts, n := range f.mid.ByState {
		if st.ByState[ts.String()] != n {
			t.Fatalf("%s: %d, want %d", ts, st.ByState[ts.String()], n)
		}
	}
	if st.Task["state"] != "TASK_STATE_WAITING" {
		t.Fatalf("task at lsn %d: %v", f.midLSN, st.Task)
	}
	// Text, at the end: the task completed.
	out = mustCLI(t, "wal", "state", "--data-dir", f.dir, "--task", f.task)
	for _, want := range []string{fmt.Sprintf("state after lsn %d (snapshot at lsn %d", f.final.LastLSN, f.snaps[1]),
		fmt.Sprintf("%d tasks", f.final.Tasks), "task " + f.task, "state COMPLETED", `result "done"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("state lacks %q:\n%s", want, out)
		}
	}
	// From the older snapshot, just after it.
	out = mustCLI(t, "wal", "state", "--data-dir", f.dir, "--at", fmt.Sprint(f.snaps[0]+1), "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.FromSnapshot != f.snaps[0] || st.Replayed != 1 {
		t.Fatalf("state just after the older snapshot: %v %+v", err, st)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--at", "3"}, "no longer available"},
		{[]string{"--at", fmt.Sprint(f.final.LastLSN + 1)}, "after the log's last record"},
		{[]string{"--task", "nope"}, `no task "nope"`},
	} {
		code, _, errs := cli(t, append([]string{"wal", "state", "--data-dir", f.dir}, tc.args...)...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Fatalf("wal state %v: exit %d, %s", tc.args, code, errs)
		}
	}
}

// fixFrameCRC recomputes the checksum of the WAL frame at the start of b
// (format in internal/wal/doc.go).
func fixFrameCRC(b []byte) {
	n := binary.LittleEndian.Uint32(b[0:4])
	crc := crc32.Update(0, crc32.MakeTable(crc32.Castagnoli), b[8:20])
	crc = crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b[20:20+n])
	binary.LittleEndian.PutUint32(b[4:8], crc)
}

func flipAt(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x08
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
