package e2e

// The hostile run of the memory budget (docs/guides/limits.md, "The memory budget"): clients
// submitting 1 MiB payloads as fast as the server takes them, thousands of
// idle connections and hundreds of slow bodies, against the real binary
// with a memory budget and a short retention. Its resident memory stays
// within the budget plus a stated margin, a normal client's submits are
// served or refused as documented (FULL, retry later), and workers keep
// draining the queue.
//
// Each run lasts its duration from the first submit refused for a full
// budget. At CI size that is a few seconds; the full run is
//
//	go test ./e2e -run TestHostileMemory -v -args -hostile
//
// (30 s, 50 clients of 1 MiB payloads, 2000 idle connections, 300 slow
// bodies, a budget of 256 MiB; a retention of 10 s, so that the purge
// frees memory during the run, and a --body-read-timeout of 10 s, so that
// slow bodies are cut off during it), and prints what it saw.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

var hostile = flag.Bool("hostile", false, "run TestHostileMemory at full size: 30s, 50 clients of 1 MiB payloads, 2000 idle connections, 300 slow bodies, a 256 MiB budget")

// hostileRun is the size of a hostile run.
type hostileRun struct {
	duration                  time.Duration
	clients, idle, slow       int
	budget                    int64
	retention, snapshotEvery  time.Duration
	bodyReadTimeout           time.Duration
	workers, leaseTasks       int
	normalEvery, sampleEvery  time.Duration
	payloadBytes, normalBytes int
}

// hostileMargin is how far above its memory budget a server's resident
// memory may go: Go's soft memory limit that `tenure server` sets past the
// budget (a quarter of it more, four times --max-inflight-request-bytes,
// and 64 MiB), which it logs as go_memory_limit, and 64 MiB for what the
// runtime does not count against it (the binary, memory not yet returned
// to the system).
func hostileMargin(t *testing.T, srv *serverProc, budget int64) int64 {
	t.Helper()
	m := regexp.MustCompile(`msg="memory budget" bytes=(\d+) .*go_memory_limit=(\d+)`).FindStringSubmatch(srv.out.String())
	if m == nil {
		t.Fatalf("the server did not log the soft memory limit it set (go_memory_limit; is GOMEMLIMIT set? the test needs the server's own):\n%s", srv.out.String())
	}
	logged, _ := strconv.ParseInt(m[1], 10, 64)
	soft, _ := strconv.ParseInt(m[2], 10, 64)
	if logged != budget {
		t.Fatalf("the server logged a memory budget of %d bytes, want %d", logged, budget)
	}
	return soft - budget + 64<<20
}

// TestHostileMemory: see the top of the file.
func TestHostileMemory(t *testing.T) {
	run := hostileRun{
		duration: 4 * time.Second, clients: 8, idle: 200, slow: 30, budget: 64 << 20,
		retention: 2 * time.Second, snapshotEvery: 2 * time.Second, bodyReadTimeout: time.Second,
		workers: 2, leaseTasks: 8, normalEvery: 100 * time.Millisecond, sampleEvery: 50 * time.Millisecond,
		payloadBytes: 1 << 20, normalBytes: 1 << 10,
	}
	if *hostile {
		run.duration, run.clients, run.idle, run.slow, run.budget = 30*time.Second, 50, 2000, 300, 256<<20
		run.retention, run.snapshotEvery, run.bodyReadTimeout, run.workers = 10*time.Second, 10*time.Second, 10*time.Second, 4
	}
	srv := startServerProc(t, t.TempDir(), "--max-memory-bytes", strconv.FormatInt(run.budget, 10),
		"--retention", run.retention.String(), "--snapshot-every", run.snapshotEvery.String(), "--body-read-timeout", run.bodyReadTimeout.String())
	pid := srv.cmd.Process.Pid
	base := residentBytes(t, pid)

	// The run lasts run.duration from the first refusal for a full budget
	// (within a minute of the start, or the test fails).
	ctx, cancel := context.WithTimeout(context.Background(), run.duration+time.Minute)
	defer cancel()
	var fullSince atomic.Int64 // Unix nanoseconds of the first refusal for a full budget
	filled := func() {
		if fullSince.CompareAndSwap(0, time.Now().UnixNano()) {
			time.AfterFunc(run.duration, cancel)
		}
	}
	var wg sync.WaitGroup

	// Idle connections: each sends one request and then nothing, a
	// keep-alive connection the server holds until --idle-timeout.
	idle := make([]net.Conn, 0, run.idle)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range run.idle {
		c, err := net.Dial("tcp", srv.addr)
		if err != nil {
			t.Fatalf("idle connection: %v", err)
		}
		idle = append(idle, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tenure\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("idle connection's request: %v", err)
		}
		resp.Body.Close()
	}

	// Slow bodies: a Submit of 4 KiB that sends a byte every 100 ms, until
	// --body-read-timeout cuts it off; then another.
	var slowCut atomic.Int64
	for range run.slow {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := net.Dial("tcp", srv.addr)
				if err != nil {
					return
				}
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"queue\":\"slow\",\"payload\":\"", tenurev1connect.TaskServiceSubmitProcedure)
				for err == nil && ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
					_, err = io.WriteString(c, "A")
				}
				if ctx.Err() == nil {
					slowCut.Add(1)
				}
				stop()
				c.Close()
			}
		})
	}

	// Clients submitting 1 MiB payloads as fast as they are taken, and
	// again at once when refused.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: run.clients + run.workers + 2}}
	defer hc.CloseIdleConnections()
	tasks := tenurev1connect.NewTaskServiceClient(hc, srv.url())
	workers := tenurev1connect.NewWorkerServiceClient(hc, srv.url())
	var accepted, full, busy atomic.Int64
	var otherMu sync.Mutex
	other := map[string]int{}
	payload := make([]byte, run.payloadBytes)
	for range run.clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "big", Payload: payload}))
				switch {
				case err == nil:
					accepted.Add(1)
				case isFull(err):
					full.Add(1)
					filled()
					time.Sleep(time.Millisecond)
				case connect.CodeOf(err) == connect.CodeUnavailable:
					busy.Add(1)
				case ctx.Err() == nil:
					otherMu.Lock()
					other[err.Error()]++
					otherMu.Unlock()
				}
			}
		})
	}

	// Workers: lease and complete with a small result, throughout.
	var completed, completedFull atomic.Int64 // completedFull: after the first refusal for a full budget
	var workerErrs atomic.Int64
	for w := range run.workers {
		wg.Go(func() {
			id := fmt.Sprintf("worker-%d", w)
			for ctx.Err() == nil {
				got, err := workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: id, Queue: "big", MaxTasks: uint32(run.leaseTasks), Wait: durationpb.New(time.Second)}))
				if err != nil {
					if ctx.Err() == nil {
						workerErrs.Add(1)
					}
					continue
				}
				var items []*tenurev1.CompleteRequest
				for _, l := range got.Msg.GetTasks() {
					items = append(items, &tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(), Result: []byte("done")})
				}
				if len(items) == 0 {
					continue
				}
				if _, err := workers.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: items})); err != nil {
					if ctx.Err() == nil {
						workerErrs.Add(1)
					}
					continue
				}
				completed.Add(int64(len(items)))
				if fullSince.Load() != 0 {
					completedFull.Add(int64(len(items)))
				}
			}
		})
	}

	// A normal client: a 1 KiB submit every normalEvery, on connections of
	// its own, each answered or refused as documented.
	normal := newJSONClients(t, srv)
	var normalOK, normalFull int
	var normalWorst time.Duration
	var samples []int64
	tick := time.NewTicker(run.sampleEvery)
	defer tick.Stop()
	nextNormal := time.Now()
	for ctx.Err() == nil {
		<-tick.C
		samples = append(samples, residentBytes(t, pid))
		if time.Now().Before(nextNormal) {
			continue
		}
		nextNormal = time.Now().Add(run.normalEvery)
		callCtx, stop := context.WithTimeout(context.Background(), e2eCallTimeout)
		start := time.Now()
		_, err := normal.tasks.Submit(callCtx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "normal", Payload: make([]byte, run.normalBytes)}))
		stop()
		normalWorst = max(normalWorst, time.Since(start))
		switch {
		case err == nil:
			normalOK++
		case isFull(err):
			normalFull++
		default:
			t.Errorf("a normal client's submit failed with %v, want success or resource_exhausted FULL", err)
		}
	}
	cancel()
	wg.Wait()

	peak := peakRSS(t, pid)
	margin := hostileMargin(t, srv, run.budget)
	maxSample := int64(0)
	for _, s := range samples {
		maxSample = max(maxSample, s)
	}
	hits, _ := limitHits(t, srv)
	t.Logf("%v from the first refusal for a full budget of %d MiB: %d clients of %d KiB payloads: %d accepted, %d refused full, %d busy; %d idle connections; %d slow bodies cut off %d times; %d workers completed %d tasks, %d of them once it was full (%d errors); "+
		"a normal client's submits: %d served, %d refused full, slowest %v; server RSS %d MiB before, at most %d MiB sampled, peak %d MiB (bound %d MiB: the budget and a margin of %d MiB); limit hits %v",
		run.duration, run.budget>>20, run.clients, run.payloadBytes>>10, accepted.Load(), full.Load(), busy.Load(), len(idle), run.slow, slowCut.Load(), run.workers, completed.Load(), completedFull.Load(), workerErrs.Load(),
		normalOK, normalFull, normalWorst, base>>20, maxSample>>20, peak>>20, (run.budget+margin)>>20, margin>>20, hits)
	for msg, n := range other {
		t.Errorf("%d submits of 1 MiB failed with %s, want success, FULL or unavailable", n, msg)
	}
	if bound := run.budget + margin; peak > bound {
		t.Errorf("the server's peak resident memory was %d MiB, over its budget of %d MiB plus the margin of %d MiB", peak>>20, run.budget>>20, margin>>20)
	}
	if fullSince.Load() == 0 {
		t.Fatalf("%d submits of 1 MiB accepted and none refused for a full budget of %d MiB within a minute", accepted.Load(), run.budget>>20)
	}
	if accepted.Load() == 0 || full.Load() == 0 || hits[server.LimitMemory] == 0 {
		t.Errorf("%d submits accepted and %d refused full (%d memory hits counted): the run did not reach the budget", accepted.Load(), full.Load(), hits[server.LimitMemory])
	}
	if normalOK == 0 {
		t.Errorf("no normal submit was served in %v", run.duration)
	}
	if completedFull.Load() == 0 {
		t.Errorf("workers completed %d tasks, none once the budget was full: they did not keep draining", completed.Load())
	}
	if run.slow > 0 && slowCut.Load() == 0 {
		t.Errorf("no slow body was cut off by --body-read-timeout")
	}
}

// isFull reports whether err is a refusal for a full memory budget.
func isFull(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if td, ok := v.(*tenurev1.ErrorDetail); ok {
				return td.GetReason() == tenurev1.ErrorReason_ERROR_REASON_FULL
			}
		}
	}
	return false
}

// residentBytes is the resident set of process pid now (VmRSS).
func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	return procStatusBytes(t, pid, "VmRSS")
}

// procStatusBytes reads a field in kB of /proc/pid/status, in bytes; the
// test is skipped where there is no /proc.
func procStatusBytes(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc to read the server's memory from: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
