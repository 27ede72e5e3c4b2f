package e2e

// Remote dependencies in a cluster of real processes, across kill -9
// (docs/design/workflows.md, "Cluster mode"; cluster_test.go).

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/sdk/client"
)

// TestClusterRemoteDependencyKill: tasks of one queue depend on a task of
// another queue (so of another partition); the owner of a dependent's
// partition is killed with kill -9 before the dependency completes, and in
// a second round right after it completed. Every dependent is released
// exactly once (one DependencyResolved in its history, one lease) with the
// dependency's result in its lease: the new owner replays the pending edge
// and asks again, and an end learned twice resolves the edge once.
func TestClusterRemoteDependencyKill(t *testing.T) {
	c, _ := newClTest(t, -1)
	c.extraQueues = 1 // two queues in all: no load runs
	ctx := t.Context()
	const (
		depQueue = "edge-deps"
		queue    = "edge-dependents"
		per      = 6
	)
	onAny := c.onAny()
	submit := func(queue, requestID string, deps ...string) string {
		t.Helper()
		var id string
		onAny("submitting "+requestID, func(cl *client.Client) error {
			res, err := cl.Submit(ctx, client.SubmitRequest{Namespace: clNamespace, Queue: queue, RequestID: requestID, DependsOn: deps})
			id = res.TaskID
			return err
		})
		return id
	}
	state := func(id string) client.TaskState {
		t.Helper()
		var st client.TaskState
		onAny("reading "+id, func(cl *client.Client) error {
			task, err := cl.GetTask(ctx, client.GetTaskRequest{TaskID: id})
			if err == nil {
				st = task.State
			}
			return err
		})
		return st
	}
	// Both queues exist and are spread before the rounds.
	submit(depQueue, "warm-up")
	submit(queue, "warm-up")
	c.waitBalanced("the queues' partitions spread over the three nodes", c.ids())

	released := map[string]int{} // leases of each dependent
	var all []string
	for round := range 2 {
		dep := submit(depQueue, fmt.Sprint("dep-", round))
		var dependents []string
		for i := range per {
			id := submit(queue, fmt.Sprintf("dependent-%d-%d", round, i), dep)
			if st := state(id); st != client.TaskStateBlocked {
				t.Fatalf("round %d: a task depending on %s (another partition) is %v, want BLOCKED", round, dep, st)
			}
			dependents = append(dependents, id)
		}
		all = append(all, dependents...)
		ps, err := c.parts()
		if err != nil {
			t.Fatal(err)
		}
		victim := c.node(ps[partitionOfTask(dependents[0])].owner)
		if victim < 0 {
			t.Fatalf("round %d: the owner of %s is not a node of the test", round, dependents[0])
		}
		if round == 0 {
			c.nodes[victim].proc.kill9(t)
			t.Logf("round %d: killed -9 %s, owner of the partition of %s, before %s completed", round, c.nodes[victim].id, dependents[0], dep)
		}
		var lease client.LeasedTask
		onAny(fmt.Sprintf("round %d: leasing %s", round, dep), func(cl *client.Client) error {
			res, err := cl.Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: clNamespace, Queue: depQueue, MaxTasks: 10})
			if err != nil {
				return err
			}
			for _, l := range res.Tasks {
				if l.ID == dep {
					lease = l
					return nil
				}
				if err := cl.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
					return err
				}
			}
			return fmt.Errorf("%s not leased yet", dep)
		})
		onAny(fmt.Sprintf("round %d: completing %s", round, dep), func(cl *client.Client) error {
			return cl.Complete(ctx, client.CompleteRequest{TaskID: dep, LeaseID: lease.LeaseID, Result: []byte("result of " + dep)})
		})
		if round == 1 {
			c.nodes[victim].proc.kill9(t)
			t.Logf("round %d: killed -9 %s, owner of the partition of %s, right after %s completed", round, c.nodes[victim].id, dependents[0], dep)
		}
		c.start(c.nodes[victim], false)
		c.waitBalanced(fmt.Sprintf("round %d: %s back", round, c.nodes[victim].id), c.ids())

		left := map[string]bool{}
		for _, id := range dependents {
			left[id] = true
		}
		onAny(fmt.Sprintf("round %d: leasing the %d dependents", round, per), func(cl *client.Client) error {
			res, err := cl.Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: clNamespace, Queue: queue, MaxTasks: 10})
			if err != nil {
				return err
			}
			for _, l := range res.Tasks {
				released[l.ID]++
				if !slices.Contains(dependents, l.ID) {
					// The warm-up task, or a dependent of the round before
					// leased twice (checked at the end).
					if err := cl.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
						return err
					}
					continue
				}
				delete(left, l.ID)
				if len(l.Dependencies) != 1 || l.Dependencies[0].TaskID != dep || string(l.Dependencies[0].Result) != "result of "+dep {
					t.Errorf("round %d: the lease of %s says of its dependencies %+v, want %s with its result", round, l.ID, l.Dependencies, dep)
				}
				if err := cl.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
					return err
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("%d dependents not leased yet", len(left))
			}
			return nil
		})
	}
	for _, id := range all {
		if released[id] != 1 {
			t.Errorf("dependent %s was leased %d times, want once", id, released[id])
		}
		var resolved int
		onAny("the history of "+id, func(cl *client.Client) error {
			h, err := cl.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: id})
			resolved = 0
			for _, e := range h {
				if e.Type == "DependencyResolved" {
					resolved++
				}
			}
			return err
		})
		if resolved != 1 {
			t.Errorf("dependent %s has %d DependencyResolved records, want 1", id, resolved)
		}
	}
}

// onAny returns a function that runs f through one node of the cluster
// after the other, with the Go SDK, until one answers, polling while none
// does (a partition moving, a node down).
func (c *clTest) onAny() func(what string, f func(*client.Client) error) {
	c.t.Helper()
	clients := sdkEach(c.t, c.nodes, client.Options{MaxRetries: -1})
	i := 0
	return func(what string, f func(*client.Client) error) {
		c.t.Helper()
		c.poll(what, func() (bool, error) {
			i++
			return true, f(clients[i%len(clients)])
		})
	}
}
