package e2e

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestWorkflowFanOutBench measures a fan-out of TENURE_BENCH_FANOUT
// tasks (10,000 by default) with one join, against the real binary (fsync
// always): a root task's completion spawns the children and the join (one
// record), four workers drain the children a thousand at a time
// (CompleteBatch carrying the next Lease), and a fifth long-polls the
// join's queue. It reports the time from the spawn until every task has
// completed, from the last child's acknowledged completion to the join's
// lease (negative: the lease came first, the acknowledgement was still on
// its way), and the server's CPU per task; beside the same run whose join
// depends on nothing, in rounds alternating (TENURE_BENCH_ROUNDS, 3), so
// that the difference is what the edges cost. Only with
// TENURE_BENCH_WORKFLOW set: it measures; it checks only that the join
// runs once, after its children.
func TestWorkflowFanOutBench(t *testing.T) {
	if os.Getenv("TENURE_BENCH_WORKFLOW") == "" {
		t.Skip("a measurement, not a test: set TENURE_BENCH_WORKFLOW=1 to run it")
	}
	n := envInt(t, "TENURE_BENCH_FANOUT", 10_000)
	rounds := envInt(t, "TENURE_BENCH_ROUNDS", 3)
	for r := range rounds {
		for _, join := range []bool{true, false} {
			res := fanOutRound(t, n, join)
			t.Logf("round %d, the join depends on the %d children: %v: spawn → every task completed %v; last child acknowledged → join leased %v; server CPU %.3f s, %.1f µs per task",
				r+1, n, join, res.total.Round(time.Millisecond), res.release.Round(time.Millisecond), res.cpu.Seconds(), float64(res.cpu.Microseconds())/float64(n+2))
		}
	}
}

type fanOutResult struct {
	total, release, cpu time.Duration
}

// fanOutRound runs one fan-out of n children on a server of its own; with
// join, the join depends on every child.
func fanOutRound(t *testing.T, n int, join bool) fanOutResult {
	srv := startServerProc(t, t.TempDir(), "--max-spawn", fmt.Sprint(n+1))
	defer stop(t, srv)
	c := sdk(t, srv.url())
	ctx := t.Context()
	root, err := c.Submit(ctx, client.SubmitRequest{Queue: "root"})
	if err != nil {
		t.Fatal(err)
	}
	spawn := make([]client.SubmitRequest, 0, n+1)
	deps := make([]string, 0, n)
	for i := range n {
		rid := fmt.Sprintf("child-%d", i)
		spawn = append(spawn, client.SubmitRequest{Queue: "fan", RequestID: rid, Payload: []byte("12345678")})
		deps = append(deps, rid)
	}
	last := client.SubmitRequest{Queue: "join", RequestID: "join"}
	if join {
		last.DependsOn = deps
	}
	spawn = append(spawn, last)

	// The join's worker waits on its queue from the start.
	var joinLeased, joinDone time.Time
	joined := make(chan error, 1)
	go func() {
		for {
			l, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "joiner", Queue: "join", Wait: 30 * time.Second})
			if err != nil {
				joined <- err
				return
			}
			if len(l.Tasks) == 0 {
				continue
			}
			joinLeased = clock.Real.Now()
			lt := l.Tasks[0]
			for _, d := range lt.Dependencies {
				if d.State != client.TaskStateCompleted {
					joined <- fmt.Errorf("the join ran with dependency %s %s", d.TaskID, d.State)
					return
				}
			}
			err = c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID})
			joinDone = clock.Real.Now()
			joined <- err
			return
		}
	}()

	lr, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "root", Queue: "root"})
	if err != nil || len(lr.Tasks) != 1 || lr.Tasks[0].ID != root.TaskID {
		t.Fatalf("lease the root: %+v %v", lr, err)
	}
	cpu0 := procCPU(t, srv.cmd.Process.Pid)
	start := clock.Real.Now()
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: root.TaskID, LeaseID: lr.Tasks[0].LeaseID, Spawn: spawn}); err != nil {
		t.Fatal(err)
	}

	var done atomic.Int64
	var mu sync.Mutex
	var acks []time.Time
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The lease a completion carries answers at once (its time is
			// the completion's acknowledgement); one that found nothing
			// waits.
			req := client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Queue: "fan", MaxTasks: 1000}
			poll := req
			poll.Wait = 100 * time.Millisecond
			l, err := c.Lease(ctx, poll)
			for err == nil && done.Load() < int64(n) {
				if len(l.Tasks) == 0 {
					l, err = c.Lease(ctx, poll)
					continue
				}
				items := make([]client.CompleteRequest, len(l.Tasks))
				for i, lt := range l.Tasks {
					items[i] = client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: []byte("ok")}
				}
				var res client.CompleteBatchResult
				res, err = c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items, Lease: &req})
				if err == nil {
					at := clock.Real.Now()
					mu.Lock()
					acks = append(acks, at)
					mu.Unlock()
					done.Add(int64(len(items)))
					l = client.LeaseResult{Tasks: res.Leased}
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	cpu := procCPU(t, srv.cmd.Process.Pid) - cpu0
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	lastAck := acks[len(acks)-1]
	end := joinDone
	if lastAck.After(end) {
		end = lastAck
	}
	return fanOutResult{total: end.Sub(start), release: joinLeased.Sub(lastAck), cpu: cpu}
}
