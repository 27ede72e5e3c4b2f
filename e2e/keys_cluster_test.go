package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestClusterKeyConcurrency: on three nodes with four partitions per
// queue, a key max concurrency of 2 over 500 keys holds while the owner of
// one of the queue's partitions is killed with -9 (docs/design/keys.md):
// every task of a key goes to one partition whichever node takes its
// submit, workers spread over the nodes lease and complete every task,
// and neither what the workers hold at once nor what a sampler reading
// the leased tasks through the nodes sees ever has 3 leases of one key.
// Afterwards each partition's log, replayed, never held more than 2 live
// leases of a key, and no key has tasks in two partitions.
func TestClusterKeyConcurrency(t *testing.T) {
	c, _ := newClTest(t, -1)
	const (
		ns, q   = "keys", "payments"
		keys    = 500
		perKey  = 3
		tasks   = keys * perKey
		maxConc = 2
	)
	urls := []string{c.nodes[0].url(), c.nodes[1].url(), c.nodes[2].url()}
	if code, _, errs := cli(t, "queue", "limit", q, "--namespace", ns, "--key-ordered", "--key-max-concurrency", "2", "--addr", urls[0]); code != 1 ||
		!strings.Contains(errs, "--key-ordered") {
		t.Fatalf("an ordered key with a key max concurrency of 2: exit %d, %q; want the flag --key-ordered named", code, errs)
	}
	out := mustCLI(t, "queue", "limit", q, "--namespace", ns, "--key-max-concurrency", fmt.Sprint(maxConc), "--addr", urls[1])
	if !strings.HasPrefix(out, "queue keys/payments limits: key max concurrency 2") {
		t.Fatalf("queue limit printed %q", out)
	}
	ctx := t.Context()
	// The workers' clients retry through a partition's move; the
	// sampler's do not, so that it goes on sampling the other partitions.
	clients, samplers := sdkEach(t, c.nodes, client.Options{MaxRetries: 20}), sdkEach(t, c.nodes, client.Options{MaxRetries: -1})
	keyOf := func(i int) string { return fmt.Sprintf("customer-%03d", i%keys) }
	for b := 0; b < tasks; b += 100 {
		var reqs []client.SubmitRequest
		for i := b; i < b+100; i++ {
			reqs = append(reqs, client.SubmitRequest{Namespace: ns, Queue: q, Key: keyOf(i), RequestID: fmt.Sprintf("t-%d", i),
				ExecutionWindow: 10 * time.Second})
		}
		if _, err := clients[(b/100)%3].SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		done    atomic.Int64
		dead    atomic.Int32 // index of the killed node + 1
		mu      sync.Mutex
		held    = map[string]int{}
		maxHeld int
		samples int
		errs    syncList[error]
	)
	fail := errs.add
	// node returns the node to call for i, moving off the killed one;
	// transient reports whether err, of a call to node n, is the fault's:
	// any failure of a call to the killed node, and unavailable while its
	// partitions move.
	node := func(i int) int {
		if d := int(dead.Load()) - 1; i%3 == d {
			return (i + 1) % 3
		}
		return i % 3
	}
	alive := func(i int) *client.Client { return clients[node(i)] }
	transient := func(n int, err error) bool {
		return n == int(dead.Load())-1 || errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
	}
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		untilStopped(stop, func(i int) bool {
			n := node(i)
			leased, err := client.Collect(samplers[n].ListTasks(ctx, client.ListTasksRequest{Namespace: ns, Queue: q, State: client.TaskStateLeased}))
			if err != nil {
				if !transient(n, err) {
					fail(fmt.Errorf("sampler: %w", err))
					return false
				}
				return true
			}
			per := map[string]int{}
			for _, tk := range leased {
				if per[tk.Key]++; per[tk.Key] > maxConc {
					fail(fmt.Errorf("the sampler saw %d leases of key %q at once, above its key max concurrency of %d", per[tk.Key], tk.Key, maxConc))
				}
			}
			mu.Lock()
			samples++
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			return true
		})
	})
	var workers sync.WaitGroup
	for w := range 9 {
		workers.Go(func() {
			untilStopped(stop, func(int) bool {
				n := node(w)
				lts, err := tasksOf(clients[n].Lease(ctx, client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Namespace: ns, Queue: q, MaxTasks: 8, Wait: 300 * time.Millisecond}))
				if err != nil {
					if !transient(n, err) {
						fail(fmt.Errorf("worker %d: %w", w, err))
						return false
					}
					return true
				}
				// Held from the answer until the completion is sent: a
				// subset of what the server holds live.
				mu.Lock()
				for _, lt := range lts {
					held[lt.Key]++
					maxHeld = max(maxHeld, held[lt.Key])
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the work
				for _, lt := range lts {
					mu.Lock()
					held[lt.Key]--
					mu.Unlock()
					n := node(w)
					err := clients[n].Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID})
					switch {
					case err == nil:
						done.Add(1)
					case errors.Is(err, client.ErrLeaseLost) || errors.Is(err, client.ErrAlreadyCommitted) || transient(n, err):
						// Its partition was moving: the completion may
						// have applied (a retry of it is then refused as
						// already committed), or the lease expires and the
						// task is leased again (the server's count
						// decides).
					default:
						fail(fmt.Errorf("worker %d: %w", w, err))
						return false
					}
				}
				return true
			})
		})
	}
	// A third of the way, kill -9 the owner of one of the queue's
	// partitions.
	c.poll("a third of the tasks completed", func() (bool, error) { return done.Load() >= tasks/3, nil })
	ps, err := c.parts()
	if err != nil {
		t.Fatal(err)
	}
	victim := -1
	for _, p := range ps {
		if strings.HasPrefix(p.key, ns+"/"+q+"/") && p.owner != "" {
			victim = c.node(p.owner)
			break
		}
	}
	if victim < 0 {
		t.Fatalf("no partition of %s/%s has an owner: %+v", ns, q, ps)
	}
	dead.Store(int32(victim + 1))
	c.nodes[victim].proc.kill9(t)
	t.Logf("killed -9 %s, owner of partitions of the queue, after %d completions", c.nodes[victim].id, done.Load())
	c.poll("every task completed", func() (bool, error) {
		failed := len(errs.all()) > 0
		got, err := alive(0).GetQueue(ctx, client.GetQueueRequest{Namespace: ns, Queue: q})
		if err != nil {
			return failed, nil // the partitions are moving
		}
		return failed || got.Tasks.Completed == tasks, nil
	})
	close(stop)
	workers.Wait()
	sampler.Wait()
	checkErrs(t, &errs)
	if maxHeld > maxConc {
		t.Fatalf("the workers held %d leases of one key at once, above the key max concurrency of %d", maxHeld, maxConc)
	}
	t.Logf("%d samples of the leased tasks; the workers held up to %d leases of one key at once (key max concurrency %d)", samples, maxHeld, maxConc)
	checkClusterKeyLog(t, c, ns, q, maxConc, keys)
}

// checkClusterKeyLog replays the log of every partition of ns/q from the
// database and checks that no key ever had more than maxConc live leases
// in its partition, that every key's tasks are in one partition, and
// that all keys were seen.
func checkClusterKeyLog(t *testing.T, c *clTest, ns, q string, maxConc int, keys int) {
	t.Helper()
	keyOf := map[string]string{}        // task id → key
	partOf := map[string]uint64{}       // key → partition
	live := map[uint64]map[string]int{} // partition → key → live leases
	leased := map[string]bool{}         // task ids holding a lease
	grants := 0
	c.eachLogRecord(ns, q, func(id, lsn uint64, r state.Record) error {
		if live[id] == nil {
			live[id] = map[string]int{}
		}
		end := func(task string) {
			if leased[task] {
				leased[task] = false
				live[id][keyOf[task]]--
			}
		}
		switch r := r.(type) {
		case *state.TaskCreated:
			keyOf[r.TaskID] = r.Key
			if p, ok := partOf[r.Key]; ok && p != id {
				return fmt.Errorf("key %q has tasks in partitions %d and %d", r.Key, p, id)
			}
			partOf[r.Key] = id
		case *state.LeaseGranted:
			grants++
			leased[r.TaskID] = true
			k := keyOf[r.TaskID]
			if live[id][k]++; live[id][k] > maxConc {
				return fmt.Errorf("partition %d lsn %d: key %q has %d live leases, above its max concurrency %d", id, lsn, k, live[id][k], maxConc)
			}
		case *state.TaskCompleted:
			end(r.TaskID)
		case *state.TaskFailed:
			end(r.TaskID)
		case *state.LeaseExpired:
			end(r.TaskID)
		case *state.TaskDead:
			end(r.TaskID)
		}
		return nil
	})
	if len(partOf) != keys {
		t.Fatalf("the logs hold tasks of %d keys, want %d", len(partOf), keys)
	}
	spread := map[uint64]int{}
	for _, p := range partOf {
		spread[p]++
	}
	t.Logf("%d grants replayed; keys per partition: %v", grants, spread)
}
