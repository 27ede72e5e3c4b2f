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
)

// TestDeletedLockFileKeepsSecondServerOut: LOCK deleted under a running
// server, a second server on the same data directory is refused, and so is
// an offline tool; the first keeps serving, and the directory is free
// once it stops.
func TestDeletedLockFileKeepsSecondServerOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	c := newJSONClients(t, srv)
	submit := func(payload string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		defer cancel()
		if _, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", Payload: []byte(payload)})); err != nil {
			t.Fatalf("submit %s: %v", payload, err)
		}
	}
	submit("before")
	if err := os.Remove(filepath.Join(dir, "LOCK")); err != nil {
		t.Fatal(err)
	}

	code, out := runBin(t, "server", "--data-dir", dir, "--listen", freeLoopbackAddr(t))
	if code == 0 || !strings.Contains(out, dir+" is locked by another tenure process") {
		t.Fatalf("second server after LOCK was deleted: exit %d, want a refusal:\n%s", code, out)
	}
	code, out = runBin(t, "wal", "verify", "--data-dir", dir)
	if code == 0 || !strings.Contains(out, "in use by a running tenure server") {
		t.Fatalf("wal verify after LOCK was deleted: exit %d, want a refusal:\n%s", code, out)
	}
	submit("after")

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitProcExit(t, srv); code != 0 {
		t.Fatalf("server exit %d after SIGTERM", code)
	}
	srv = startServerProc(t, dir)
	if b, err := os.ReadFile(filepath.Join(dir, "LOCK")); err != nil || string(b) != fmt.Sprintln(srv.cmd.Process.Pid) {
		t.Fatalf("LOCK after a restart holds %q (%v), want pid %d", b, err, srv.cmd.Process.Pid)
	}
	c2 := newJSONClients(t, srv)
	if n := len(listAllTasks(t, c2, "default")); n != 2 {
		t.Fatalf("after the restart: %d tasks, want the 2 acknowledged", n)
	}
}
