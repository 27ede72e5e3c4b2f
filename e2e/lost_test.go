package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"

	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/wal"
)

// submitNumbered submits task i: request id req-i, payload "task i".
func submitNumbered(t *testing.T, c *apiClients, i int) *tenurev1.SubmitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	resp, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", RequestId: fmt.Sprint("req-", i), Payload: []byte(fmt.Sprint("task ", i))}))
	if err != nil {
		t.Fatalf("submit req-%d: %v", i, err)
	}
	return resp.Msg
}

// submitNumberedAll submits tasks 1..n to srv (submitNumbered) and
// returns their ids, at their numbers.
func submitNumberedAll(t *testing.T, srv *serverProc, n int) []string {
	t.Helper()
	c := newJSONClients(t, srv)
	ids := make([]string, n+1)
	for i := 1; i <= n; i++ {
		ids[i] = submitNumbered(t, c, i).GetTask().GetTaskId()
	}
	return ids
}

// refusesLoss checks that a server on dir, whose records lost are gone,
// refuses to start (what: on what log): without --accept-lost-records
// with a message naming the loss, each of want, and the flag that
// accepts it; with --accept-lost-records wrong, naming lost instead.
func refusesLoss(t *testing.T, dir, what, lost, wrong string, want ...string) {
	t.Helper()
	addr := freeLoopbackAddr(t)
	code, out := runBin(t, "server", "--data-dir", dir, "--listen", addr)
	for _, w := range append(want, "records "+lost, "acknowledged work", "--accept-lost-records "+lost) {
		if code == 0 || !strings.Contains(out, w) {
			t.Fatalf("server %s: exit %d, want non-zero and a message with %q:\n%s", what, code, w, out)
		}
	}
	code, out = runBin(t, "server", "--data-dir", dir, "--listen", addr, "--accept-lost-records", wrong)
	if code == 0 || !strings.Contains(out, "pass --accept-lost-records "+lost+" instead of "+wrong) {
		t.Fatalf("server accepting %s of the lost %s: exit %d\n%s", wrong, lost, code, out)
	}
}

// acceptsLoss starts a server on dir with --accept-lost-records lost (and
// args) and checks that it logs the loss as an error and serves the kept
// tasks the log holds: the request id of task 1 (of ids, the tasks
// submitNumberedAll submitted) is still taken, the last one's is free.
func acceptsLoss(t *testing.T, dir, lost string, kept int, ids []string, args ...string) *serverProc {
	t.Helper()
	srv := startServerProc(t, dir, append(args, "--accept-lost-records", lost)...)
	if log := srv.out.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "accepted="+lost) {
		t.Fatalf("the accepted loss is not logged as an error naming %s:\n%s", lost, log)
	}
	c := newJSONClients(t, srv)
	if n := len(listAllTasks(t, c, "default")); n != kept {
		t.Fatalf("serving %d tasks, want the %d the WAL holds", n, kept)
	}
	if r := submitNumbered(t, c, 1); !r.GetDuplicate() || r.GetTask().GetTaskId() != ids[1] {
		t.Fatalf("req-1, kept: %v", r)
	}
	// What accepting the loss means: a lost task's request id is free.
	last := len(ids) - 1
	if r := submitNumbered(t, c, last); r.GetDuplicate() || r.GetTask().GetTaskId() == ids[last] {
		t.Fatalf("req-%d, lost and accepted as lost: %v", last, r)
	}
	return srv
}

// TestLostWALTailRefused: acknowledged submits with request ids, a
// snapshot, a clean stop, and then the WAL loses its second half. The server
// must not serve the half that is left as if it were complete (a request id
// acknowledged before would create a new task): it exits non-zero naming
// the snapshot and the records lost, and `wal verify` fails. Only with
// --accept-lost-records naming exactly that range does it start, serving
// what the WAL holds and setting the snapshot aside.
func TestLostWALTailRefused(t *testing.T) {
	t.Parallel()
	const tasks = 500
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	ids := submitNumberedAll(t, srv, tasks)
	if code, out := runBin(t, "admin", "snapshot", "--addr", srv.url()); code != 0 || !strings.Contains(out, fmt.Sprintf("snapshot at lsn %d:", tasks+1)) {
		t.Fatalf("admin snapshot: exit %d\n%s", code, out)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitProcExit(t, srv); code != 0 {
		t.Fatalf("server exit %d after SIGTERM", code)
	}

	// Cut the segment in half.
	seg := filepath.Join(dir, node.WALDir, "0000000000000001.wal")
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	rep, err := wal.Verify(wal.Options{Dir: filepath.Join(dir, node.WALDir)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.LastLSN
	if last < 100 || last >= tasks {
		t.Fatalf("the cut log ends at lsn %d; the test needs it well inside the %d submits", last, tasks)
	}
	lost := fmt.Sprintf("%d-%d", last+1, tasks+1)
	snapPath := filepath.Join(dir, node.SnapshotDir, snapshot.FileName(tasks+1))

	code, out := runBin(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "FAIL "+snapPath) || !strings.Contains(out, "records "+lost) {
		t.Fatalf("wal verify: exit %d, want 1 naming %s and records %s:\n%s", code, snapPath, lost, out)
	}

	refusesLoss(t, dir, "on the cut log", lost, fmt.Sprintf("%d-%d", last+2, tasks+1),
		snapPath, fmt.Sprintf("up to lsn %d", tasks+1), fmt.Sprintf("the log ends at lsn %d", last))
	if _, err := os.Stat(snapPath); err != nil {
		t.Fatalf("a refused start touched the snapshot: %v", err)
	}

	srv = acceptsLoss(t, dir, lost, int(last), ids)
	if _, err := os.Stat(snapPath + ".discarded"); err != nil {
		t.Fatalf("the snapshot was not set aside: %v", err)
	}
	stop(t, srv)
	if code, out := runBin(t, "wal", "verify", "--data-dir", dir); code != 0 || !strings.Contains(out, "note: "+snapPath+".discarded") {
		t.Fatalf("wal verify after the accepted loss: exit %d\n%s", code, out)
	}
}

// TestDeletedNewestSegmentRefused: acknowledged submits fill several WAL
// segments, the server stops cleanly, no snapshot is taken, and the newest
// segment is deleted. Nothing but the WAL's tail file knows the records
// were there: the server refuses to start, naming the segment and the
// records lost, and `wal verify` fails. With --accept-lost-records naming
// exactly that range it serves what is left, and a restart after that
// needs nothing accepted.
func TestDeletedNewestSegmentRefused(t *testing.T) {
	t.Parallel()
	const tasks = 300
	dir := t.TempDir()
	srv := startServerProc(t, dir, "--wal-segment-bytes", "4096")
	ids := submitNumberedAll(t, srv, tasks)
	stop(t, srv)

	walDir := filepath.Join(dir, node.WALDir)
	rep, err := wal.Verify(wal.Options{Dir: walDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Segments) < 3 {
		t.Fatalf("%d segments; the test needs at least 3", len(rep.Segments))
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, node.SnapshotDir, "*")); len(snaps) != 0 {
		t.Fatalf("snapshots %v; the test needs none", snaps)
	}
	newest := rep.Segments[len(rep.Segments)-1]
	if err := os.Remove(newest.Path); err != nil {
		t.Fatal(err)
	}
	kept := newest.FirstLSN - 1
	lost := fmt.Sprintf("%d-%d", newest.FirstLSN, rep.LastLSN)

	code, out := runBin(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "FAIL ") || !strings.Contains(out, filepath.Base(newest.Path)+", which it names as the newest, is gone") ||
		!strings.Contains(out, "records "+lost+" (at least) are gone") || !strings.Contains(out, "--accept-lost-records "+lost) {
		t.Fatalf("wal verify: exit %d, want 1 naming the segment and records %s:\n%s", code, lost, out)
	}

	refusesLoss(t, dir, "without its newest segment", lost, fmt.Sprintf("%d-%d", newest.FirstLSN, rep.LastLSN-1),
		fmt.Sprintf("the log ends at lsn %d", kept), filepath.Join(walDir, "TAIL"),
		fmt.Sprintf("held every record up to lsn %d", rep.LastLSN), filepath.Base(newest.Path), "is gone")

	stop(t, acceptsLoss(t, dir, lost, int(kept), ids, "--wal-segment-bytes", "4096"))

	if code, out := runBin(t, "wal", "verify", "--data-dir", dir); code != 0 || !strings.Contains(out, "OK: ") {
		t.Fatalf("wal verify after the accepted loss: exit %d\n%s", code, out)
	}
	srv = startServerProc(t, dir, "--wal-segment-bytes", "4096")
	c := newJSONClients(t, srv)
	if n := len(listAllTasks(t, c, "default")); n != int(kept)+1 {
		t.Fatalf("after a restart: %d tasks, want %d", n, kept+1)
	}
}
