package e2e

// One server process: it stops cleanly on SIGTERM with a long-poll in
// flight and serves what it acknowledged after a restart; a second server
// on its data directory is refused.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	c := newJSONClients(t, srv)

	// A long-poll on an empty queue is (most likely) in flight when the
	// signal arrives; it must not keep the server from stopping cleanly.
	polled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId: "poller", Namespace: "graceful", Queue: "empty", Wait: durationpb.New(25 * time.Second),
		}))
		polled <- err
	}()

	want := map[string][]byte{}
	for i := range 5 {
		payload := []byte(fmt.Sprintf("graceful-%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Namespace: "graceful", Queue: "q", Payload: payload}))
		cancel()
		if err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
		want[resp.Msg.GetTask().GetTaskId()] = payload
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := waitProcExit(t, srv); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0; output:\n%s", code, srv.out.String())
	}
	out := srv.out.String()
	if !strings.Contains(out, "stopped cleanly") {
		t.Errorf("log does not say the server stopped cleanly:\n%s", out)
	}
	if strings.Contains(out, "did not finish in time") {
		t.Errorf("the shutdown waited out in-flight requests (a long-poll was not drained):\n%s", out)
	}
	select {
	case <-polled: // an empty answer, or an error if it never reached the server
	case <-time.After(e2eExitTimeout):
		t.Fatal("the long-poll did not return after the server exited")
	}

	srv2 := startServerProc(t, dir)
	c2 := newJSONClients(t, srv2)
	for id, payload := range want {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c2.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		cancel()
		if err != nil {
			t.Errorf("after restart, GetTask(%s): %v", id, err)
			continue
		}
		got := resp.Msg.GetTask()
		if !bytes.Equal(got.GetPayload(), payload) || got.GetState() != tenurev1.TaskState_TASK_STATE_WAITING {
			t.Errorf("after restart, task %s = payload %q state %v, want payload %q WAITING", id, got.GetPayload(), got.GetState(), payload)
		}
	}
	if n := len(listAllTasks(t, c2, "graceful")); n != len(want) {
		t.Errorf("after restart, namespace holds %d tasks, want %d", n, len(want))
	}
}

func TestSecondServerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServerProc(t, dir)

	code, out := runBin(t, "server", "--data-dir", dir, "--listen", freeLoopbackAddr(t), "--fsync", "always")
	if code == 0 {
		t.Fatalf("a second server on the same data dir exited 0, want a non-zero exit; output:\n%s", out)
	}
	msg := strings.ToLower(out)
	if !strings.Contains(msg, "in use") && !strings.Contains(msg, "lock") {
		t.Errorf("second server's message does not mention the lock or \"in use\":\n%s", out)
	}
	if !strings.Contains(out, strconv.Itoa(first.cmd.Process.Pid)) {
		t.Logf("second server's message does not name the holder's pid %d:\n%s", first.cmd.Process.Pid, out)
	}
	if first.exited() {
		t.Fatalf("the first server exited: %v", first.waitErr)
	}
	hc := &http.Client{Timeout: e2eCallTimeout}
	resp, err := hc.Get(first.url() + "/readyz")
	if err != nil {
		t.Fatalf("first server /readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first server /readyz = %d, want 200", resp.StatusCode)
	}
}
