package server_test

// Hostile and broken clients (docs/guides/limits.md): stalled and
// oversized bodies (bodies_test.go), a long-poll flood, a connection
// flood, refused heartbeats by the thousand. Each test sets the limit small,
// plays the attacker against a real HTTP server on loopback, and checks
// that the server cut the attacker off (and counted it in its metrics)
// while a normal client kept being served. The deadlines below only stop
// a hung test: they are far above the limits configured, and nothing
// asserts how fast anything happens.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestLongPollFlood: workers flood the server with Lease calls that wait.
// One worker id gets --max-long-polls-per-worker (3 here) waiting at once
// and the server --max-long-polls (20); past them a Lease that would wait
// is answered resource_exhausted at once, naming the limit. A normal
// client (submit, lease without waiting) is served throughout, and once
// the flood ends long-polls are admitted again.
func TestLongPollFlood(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{MaxLongPolls: 20, MaxLongPollsPerWorker: 3})
	flood, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	poll := e.pollFlood
	// A flood long-poll retries until admitted: a probe may hold a slot
	// for a moment.
	spawn := func(worker string) {
		wg.Go(func() {
			for flood.Err() == nil {
				err := poll(flood, worker, 30*time.Second)
				if connect.CodeOf(err) == connect.CodeResourceExhausted {
					continue
				}
				if err != nil && flood.Err() == nil {
					t.Errorf("flood long-poll of %s: %v", worker, err)
				}
				return
			}
		})
	}

	for range 3 {
		spawn("greedy")
	}
	d := e.refusedEventually(t, "greedy", "--max-long-polls-per-worker")
	if d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE || d.GetField() != "wait" || d.GetLimit() != 3 {
		t.Errorf("per-worker refusal detail %v, want TOO_LARGE, field wait, limit 3", d)
	}
	e.served(t, "normal-1")
	for i := range 17 {
		spawn(fmt.Sprintf("w%d", i))
	}
	d = e.refusedEventually(t, "newcomer", "--max-long-polls")
	if d.GetField() != "wait" || d.GetLimit() != 20 {
		t.Errorf("server-wide refusal detail %v, want field wait, limit 20", d)
	}
	e.served(t, "normal-2")
	if e.hits(t, server.LimitLongPollsPerWorker) < 1 || e.hits(t, server.LimitLongPolls) < 1 {
		t.Errorf("hits: %s %d, %s %d; want both counted", server.LimitLongPollsPerWorker, e.hits(t, server.LimitLongPollsPerWorker),
			server.LimitLongPolls, e.hits(t, server.LimitLongPolls))
	}

	// The server sees the flood's calls end as their connections close.
	stop()
	wg.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	for {
		err := poll(ctx, "newcomer", 10*time.Millisecond)
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || ctx.Err() != nil {
			t.Fatalf("a long-poll after the flood ended: %v, want it admitted", err)
		}
	}
}

// pollFlood long-polls queue flood as worker for wait.
func (e *limitEnv) pollFlood(ctx context.Context, worker string, wait time.Duration) error {
	_, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: worker, Queue: "flood", Wait: durationpb.New(wait)}))
	return err
}

// refusedEventually polls as worker until the server refuses it with
// resource_exhausted naming flag (the flood's long-polls may still be on
// their way in), and returns the refusal's detail.
func (e *limitEnv) refusedEventually(t *testing.T, worker, flag string) *tenurev1.ErrorDetail {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	for {
		err := e.pollFlood(ctx, worker, 50*time.Millisecond)
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted {
			if !strings.Contains(ce.Message(), flag) {
				t.Errorf("refusal %q does not name %s", ce.Message(), flag)
			}
			if ed := apitest.ErrorDetail(ce); ed != nil {
				return ed
			}
			t.Fatalf("refusal %v carries no ErrorDetail", ce)
		}
		if err != nil && ctx.Err() == nil {
			t.Fatalf("Lease of %s: %v, want it admitted or refused resource_exhausted", worker, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the server never refused a long-poll of %s with %s", worker, flag)
		}
	}
}

// TestConnectionFlood: 150 connections open at once and send part of a
// request's headers. --max-connections (50 here) are kept — their header
// timeout is long in this test — and the other 100 are closed at once. A
// normal client is served once the flood lets go; below the cap, it is
// served beside it.
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{MaxConnections: 50, ReadHeaderTimeout: time.Hour})
	const partial = "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\n"
	conns := make([]net.Conn, 150)
	for i := range conns {
		conns[i] = dial(t, e.addr, partial)
	}
	// The server closes the excess at accept; the kept ones stay open
	// (their header timeout is an hour), so waiting 3 s tells them apart.
	var closed atomic.Int64
	eachConn(conns, func(_ int, c net.Conn) {
		if _, ok := closedByServer(c, 3*time.Second); ok {
			closed.Add(1)
		}
	})
	if closed.Load() != 100 {
		t.Errorf("the server closed %d of 150 connections at once, want the 100 past --max-connections 50", closed.Load())
	}
	if got := e.hits(t, server.LimitConnections); got != 100 {
		t.Errorf("%s hits = %d, want 100", server.LimitConnections, got)
	}

	for _, c := range conns {
		c.Close()
	}
	// The server sees the flood's connections end as it reads them; until
	// then a new connection may still be turned away, and the client
	// retries.
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	for {
		_, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "after"}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a normal client was not served after the flood ended: %v", err)
		}
	}
	below := make([]net.Conn, 40)
	for i := range below {
		below[i] = dial(t, e.addr, partial)
	}
	for range 5 {
		e.served(t, "beside")
	}
}

// TestHeaderTimeout: 50 connections send part of a request's headers and
// stop; another sends a whole request, then part of a second one. Each is
// closed once --read-header-timeout (1s here) passes, and counted; a
// keep-alive connection that only idles out (--idle-timeout, 2s) is
// closed without being counted as a hit.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second})
	const partial = "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\n"
	whole := "POST " + getProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	conns := make([]net.Conn, 50)
	for i := range conns {
		conns[i] = dial(t, e.addr, partial)
	}
	second := dial(t, e.addr, whole)
	br := bufio.NewReader(second)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer of a whole request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	io.WriteString(second, partial)
	idle := dial(t, e.addr, whole)
	e.served(t, "normal")

	var closed atomic.Int64
	eachConn(append(conns, second, idle), func(_ int, c net.Conn) {
		if _, ok := closedByServer(c, hostileTimeout); ok {
			closed.Add(1)
		}
	})
	if closed.Load() != 52 {
		t.Errorf("the server closed %d of 52 connections, want all (header and idle timeouts)", closed.Load())
	}
	if got := e.hits(t, server.LimitHeaderReadTimeout); got != 51 {
		t.Errorf("%s hits = %d, want 51 (the idle connection is not one)", server.LimitHeaderReadTimeout, got)
	}
}

// TestRefusedHeartbeatFlood: a worker whose lease expired (on the node's
// fake clock), and callers with made-up lease ids, heartbeat a task a
// thousand times. The stale
// lease's refusals write at most its expiry and one TaskCancelled; the
// made-up leases write nothing.
func TestRefusedHeartbeatFlood(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	e := newLimitEnvOf(t, server.LoadLimits{}, apitest.OpenNodeConfig(t, coordinator.Config{Clock: clk}))
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	sub, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "hb", ExecutionWindow: durationpb.New(100 * time.Millisecond)}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.GetTask().GetTaskId()
	got, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "hb"}))
	if err != nil || len(got.Msg.GetTasks()) != 1 {
		t.Fatalf("Lease: %v %v", got, err)
	}
	stale := got.Msg.GetTasks()[0].GetLeaseId()
	// The lease's window (100ms) passes on the node's clock; wait until
	// its expiry is written (the node scans every 10ms of that clock).
	clk.Advance(time.Second)
	if err := eventually.Until(ctx, func() error {
		got, err := e.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		switch {
		case err != nil:
			return eventually.Stop(err)
		case got.Msg.GetTask().GetState() == tenurev1.TaskState_TASK_STATE_LEASED:
			return fmt.Errorf("the task is still LEASED: %w", eventually.ErrNotYet)
		}
		return nil
	}); err != nil {
		t.Fatalf("the lease did not expire: %v", err)
	}
	flood := func(lease func(i int) string) uint64 {
		before := e.n.Coordinator().Stats().LastLSN
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 125 {
					_, err := e.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lease(g*125 + i)}))
					if connect.CodeOf(err) != connect.CodeFailedPrecondition {
						t.Errorf("a refused heartbeat was answered %v, want failed_precondition", err)
						return
					}
				}
			})
		}
		wg.Wait()
		return e.n.Coordinator().Stats().LastLSN - before
	}
	if n := flood(func(int) string { return stale }); n != 1 {
		t.Errorf("1000 heartbeats by an expired lease wrote %d records, want 1 (one TaskCancelled)", n)
	}
	if n := flood(func(i int) string { return "made-up-" + strconv.Itoa(i) }); n != 0 {
		t.Errorf("1000 heartbeats by made-up leases wrote %d records, want none", n)
	}
}

// TestWaitersLimit: past --max-waiters a WaitTask that would wait is
// answered resource_exhausted at once, naming the limit; one with wait 0
// is served, and a waiter that ended frees its place.
func TestWaitersLimit(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{MaxWaiters: 1})
	ctx := t.Context()
	sub, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.GetTask().GetTaskId()
	wait := func(ctx context.Context, d time.Duration) error {
		_, err := e.tasks.WaitTask(ctx, connect.NewRequest(&tenurev1.WaitTaskRequest{TaskId: id, Wait: durationpb.New(d)}))
		return err
	}
	first, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		// Retried until admitted: a probe below may hold the place.
		for {
			err := wait(first, 30*time.Second)
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				done <- err
				return
			}
		}
	}()
	// The second waiter is refused once the first one is in.
	deadline := time.Now().Add(hostileTimeout)
	for {
		err := wait(ctx, 10*time.Millisecond)
		if connect.CodeOf(err) == connect.CodeResourceExhausted {
			if !strings.Contains(err.Error(), "--max-waiters") {
				t.Fatalf("the refusal does not name the limit: %v", err)
			}
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a second waiter: %v", err)
		}
	}
	if err := wait(ctx, 0); err != nil {
		t.Fatalf("a wait of 0 past the limit: %v", err)
	}
	cancel()
	<-done
	for time.Now().Before(deadline) {
		if err := wait(ctx, 10*time.Millisecond); err == nil {
			return
		}
	}
	t.Fatal("the place of the waiter that ended was not freed")
}
