package e2e

// A workflow across the partitions of a cluster (docs/design/workflows.md,
// "Cluster mode"; cluster_test.go for the cluster): its tasks in three
// queues of four partitions each, worked by workers on every node while
// the owner of some of its partitions and then the coordinator are killed
// -9.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/sdk/client"
)

// The workflow: wfLeaves leaves in each queue, one join per queue that
// depends on its queue's leaves, a parent whose first attempt loses its
// lease and whose second spawns wfKids children in each queue and a
// continuation of them, and the continuation of the whole, which depends
// on the three joins and the parent. 3·96 + 3 + 1 + 1 + 3·2 + 1 = 300.
const (
	wfNamespace = "wf"
	wfID        = "nightly"
	wfLeaves    = 96
	wfKids      = 2
	wfTasks     = 3*wfLeaves + 3 + 1 + 1 + 3*wfKids + 1
	wfWindow    = 5 * time.Second
	// The parent's window: its first attempt holds the lease until it
	// expires.
	wfParentWindow = 2 * time.Second
)

var wfQueues = []string{"wa", "wb", "wc"}

// wfJob is a task's payload: what the handler does.
type wfJob struct {
	Role string `json:"role"` // warm, leaf, join, parent, child, sjoin, final, after, stale
	Q    int    `json:"q"`
	I    int    `json:"i"`
}

func wfPayload(role string, q, i int) []byte {
	b, _ := json.Marshal(wfJob{role, q, i})
	return b
}

// wfValue is leaf i of queue q's result; wfSum a join's.
func wfValue(q, i int) int { return 1000*q + i }

func wfSum(q int) int {
	s := 0
	for i := range wfLeaves {
		s += wfValue(q, i)
	}
	return s
}

// wfFinalResult is what the continuation of the whole answers, made of
// the joins' results it was passed.
func wfFinalResult(sums []int) string {
	var parts []string
	for q, s := range sums {
		parts = append(parts, fmt.Sprintf("%s=%d", wfQueues[q], s))
	}
	return strings.Join(parts, ",")
}

// wfRun is the test's workers and what they saw.
type wfRun struct {
	c       *clTest
	clients []*client.Client
	dead    atomic.Uint32 // bit i: node i is down
	gate    atomic.Int64  // leaves the workers complete before they wait
	leaves  atomic.Int64  // leaves completed (answers received)
	leases  atomic.Int64

	bg        sync.WaitGroup // the parent's stale attempt
	mu        sync.Mutex
	errs      []error
	runs      map[string]int // handler runs by request id, of joins and continuations
	passed    map[string]string
	staleErr  error
	staleSeen bool
	ids       map[string]string // request id → task id, of the batch
}

func (w *wfRun) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// node is the node worker or caller i calls: its own, or while that is
// down the next one up.
func (w *wfRun) node(i int) int {
	d := w.dead.Load()
	for k := range clNodes {
		n := (i + k) % clNodes
		if d&(1<<n) == 0 {
			return n
		}
	}
	return i % clNodes
}

// transient reports whether err, of a call to node n, is a fault's: any
// failure of a call to a node that is down, unavailable while partitions
// move, a call that timed out.
func (w *wfRun) transient(n int, err error) bool {
	return w.dead.Load()&(1<<n) != 0 || errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

func (w *wfRun) kill(i int) {
	w.dead.Or(1 << i)
	w.c.nodes[i].proc.kill9(w.c.t)
}

func (w *wfRun) revive(i int) { w.dead.And(^uint32(1 << i)) }

// TestClusterWorkflow: on three nodes, a workflow of 300 tasks over three
// queues of four partitions each (fan-out, a join per queue, a spawn at
// commit of a parent whose first attempt lost its lease, and one
// continuation of all) completes while the owner of some of its
// partitions, then the coordinator, are killed -9 and restarted, with
// workers on every node. Every task completes; the continuations' handlers
// ran once and their commits applied their effects once; every join was
// passed the results of all its dependencies and the continuation those
// of the joins; the stale attempt of the parent spawned nothing; each
// partition's log created each task once, and granted no lease of a task
// before all its dependencies had completed. Waits for the workflow and a
// SubmitAndWait of a task depending on its continuation, through the
// other nodes, see it end.
func TestClusterWorkflow(t *testing.T) {
	c, _ := newClTest(t, -1)
	c.extraQueues = len(wfQueues) - 1 // the workflow's three queues; no load
	ctx := t.Context()
	w := &wfRun{c: c, runs: map[string]int{}, passed: map[string]string{}, ids: map[string]string{}}
	for _, n := range c.nodes {
		cl, err := client.New(n.url(), client.Options{MaxRetries: 3, RetryBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		w.clients = append(w.clients, cl)
	}
	if _, err := c.db.ExecContext(ctx, `CREATE TABLE wf_effects (task_id VARCHAR(100) NOT NULL, attempt INT NOT NULL,
		PRIMARY KEY (task_id, attempt))`); err != nil {
		t.Fatal(err)
	}

	// A task in each queue makes its partitions, which spread over the
	// nodes before the workflow comes.
	for q, name := range wfQueues {
		if _, err := w.clients[q].Submit(ctx, client.SubmitRequest{Namespace: wfNamespace, Queue: name, Payload: wfPayload("warm", q, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitBalanced("the workflow's queues' partitions spread over the nodes", c.ids())

	// The batch: leaves, joins, the parent, the continuation.
	var reqs []client.SubmitRequest
	for q, name := range wfQueues {
		for i := range wfLeaves {
			reqs = append(reqs, client.SubmitRequest{Namespace: wfNamespace, Queue: name, RequestID: fmt.Sprintf("leaf-%d-%d", q, i),
				Payload: wfPayload("leaf", q, i), ExecutionWindow: wfWindow})
		}
	}
	for q, name := range wfQueues {
		var deps []string
		for i := range wfLeaves {
			deps = append(deps, fmt.Sprintf("leaf-%d-%d", q, i))
		}
		reqs = append(reqs, client.SubmitRequest{Namespace: wfNamespace, Queue: name, RequestID: fmt.Sprintf("join-%d", q),
			Payload: wfPayload("join", q, 0), ExecutionWindow: wfWindow, DependsOn: deps})
	}
	reqs = append(reqs,
		client.SubmitRequest{Namespace: wfNamespace, Queue: wfQueues[1], RequestID: "parent", Payload: wfPayload("parent", 1, 0),
			ExecutionWindow: wfParentWindow},
		client.SubmitRequest{Namespace: wfNamespace, Queue: wfQueues[0], RequestID: "final", Payload: wfPayload("final", 0, 0),
			ExecutionWindow: wfWindow, DependsOn: []string{"join-0", "join-1", "join-2", "parent"}})

	w.gate.Store(wfLeaves) // a third of the leaves before the first kill
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for i := range 2 * clNodes {
		workers.Go(func() { w.work(ctx, i, stop) })
	}

	begin := time.Now()
	res, err := w.clients[0].SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: wfID, Requests: reqs})
	if err != nil {
		t.Fatalf("submitting the workflow of %d tasks over queues %v through %s: %v", len(reqs), wfQueues, c.nodes[0].id, err)
	}
	w.mu.Lock()
	for i, r := range res {
		w.ids[reqs[i].RequestID] = r.TaskID
	}
	w.mu.Unlock()
	finalID := w.ids["final"]

	// Waiters on the other nodes, from the submit on: the workflow, and a
	// task that depends on its continuation submitted and waited for.
	var waiters sync.WaitGroup
	waited := make([]*client.Workflow, clNodes)
	for i := 1; i < clNodes; i++ {
		waiters.Go(func() { waited[i] = w.waitWorkflow(ctx, i) })
	}
	var after *client.Task
	waiters.Go(func() {
		after = w.submitAndWait(ctx, 2, client.SubmitRequest{Namespace: wfNamespace, Queue: wfQueues[0], RequestID: "after",
			Payload: wfPayload("after", 0, 0), ExecutionWindow: wfWindow, DependsOn: []string{finalID}})
	})

	// Kill -9 a node other than the coordinator that owns partitions of
	// the workflow, the continuation's if it can, once a third of the
	// leaves have completed; wait for them to move; restart it.
	c.poll("a third of the leaves completed", func() (bool, error) { return w.leaves.Load() >= wfLeaves, w.firstErr() })
	lk, ps := c.heldLockAndParts()
	var ours []uint64
	for _, rid := range []string{"final", "join-0", "join-1", "join-2", "parent"} {
		ours = append(ours, partitionOfTask(w.ids[rid]))
	}
	victim := c.ownerButCoordinator(lk, ps, ours...)
	lost := ownedBy(ps, c.nodes[victim].id)
	w.gate.Store(2 * wfLeaves)
	w.kill(victim)
	t.Logf("kill -9 %s after %d leaves: it owned %s (the continuation's partition is %d)", c.nodes[victim].id, w.leaves.Load(), describe(lost), partitionOfTask(finalID))
	c.poll("the killed owner's partitions move to the live nodes", func() (bool, error) {
		ps, err := c.parts()
		return movedTo(ps, lost, func(o string) bool { return o != "" && o != c.nodes[victim].id }) != nil, err
	})
	c.start(c.nodes[victim], false)
	c.waitServing(c.nodes[victim])
	w.revive(victim)

	// Then the coordinator, once two thirds of the leaves have completed.
	c.poll("two thirds of the leaves completed", func() (bool, error) { return w.leaves.Load() >= 2*wfLeaves, w.firstErr() })
	lk, ps = c.heldLockAndParts()
	coord := c.node(lk.owner)
	lost = ownedBy(ps, lk.owner)
	w.gate.Store(math.MaxInt64)
	w.kill(coord)
	t.Logf("kill -9 %s, the coordinator at epoch %d, after %d leaves: it owned %s", lk.owner, lk.epoch, w.leaves.Load(), describe(lost))
	c.poll("another node is the coordinator and the killed one's partitions move", func() (bool, error) {
		now, ok, err := c.lock()
		if err != nil || !ok || now.owner == lk.owner || now.epoch <= lk.epoch {
			return false, err
		}
		ps, err := c.parts()
		return movedTo(ps, lost, func(o string) bool { return o != "" && o != lk.owner }) != nil, err
	})
	c.start(c.nodes[coord], false)
	c.waitServing(c.nodes[coord])
	w.revive(coord)

	c.poll("the task after the continuation ended", func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.runs["after"] > 0 || len(w.errs) > 0, nil
	})
	waiters.Wait()
	took := time.Since(begin)
	close(stop)
	workers.Wait()
	w.bg.Wait()
	if err := w.firstErr(); err != nil {
		t.Fatal(err)
	}

	// What the waiters saw.
	for i := 1; i < clNodes; i++ {
		if got := waited[i]; got == nil || got.State != client.WorkflowStateCompleted || got.Total != wfTasks || got.Tasks.Completed != wfTasks {
			t.Errorf("WaitForWorkflow through %s: %+v, want COMPLETED with %d tasks completed", c.nodes[i].id, got, wfTasks)
		}
	}
	sums := []int{wfSum(0), wfSum(1), wfSum(2)}
	if want := "after:" + wfFinalResult(sums); after == nil || after.State != client.TaskStateCompleted || string(after.Result) != want {
		t.Errorf("SubmitAndWait of a task depending on the continuation: %+v, want COMPLETED with result %q", after, want)
	}

	// Every task of the workflow, read through n2.
	tasks := w.workflowTasks(ctx, 1)
	byReq := map[string]client.Task{}
	for _, tk := range tasks {
		if tk.State != client.TaskStateCompleted {
			t.Errorf("task %s (%s) is %s: %s", tk.ID, tk.RequestID, tk.State, tk.FailureReason)
		}
		if tk.RequestID != "" {
			byReq[tk.RequestID] = tk
		}
	}
	if len(tasks) != wfTasks {
		t.Errorf("the workflow has %d tasks, want %d", len(tasks), wfTasks)
	}
	if got := string(byReq["final"].Result); got != wfFinalResult(sums) {
		t.Errorf("the continuation's result is %q, want %q (the joins' results passed on)", got, wfFinalResult(sums))
	}
	kids := 0
	for _, tk := range tasks {
		if tk.SpawnedBy == w.ids["parent"] {
			kids++
		}
	}
	if kids != 3*wfKids+1 {
		t.Errorf("the parent spawned %d tasks, want %d (its children and their continuation, once)", kids, 3*wfKids+1)
	}

	// The handlers of the joins and continuations ran once each, and the
	// continuations' effects (applied once their commit won) are there
	// once.
	for _, rid := range []string{"join-0", "join-1", "join-2", "sjoin", "final", "after"} {
		if n := w.runs[rid]; n != 1 {
			t.Errorf("the handler of %s ran %d times, want once", rid, n)
		}
	}
	for _, rid := range []string{"sjoin", "final"} {
		var n int
		if err := c.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM wf_effects WHERE task_id = ?", byReq[rid].ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("the effects of %s were applied %d times, want once", rid, n)
		}
	}
	if !w.staleSeen || w.staleErr == nil {
		t.Errorf("the parent's first attempt: tried a completion after its lease expired: %v, answered %v; want it tried and refused", w.staleSeen, w.staleErr)
	}

	if w.staleErr != nil && !errors.Is(w.staleErr, client.ErrLeaseLost) && !errors.Is(w.staleErr, client.ErrAlreadyCommitted) {
		t.Errorf("the parent's stale attempt's completion was answered %v, want lease lost or already committed", w.staleErr)
	}

	// The logs, of the workflow's tasks and of the task after it.
	if after != nil {
		tasks = append(tasks, *after)
	}
	stats := w.checkLogs(tasks)
	t.Logf("workflow %s: %d tasks (and one after it) over %d partitions of queues %v; %d edges, %d across partitions, resolved by %d DependencyResolved records (%d a repeat, applied as nothing); %d TasksDelivered; %d leases",
		wfID, len(tasks)-1, stats.partitions, wfQueues, stats.edges, stats.remote, stats.resolutions, stats.repeated, stats.deliveries, stats.grants)
	t.Logf("kill -9 of %s (an owner of the workflow's partitions) and %s (the coordinator); the workflow completed %v after its submit",
		c.nodes[victim].id, c.nodes[coord].id, took.Round(time.Millisecond))
	t.Logf("handler runs: %v; the stale attempt of the parent was answered %v", w.runs, w.staleErr)
	out := mustCLI(t, "workflow", "get", wfID, "--namespace", wfNamespace, "--addr", c.nodes[2].url())
	if !strings.Contains(out, "COMPLETED") {
		t.Errorf("tenure workflow get through n3 does not say COMPLETED:\n%s", out)
	}
	if lines := strings.SplitN(out, "\n", 6); len(lines) > 0 {
		t.Logf("tenure workflow get %s through %s:\n%s", wfID, c.nodes[2].id, strings.Join(lines[:min(len(lines), 5)], "\n"))
	}
}

// waitServing waits until node n, restarted, is healthy and active (it
// may get partitions back or not).
func (c *clTest) waitServing(n *clNode) {
	c.t.Helper()
	c.poll(n.id+" serves again", func() (bool, error) {
		if code, err := c.health(n); err != nil || code != http.StatusOK {
			return false, nil
		}
		nodes, err := c.nodeRows()
		return nodes[n.id].active, err
	})
}

func (w *wfRun) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		return eventually.Stop(w.errs[0])
	}
	return nil
}

// work is worker i: it leases from the three queues through its node (or
// the next one up while it is down) until stop, and runs each task's role.
func (w *wfRun) work(ctx context.Context, i int, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if w.leaves.Load() >= w.gate.Load() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		n := w.node(i)
		res, err := w.clients[n].Lease(ctx, client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", i), Namespace: wfNamespace, Queues: wfQueues,
			MaxTasks: 4, Wait: 300 * time.Millisecond})
		if err != nil {
			if !w.transient(n, err) && ctx.Err() == nil {
				w.fail(fmt.Errorf("worker %d, lease through %s: %w", i, w.c.nodes[n].id, err))
				return
			}
			continue
		}
		for _, lt := range res.Tasks {
			w.leases.Add(1)
			if err := w.handle(ctx, i, lt); err != nil {
				w.fail(fmt.Errorf("worker %d, task %s: %w", i, lt.ID, err))
				return
			}
		}
	}
}

// handle runs one leased task: its role's work, then its completion. It
// returns an error for what no fault explains.
func (w *wfRun) handle(ctx context.Context, i int, lt client.LeasedTask) error {
	var job wfJob
	if err := json.Unmarshal(lt.Payload, &job); err != nil {
		return err
	}
	if lt.Committed {
		// A finalisation: the commit won and its effects were applied
		// (keyed by the fencing token); complete it.
		return w.complete(ctx, i, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}, nil)
	}
	var (
		result []byte
		spawn  []client.SubmitRequest
		effect bool // applied once the commit wins
	)
	switch job.Role {
	case "warm", "child":
		result = []byte(fmt.Sprintf("%s-%d-%d", job.Role, job.Q, job.I))
	case "leaf":
		time.Sleep(5 * time.Millisecond) // the work
		result = []byte(strconv.Itoa(wfValue(job.Q, job.I)))
		return w.complete(ctx, i, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result}, func() { w.leaves.Add(1) })
	case "join":
		w.ran(fmt.Sprintf("join-%d", job.Q))
		vals, err := w.inputs(ctx, i, lt, wfLeaves)
		if err != nil {
			return err
		}
		sum := 0
		for _, v := range vals {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("join %d was passed the result %q", job.Q, v)
			}
			sum += n
		}
		result = []byte(strconv.Itoa(sum))
	case "parent":
		w.mu.Lock()
		first := !w.staleSeen
		w.staleSeen = true
		w.mu.Unlock()
		if first {
			// This attempt loses its lease, and tries to complete, with a
			// spawn, once the next attempt has completed the parent.
			w.bg.Go(func() { w.stale(lt) })
			return nil
		}
		for q, name := range wfQueues {
			for k := range wfKids {
				spawn = append(spawn, client.SubmitRequest{Namespace: wfNamespace, Queue: name, RequestID: fmt.Sprintf("child-%d-%d", q, k),
					Payload: wfPayload("child", q, k), ExecutionWindow: wfWindow})
			}
		}
		var deps []string
		for _, s := range spawn {
			deps = append(deps, s.RequestID)
		}
		spawn = append(spawn, client.SubmitRequest{Namespace: wfNamespace, Queue: wfQueues[2], RequestID: "sjoin",
			Payload: wfPayload("sjoin", 2, 0), ExecutionWindow: wfWindow, DependsOn: deps})
		result = []byte("spawned")
	case "sjoin":
		w.ran("sjoin")
		vals, err := w.inputs(ctx, i, lt, 3*wfKids)
		if err != nil {
			return err
		}
		slices.Sort(vals)
		result = []byte(strings.Join(vals, ","))
		effect = true
	case "final":
		w.ran("final")
		vals, err := w.inputs(ctx, i, lt, 4)
		if err != nil {
			return err
		}
		// The joins' results, in the order the continuation named them,
		// then the parent's.
		var sums []int
		for _, v := range vals[:3] {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("the continuation was passed %q as a join's result", v)
			}
			sums = append(sums, n)
		}
		if vals[3] != "spawned" {
			return fmt.Errorf("the continuation was passed %q as the parent's result", vals[3])
		}
		result = []byte(wfFinalResult(sums))
		effect = true
	case "after":
		w.ran("after")
		vals, err := w.inputs(ctx, i, lt, 1)
		if err != nil {
			return err
		}
		result = []byte("after:" + vals[0])
	default:
		return fmt.Errorf("leased a task of role %q: %s", job.Role, lt.Payload)
	}
	if effect {
		// Commit, apply the effect keyed by the fencing token, complete.
		n := w.node(i)
		tok, err := w.clients[n].Commit(ctx, client.CommitRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result})
		if err != nil {
			if w.transient(n, err) || errors.Is(err, client.ErrLeaseLost) {
				return nil // its lease expires; it runs again
			}
			return fmt.Errorf("commit: %w", err)
		}
		if _, err := w.c.db.ExecContext(ctx, "INSERT INTO wf_effects (task_id, attempt) VALUES (?, ?)", tok.TaskID, tok.Attempt); err != nil {
			return fmt.Errorf("the effect of %s: %w", lt.ID, err)
		}
		return w.complete(ctx, i, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}, nil)
	}
	return w.complete(ctx, i, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result, Spawn: spawn}, nil)
}

// complete sends a completion; done runs when it was applied.
func (w *wfRun) complete(ctx context.Context, i int, req client.CompleteRequest, done func()) error {
	n := w.node(i)
	err := w.clients[n].Complete(ctx, req)
	switch {
	case err == nil:
		if done != nil {
			done()
		}
		return nil
	case errors.Is(err, client.ErrLeaseLost) || errors.Is(err, client.ErrAlreadyCommitted) || w.transient(n, err):
		// Its partition was moving: the completion may have applied, or
		// the lease expires and the task runs again.
		return nil
	}
	return fmt.Errorf("complete through %s: %w", w.c.nodes[n].id, err)
}

func (w *wfRun) ran(rid string) {
	w.mu.Lock()
	w.runs[rid]++
	w.mu.Unlock()
}

// inputs are the results a leased task was passed, in the order of its
// dependencies: there must be want of them, all COMPLETED. A result left
// out of the lease is read with GetTask.
func (w *wfRun) inputs(ctx context.Context, i int, lt client.LeasedTask, want int) ([]string, error) {
	if len(lt.Dependencies) != want {
		return nil, fmt.Errorf("leased with %d dependencies, want %d", len(lt.Dependencies), want)
	}
	var out []string
	for _, d := range lt.Dependencies {
		if d.State != client.TaskStateCompleted {
			return nil, fmt.Errorf("leased while its dependency %s is %s", d.TaskID, d.State)
		}
		r := d.Result
		if d.ResultOmitted {
			n := w.node(i)
			tk, err := w.clients[n].GetTask(ctx, client.GetTaskRequest{TaskID: d.TaskID})
			if err != nil {
				return nil, fmt.Errorf("reading the result of dependency %s: %w", d.TaskID, err)
			}
			r = tk.Result
		}
		out = append(out, string(r))
	}
	return out, nil
}

// stale is the parent's first attempt: it waits until the parent has
// completed by a later attempt, then completes with a spawn of its own,
// which must be refused.
func (w *wfRun) stale(lt client.LeasedTask) {
	ctx := context.Background()
	err := eventually.Until(ctx, func() error {
		n := w.node(0)
		tk, err := w.clients[n].GetTask(ctx, client.GetTaskRequest{TaskID: lt.ID})
		if err != nil {
			return err
		}
		if tk.State != client.TaskStateCompleted {
			return eventually.ErrNotYet
		}
		return nil
	})
	if err != nil {
		w.fail(fmt.Errorf("the parent never completed: %w", err))
		return
	}
	n := w.node(0)
	err = w.clients[n].Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: []byte("stale"),
		Spawn: []client.SubmitRequest{{Namespace: wfNamespace, Queue: wfQueues[0], RequestID: "stale", Payload: wfPayload("stale", 0, 0)}}})
	w.mu.Lock()
	w.staleErr = err
	w.mu.Unlock()
}

// waitWorkflow waits for the workflow through node i, moving on to the
// next node while it is down.
func (w *wfRun) waitWorkflow(ctx context.Context, i int) *client.Workflow {
	ctx, cancel := context.WithTimeout(ctx, 2*eventually.Deadline)
	defer cancel()
	for ctx.Err() == nil {
		n := w.node(i)
		got, err := w.clients[n].WaitForWorkflow(ctx, wfNamespace, wfID)
		if err == nil {
			return got
		}
		if !w.transient(n, err) && !errors.Is(err, client.ErrNotFound) {
			w.fail(fmt.Errorf("WaitForWorkflow through %s: %w", w.c.nodes[n].id, err))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// submitAndWait submits req through node i and waits for its task,
// again through the next node with the same request id while i is down.
func (w *wfRun) submitAndWait(ctx context.Context, i int, req client.SubmitRequest) *client.Task {
	ctx, cancel := context.WithTimeout(ctx, 2*eventually.Deadline)
	defer cancel()
	for ctx.Err() == nil {
		n := w.node(i)
		got, err := w.clients[n].SubmitAndWait(ctx, req)
		if err == nil {
			return got
		}
		if !w.transient(n, err) {
			w.fail(fmt.Errorf("SubmitAndWait through %s: %w", w.c.nodes[n].id, err))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// workflowTasks reads every task of the workflow through node i.
func (w *wfRun) workflowTasks(ctx context.Context, i int) []client.Task {
	t := w.c.t
	t.Helper()
	var out []client.Task
	token := ""
	for {
		page, err := w.clients[i].GetWorkflow(ctx, client.GetWorkflowRequest{Namespace: wfNamespace, WorkflowID: wfID, PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("GetWorkflow through %s: %v", w.c.nodes[i].id, err)
		}
		if page.Workflow.State != client.WorkflowStateCompleted || page.Workflow.Total != wfTasks {
			t.Errorf("GetWorkflow: %s with %d tasks, want COMPLETED with %d", page.Workflow.State, page.Workflow.Total, wfTasks)
		}
		out = append(out, page.Tasks...)
		if token = page.NextPageToken; token == "" {
			return out
		}
	}
}

// wfLogStats is what checkLogs counted.
type wfLogStats struct {
	partitions, edges, remote, grants int
	resolutions                       int // DependencyResolved records
	repeated                          int // of them, a second one of an edge (applied as nothing)
	deliveries                        int // TasksDelivered records
}

// checkLogs reads the log of every partition of the workflow's queues
// from the database and checks that every task of tasks was created
// once, in the partition its id names, that none of the stale attempt's
// spawn exists, and that no task was leased before each of its
// dependencies had completed: a dependency in the same partition by a
// completion earlier in the log; one in another partition by a
// DependencyResolved of the edge, COMPLETED, with the dependency's
// result, earlier in the dependent's log, and not before the
// dependency's completion (the times of the two records, of one host's
// clock).
func (w *wfRun) checkLogs(tasks []client.Task) wfLogStats {
	t := w.c.t
	t.Helper()
	type at struct {
		part, lsn uint64
		at        state.Time
	}
	type edge struct{ dependent, dependency string }
	type resolution struct {
		at
		outcome state.Ended
		result  []byte
	}
	var (
		st        wfLogStats
		creations = map[string]int{}
		deps      = map[string][]string{}
		completed = map[string]at{}     // task → its completion
		results   = map[string][]byte{} // task → its result
		grants    = map[string][]at{}
		resolved  = map[edge][]resolution{}
		parts     = map[uint64]bool{}
	)
	for _, q := range wfQueues {
		w.c.eachLogRecord(wfNamespace, q, func(p, lsn uint64, r state.Record) error {
			parts[p] = true
			for _, tc := range state.Creates(r) {
				if partitionOfTask(tc.TaskID) != p {
					return fmt.Errorf("partition %d lsn %d created %s, a task of partition %d", p, lsn, tc.TaskID, partitionOfTask(tc.TaskID))
				}
				creations[tc.TaskID]++
				deps[tc.TaskID] = tc.DependsOn
				if strings.Contains(string(tc.Payload), `"stale"`) {
					return fmt.Errorf("partition %d lsn %d created %s, spawned by the stale attempt of the parent", p, lsn, tc.TaskID)
				}
			}
			switch r := r.(type) {
			case *state.LeaseGranted:
				grants[r.TaskID] = append(grants[r.TaskID], at{p, lsn, r.GrantedAt})
			case *state.TaskCommitted:
				results[r.TaskID] = r.Result
			case *state.TaskCompleted:
				completed[r.TaskID] = at{p, lsn, r.At}
				if _, committed := results[r.TaskID]; !committed {
					results[r.TaskID] = r.Result
				}
			case *state.DependencyResolved:
				st.resolutions++
				k := edge{r.TaskID, r.Dependency}
				resolved[k] = append(resolved[k], resolution{at{p, lsn, r.At}, r.Outcome, r.Result})
			case *state.TasksDelivered:
				st.deliveries++
			}
			return nil
		})
	}
	st.partitions = len(parts)
	for _, tk := range tasks {
		if n := creations[tk.ID]; n != 1 {
			t.Errorf("task %s (%s) was created %d times in the logs, want once", tk.ID, tk.RequestID, n)
		}
		for _, d := range deps[tk.ID] {
			st.edges++
			done, ok := completed[d]
			if !ok {
				t.Errorf("task %s (%s) depends on %s, which never completed", tk.ID, tk.RequestID, d)
				continue
			}
			remote := partitionOfTask(d) != partitionOfTask(tk.ID)
			var first resolution
			if remote {
				st.remote++
				rs := resolved[edge{tk.ID, d}]
				if len(rs) == 0 {
					t.Errorf("task %s (%s) depends on %s of partition %d: no DependencyResolved of the edge in its log", tk.ID, tk.RequestID, d, partitionOfTask(d))
					continue
				}
				st.repeated += len(rs) - 1
				first = rs[0]
				switch {
				case first.part != partitionOfTask(tk.ID):
					t.Errorf("the edge %s → %s was resolved in partition %d, not the dependent's", tk.ID, d, first.part)
				case first.outcome != state.EndedCompleted || string(first.result) != string(results[d]):
					t.Errorf("the edge %s → %s was resolved %s with result %q; the dependency completed with %q", tk.ID, d, first.outcome, first.result, results[d])
				case first.at.at < done.at:
					t.Errorf("the edge %s → %s was resolved at %s (lsn %d of partition %d), before the dependency completed at %s (lsn %d of partition %d)",
						tk.ID, d, first.at.at, first.lsn, first.part, done.at, done.lsn, done.part)
				}
			}
			for _, g := range grants[tk.ID] {
				switch {
				case !remote && done.lsn > g.lsn:
					t.Errorf("task %s (%s) was leased at lsn %d of partition %d, before its dependency %s completed at lsn %d", tk.ID, tk.RequestID, g.lsn, g.part, d, done.lsn)
				case remote && first.lsn > g.lsn:
					t.Errorf("task %s (%s) was leased at lsn %d of partition %d, before the edge to %s of partition %d was resolved at lsn %d",
						tk.ID, tk.RequestID, g.lsn, g.part, d, done.part, first.lsn)
				}
			}
		}
		st.grants += len(grants[tk.ID])
	}
	return st
}
