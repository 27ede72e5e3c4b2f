package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

var cfQueues = []string{"fa", "fb", "fc"}

// TestClusterFanOutBench measures a fan-out of TENURE_BENCH_FANOUT tasks
// (10,000 by default) with one join in cluster mode: three nodes, the
// children spread over three queues of four partitions each (the join's
// dependencies mostly remote edges, resolved by the watcher), a root
// task's completion spawning them and the join, a worker on every node
// draining them a thousand at a time (CompleteBatch carrying the next
// Lease) and a joiner on every node long-polling the join's queue. It
// reports the time from the spawn until every task has completed, from
// the last child's acknowledged completion to the join's lease, and the
// CPU of the three servers per task, for TENURE_BENCH_ROUNDS rounds (3),
// each on a fresh cluster. Only with TENURE_BENCH_CLUSTER_WORKFLOW set: it
// measures; it checks only that the join runs once, after its children.
func TestClusterFanOutBench(t *testing.T) {
	measurement(t, "TENURE_BENCH_CLUSTER_WORKFLOW")
	n := envInt(t, "TENURE_BENCH_FANOUT", 10_000)
	rounds := envInt(t, "TENURE_BENCH_ROUNDS", 3)
	for r := range rounds {
		res := clusterFanOutRound(t, n)
		t.Logf("round %d, a join of %d children over %d queues on %d nodes: spawn → every task completed %v; last child acknowledged → join leased %v; servers' CPU %.3f s, %.1f µs per task",
			r+1, n, len(cfQueues), clNodes, res.total.Round(time.Millisecond), res.release.Round(time.Millisecond), res.cpu.Seconds(), float64(res.cpu.Microseconds())/float64(n+2))
	}
}

func clusterFanOutRound(t *testing.T, n int) fanOutResult {
	var res fanOutResult
	t.Run("round", func(t *testing.T) {
		c, _ := newClTest(t, -1)
		c.extraQueues = len(cfQueues) - 1
		for _, nd := range c.nodes {
			nd.proc.kill9(t)
			nd.extra = []string{"--max-spawn", fmt.Sprint(n + 1)}
			c.start(nd, false)
		}
		c.waitEligible(c.ids())
		ctx := t.Context()
		var clients []*client.Client
		for _, nd := range c.nodes {
			cl, err := client.New(nd.url(), client.Options{MaxRetries: 3, RetryBackoff: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, cl)
		}
		for q, name := range cfQueues {
			if _, err := clients[q].Submit(ctx, client.SubmitRequest{Namespace: wfNamespace, Queue: name, Payload: []byte("warm")}); err != nil {
				t.Fatal(err)
			}
		}
		c.waitBalanced("the queues' partitions spread over the nodes", c.ids())
		// The tasks that made the partitions complete before the fan-out.
		for warm := 0; warm < len(cfQueues); {
			for k, cl := range clients {
				l, err := cl.Lease(ctx, client.LeaseRequest{WorkerID: fmt.Sprintf("warm%d", k), Namespace: wfNamespace, Queues: cfQueues, MaxTasks: 4, Wait: 100 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				for _, lt := range l.Tasks {
					if err := cl.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
						t.Fatal(err)
					}
					warm++
				}
			}
		}
		root, err := clients[0].Submit(ctx, client.SubmitRequest{Namespace: wfNamespace, Queue: "root"})
		if err != nil {
			t.Fatal(err)
		}
		spawn := fanOutSpawn(wfNamespace, n, func(i int) string { return cfQueues[i%len(cfQueues)] }, true)

		// A joiner on every node waits on the join's queue from the start.
		jctx, jcancel := context.WithCancel(ctx)
		defer jcancel()
		var joinOnce sync.Once
		var joinLeased time.Time
		var joins atomic.Int64
		joined := make(chan error, clNodes)
		for k, cl := range clients {
			go func() {
				for jctx.Err() == nil {
					l, err := cl.Lease(jctx, client.LeaseRequest{WorkerID: fmt.Sprintf("joiner%d", k), Namespace: wfNamespace, Queue: "join", Wait: 10 * time.Second})
					if err != nil || len(l.Tasks) == 0 {
						continue
					}
					at := clock.Real.Now()
					joinOnce.Do(func() { joinLeased = at })
					joins.Add(1)
					joined <- completeJoin(ctx, cl, l.Tasks[0])
					return
				}
			}()
		}

		lr, err := clients[0].Lease(ctx, client.LeaseRequest{WorkerID: "root", Namespace: wfNamespace, Queue: "root", Wait: 5 * time.Second})
		if err != nil || len(lr.Tasks) != 1 || lr.Tasks[0].ID != root.TaskID {
			t.Fatalf("lease the root: %+v %v", lr, err)
		}
		cpu := func() time.Duration {
			var s time.Duration
			for _, nd := range c.nodes {
				s += procCPU(t, nd.proc.cmd.Process.Pid)
			}
			return s
		}
		cpu0 := cpu()
		start := clock.Real.Now()
		if err := clients[0].Complete(ctx, client.CompleteRequest{TaskID: root.TaskID, LeaseID: lr.Tasks[0].LeaseID, Spawn: spawn}); err != nil {
			t.Fatal(err)
		}

		var acks fanOutAcks
		reqs := make([]client.LeaseRequest, len(clients))
		for w := range reqs {
			reqs[w] = client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Namespace: wfNamespace, Queues: cfQueues, MaxTasks: 1000}
		}
		acks.drainAll(t, clients, reqs, n)
		if err := <-joined; err != nil {
			t.Fatal(err)
		}
		joinDone := clock.Real.Now()
		res.cpu = cpu() - cpu0
		if j := joins.Load(); j != 1 {
			t.Errorf("the join was leased %d times, want once", j)
		}
		lastAck := acks.last()
		end := max(joinDone.Sub(start), lastAck.Sub(start))
		res.total, res.release = end, joinLeased.Sub(lastAck)
	})
	return res
}
