package e2e

import (
	"context"
	"fmt"
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
	measurement(t, "TENURE_BENCH_WORKFLOW")
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

// fanOutSpawn is a fan-out of n children in namespace ns, child i in
// queue(i), request ids child-<i>, and last a join in queue "join" that
// depends on every child if join is set.
func fanOutSpawn(ns string, n int, queue func(i int) string, join bool) []client.SubmitRequest {
	spawn := make([]client.SubmitRequest, 0, n+1)
	deps := make([]string, 0, n)
	for i := range n {
		rid := fmt.Sprintf("child-%d", i)
		spawn = append(spawn, client.SubmitRequest{Namespace: ns, Queue: queue(i), RequestID: rid, Payload: []byte("12345678")})
		deps = append(deps, rid)
	}
	last := client.SubmitRequest{Namespace: ns, Queue: "join", RequestID: "join"}
	if join {
		last.DependsOn = deps
	}
	return append(spawn, last)
}

// completeJoin completes the join leased as lt if every dependency it
// was leased with has completed.
func completeJoin(ctx context.Context, c *client.Client, lt client.LeasedTask) error {
	for _, d := range lt.Dependencies {
		if d.State != client.TaskStateCompleted {
			return fmt.Errorf("the join ran with dependency %s %s", d.TaskID, d.State)
		}
	}
	return c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID})
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
	spawn := fanOutSpawn("", n, func(int) string { return "fan" }, join)

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
			err = completeJoin(ctx, c, lt)
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

	var acks fanOutAcks
	reqs := make([]client.LeaseRequest, 4)
	for w := range reqs {
		reqs[w] = client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Queue: "fan", MaxTasks: 1000}
	}
	acks.drainAll(t, []*client.Client{c, c, c, c}, reqs, n)
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	cpu := procCPU(t, srv.cmd.Process.Pid) - cpu0
	lastAck := acks.last()
	end := joinDone
	if lastAck.After(end) {
		end = lastAck
	}
	return fanOutResult{total: end.Sub(start), release: joinLeased.Sub(lastAck), cpu: cpu}
}

// fanOutAcks are the times the fan-out's workers' completions were
// acknowledged, and how many tasks they completed.
type fanOutAcks struct {
	done atomic.Int64
	mu   sync.Mutex
	at   []time.Time
}

// drain is one worker of the fan-out: it leases as req says and completes
// what it got a batch at a time, until n tasks have completed in all. The
// lease a completion carries answers at once (its time is the
// completion's acknowledgement); one that found nothing waits.
func (a *fanOutAcks) drain(ctx context.Context, c *client.Client, req client.LeaseRequest, n int) error {
	poll := req
	poll.Wait = 100 * time.Millisecond
	l, err := c.Lease(ctx, poll)
	for err == nil && a.done.Load() < int64(n) {
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
			a.mu.Lock()
			a.at = append(a.at, at)
			a.mu.Unlock()
			a.done.Add(int64(len(items)))
			l = client.LeaseResult{Tasks: res.Leased}
		}
	}
	return err
}

// drainAll runs a worker drain of each of reqs, the i-th through cs[i],
// until n tasks have completed, and fails t if any failed.
func (a *fanOutAcks) drainAll(t *testing.T, cs []*client.Client, reqs []client.LeaseRequest, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(reqs))
	for i, req := range reqs {
		wg.Go(func() {
			if err := a.drain(t.Context(), cs[i], req, n); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// last is the latest acknowledgement.
func (a *fanOutAcks) last() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	sort.Slice(a.at, func(i, j int) bool { return a.at[i].Before(a.at[j]) })
	return a.at[len(a.at)-1]
}
