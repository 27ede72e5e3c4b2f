package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestClusterFlowControl: on three nodes with four partitions per queue,
// `tenure queue limit` splits a max concurrency of 6, a rate of 40 per
// second and a burst of 8 over the queue's partitions (shares 2,2,1,1 and
// 2,2,2,2), every node shows the queue-wide limits, and a limit below the
// partitions is refused naming them. Six workers spread over the nodes
// then lease and complete 48 tasks while a sampler reads the queue's live
// leases through the nodes: the sum never exceeds 6. Afterwards each
// partition's log, replayed, never held more live leases than its share
// nor granted more than its token bucket allowed, and all grants together
// stay within burst + rate·w in every window w: the sum over partitions
// holds.
func TestClusterFlowControl(t *testing.T) {
	c, _ := newClTest(t, -1)
	const (
		ns, q   = "flow", "api"
		maxConc = 6
		tasks   = 48
	)
	n1 := c.nodes[0].url()
	if code, _, errs := cli(t, "queue", "limit", q, "--namespace", ns, "--max-concurrency", "3", "--addr", n1); code != 1 ||
		!strings.Contains(errs, "--max-concurrency") || !strings.Contains(errs, "4 partitions") {
		t.Fatalf("a max concurrency below the partitions: exit %d, %q; want the field and the 4 partitions named", code, errs)
	}
	out := mustCLI(t, "queue", "limit", q, "--namespace", ns, "--max-concurrency", fmt.Sprint(maxConc), "--rate", "40", "--burst", "8", "--addr", n1)
	if !strings.HasPrefix(out, "queue flow/api limits: max concurrency 6, rate 40/s (burst 8)") {
		t.Fatalf("queue limit printed %q", out)
	}
	ctx := t.Context()
	clients := sdkEach(t, c.nodes, client.Options{MaxRetries: 20})
	for i, cl := range clients {
		got, err := cl.GetQueue(ctx, client.GetQueueRequest{Namespace: ns, Queue: q})
		if err != nil || got.Limits == nil || got.Limits.MaxConcurrency != maxConc || got.Limits.Rate != 40 || got.Limits.Burst != 8 ||
			got.Partitions != clPartitions || got.LimitedPartitions != clPartitions {
			t.Fatalf("GetQueue through node %d: %+v, %v; want the limits in all %d partitions", i+1, got, err, clPartitions)
		}
	}
	for i := range tasks {
		if _, err := clients[i%3].Submit(ctx, client.SubmitRequest{Namespace: ns, Queue: q, RequestID: fmt.Sprintf("flow-%d", i), ExecutionWindow: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		done, held atomic.Int64
		mu         sync.Mutex
		maxHeld    int64
		errs       syncList[error]
	)
	fail := errs.add
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		untilStopped(stop, func(i int) bool {
			got, err := clients[i%3].GetQueue(ctx, client.GetQueueRequest{Namespace: ns, Queue: q})
			if err != nil {
				fail(err)
				return false
			}
			if got.ActiveLeases > maxConc {
				fail(fmt.Errorf("the queue holds %d live leases over its partitions, above its max concurrency of %d", got.ActiveLeases, maxConc))
			}
			time.Sleep(5 * time.Millisecond)
			return true
		})
	})
	var workers sync.WaitGroup
	for w := range 6 {
		workers.Go(func() {
			cl := clients[w%3]
			for done.Load() < tasks {
				lts, err := tasksOf(cl.Lease(ctx, client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Namespace: ns, Queue: q, MaxTasks: 2, Wait: 500 * time.Millisecond}))
				if err != nil {
					fail(err)
					return
				}
				// Held from the answer until the completion is sent: a
				// subset of what the server holds live.
				n := held.Add(int64(len(lts)))
				mu.Lock()
				maxHeld = max(maxHeld, n)
				mu.Unlock()
				time.Sleep(30 * time.Millisecond) // the work
				for _, lt := range lts {
					held.Add(-1)
					if err := cl.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
						fail(err)
						return
					}
					done.Add(1)
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	sampler.Wait()
	checkErrs(t, &errs)
	if maxHeld > maxConc {
		t.Fatalf("the workers held %d leases at once, above the max concurrency of %d", maxHeld, maxConc)
	}
	t.Logf("the workers held up to %d leases at once (max concurrency %d)", maxHeld, maxConc)
	checkClusterFlowLog(t, c, ns, q, maxConc, 40_000, 8, tasks)
}

// checkErrs fails the test with the first of errs, the errors of its
// goroutines, if any.
func checkErrs(t *testing.T, errs *syncList[error]) {
	t.Helper()
	if all := errs.all(); len(all) > 0 {
		t.Fatal(all[0])
	}
}

// untilStopped calls fn(0), fn(1), … until stop is closed or fn returns
// false.
func untilStopped(stop <-chan struct{}, fn func(i int) bool) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if !fn(i) {
			return
		}
	}
}

// checkClusterFlowLog replays the log of every partition of ns/q from the
// database and checks that each partition's live leases never exceeded
// its share of max concurrency, that its grants stayed within its token
// bucket, that the shares add up to the queue's limits, and that the
// grants of all partitions together stay within burst + rate·w in every
// window.
func checkClusterFlowLog(t *testing.T, c *clTest, ns, q string, maxConc uint32, rateMilli uint64, burst uint32, tasks int) {
	t.Helper()
	type part struct {
		share  state.Limits
		live   map[string]bool
		grants []state.Time
	}
	parts := map[uint64]*part{}
	var all []state.Time
	completed := 0
	c.eachLogRecord(ns, q, func(id, lsn uint64, r state.Record) error {
		p := parts[id]
		if p == nil {
			p = &part{live: map[string]bool{}}
			parts[id] = p
		}
		switch r := r.(type) {
		case *state.QueueLimited:
			p.share = state.Limits{MaxConcurrency: r.MaxConcurrency, RateMilli: r.RateMilli, Burst: r.Burst}
		case *state.LeaseGranted:
			p.live[r.TaskID] = true
			if len(p.live) > int(p.share.MaxConcurrency) {
				return fmt.Errorf("partition %d lsn %d: %d live leases, above its share %d", id, lsn, len(p.live), p.share.MaxConcurrency)
			}
			p.grants = append(p.grants, r.GrantedAt)
			all = append(all, r.GrantedAt)
		case *state.TaskCompleted:
			delete(p.live, r.TaskID)
			completed++
		case *state.TaskFailed:
			delete(p.live, r.TaskID)
		case *state.LeaseExpired:
			delete(p.live, r.TaskID)
		}
		return nil
	})
	if len(parts) != clPartitions || completed != tasks {
		t.Fatalf("%d partitions logged %d completions; want %d and %d", len(parts), completed, clPartitions, tasks)
	}
	var sum state.Limits
	for id, p := range parts {
		if p.share.MaxConcurrency == 0 || p.share.RateMilli == 0 || p.share.Burst == 0 {
			t.Fatalf("partition %d has share %+v: a zero share", id, p.share)
		}
		sum.MaxConcurrency += p.share.MaxConcurrency
		sum.RateMilli += p.share.RateMilli
		sum.Burst += p.share.Burst
		withinBucket(t, fmt.Sprintf("partition %d", id), p.grants, p.share.RateMilli, p.share.Burst)
	}
	if want := (state.Limits{MaxConcurrency: maxConc, RateMilli: rateMilli, Burst: burst}); sum != want {
		t.Fatalf("the partitions' shares add up to %+v, not the queue's limits %+v", sum, want)
	}
	slices.Sort(all)
	withinBucket(t, "all partitions", all, rateMilli, burst)
}

// eachLogRecord calls fn with every record of the partitions of ns/q, read
// from the database in partition and LSN order, and fails the test on the
// first error fn or the reading returns.
func (c *clTest) eachLogRecord(ns, q string, fn func(partition, lsn uint64, r state.Record) error) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT l.partition_id, l.lsn, l.type, l.payload FROM partition_log l
		JOIN partitions p ON p.id = l.partition_id WHERE p.namespace = ? AND p.queue = ? ORDER BY l.partition_id, l.lsn`, ns, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, lsn uint64
		var typ uint16
		var payload []byte
		if err := rows.Scan(&id, &lsn, &typ, &payload); err != nil {
			t.Fatal(err)
		}
		err := mysqllog.RowRecords(lsn, typ, payload, mysqllog.DefaultMaxRecordBytes, func(lsn uint64, e wal.Entry) error {
			r, err := record.Decode(record.Type(e.Type), e.Payload)
			if err != nil {
				return fmt.Errorf("partition %d lsn %d: %v", id, lsn, err)
			}
			return fn(id, lsn, r)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// withinBucket fails unless the grants at times (in order) number at most
// burst + rate·(t_j − t_i) between any two of them, in exact integers.
func withinBucket(t *testing.T, what string, times []state.Time, rateMilli uint64, burst uint32) {
	t.Helper()
	for i := range times {
		for j := i; j < len(times); j++ {
			n := int64(j - i + 1)
			if allowed := (int64(burst)*state.TokenUnit + int64(rateMilli)*int64(times[j]-times[i])) / state.TokenUnit; n > allowed {
				t.Fatalf("%s: %d grants within %v, above burst %d + rate %g/s over it (%d)", what, n, time.Duration(times[j]-times[i]), burst, float64(rateMilli)/1000, allowed)
			}
		}
	}
}
