package coordinator

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// TestCancelAndRetryWorkflow: a cancel ends every task of a running
// workflow, a lease held among them, so that none is leasable, and a task
// outside it that depends on one ends by its policy; a retry runs the
// workflow again from its failed steps, dependencies first, and the log
// replays to the live state.
func TestCancelAndRetryWorkflow(t *testing.T) {
	e := newEnv(t, 5)
	tasks, err := e.c.SubmitWorkflow(ctx, "w", []SubmitRequest{wfReq("a"), wfReq("b", "a"), wfReq("c", "b")})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := tasks[0].ID, tasks[1].ID, tasks[2].ID
	outside, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: []string{b}})
	if err != nil {
		t.Fatal(err)
	}
	l := e.lease("w", "q")
	if l.TaskID != a {
		t.Fatalf("leased %s, want the root %s", l.TaskID, a)
	}
	v, n, err := e.c.CancelWorkflow(ctx, "", "w", Actor{By: "ops", Reason: "wrong input"})
	if err != nil || n != 3 || !v.Done() || v.Cancelled == nil || v.Cancelled.By != "ops" || v.Counts[state.Dead] != 3 {
		t.Fatalf("cancel: %+v, %d, %v", v, n, err)
	}
	if got := e.get(a).FailureReason; got != "workflow cancelled: wrong input" {
		t.Fatalf("the cancelled root's reason: %q", got)
	}
	if got := e.get(outside.Task.ID); got.State != state.Dead {
		t.Fatalf("a task outside the workflow depending on it is %s", got.State)
	}
	if err := e.c.Complete(ctx, a, l.LeaseID, nil); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the cancelled root's lease completes: %v", err)
	}
	if ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10}); err != nil || len(ls) != 0 {
		t.Fatalf("a cancelled workflow leases %d tasks (%v)", len(ls), err)
	}
	if _, n, err := e.c.CancelWorkflow(ctx, "", "w", Actor{}); err != nil || n != 0 {
		t.Fatalf("a second cancel: %d, %v", n, err)
	}

	v, n, err = e.c.RetryWorkflow(ctx, "", "w", Actor{By: "ops"})
	if err != nil || n != 3 || v.Cancelled != nil || v.Counts[state.Waiting] != 1 || v.Counts[state.Blocked] != 2 {
		t.Fatalf("retry: %+v, %d, %v", v, n, err)
	}
	if got := e.get(outside.Task.ID); got.State != state.Dead {
		t.Fatalf("a retry of the workflow touched a task outside it: %s", got.State)
	}
	for _, id := range []string{a, b, c} {
		l := e.lease("w", "q")
		if l.TaskID != id {
			t.Fatalf("leased %s, want %s", l.TaskID, id)
		}
		if err := e.c.Complete(ctx, id, l.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.c.RetryWorkflow(ctx, "", "w", Actor{}); !errors.Is(err, ErrWrongState) {
		t.Fatalf("a retry of a completed workflow: %v", err)
	}
	if _, _, err := e.c.CancelWorkflow(ctx, "", "nope", Actor{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a cancel of no workflow: %v", err)
	}
	e.restart()
	if got := e.replayFromDisk(); !reflect.DeepEqual(got, e.c.Export()) {
		t.Fatal("the replay differs from the live state")
	}
}

// TestWorkflowViews: a workflow's tasks page in creation order, the
// workflows of a namespace in id order, and a wait answers when the last
// task of one ends.
func TestWorkflowViews(t *testing.T) {
	e := newEnv(t, 6)
	// Listed in the batch after their dependents: created after them.
	tasks, err := e.c.SubmitWorkflow(ctx, "w2", []SubmitRequest{wfReq("c", "b"), wfReq("b", "a"), wfReq("a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.SubmitWorkflow(ctx, "w1", []SubmitRequest{{Queue: "other"}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	var after state.OrderKey
	for pages := 0; ; pages++ {
		v, page, next, err := e.c.Workflow(ctx, "", "w2", after, 2)
		if err != nil || v.Total != 3 || pages > 2 {
			t.Fatalf("page %d: %+v %v", pages, v, err)
		}
		for _, tv := range page {
			got = append(got, tv.ID)
		}
		if after = next; next == (state.OrderKey{}) {
			break
		}
	}
	if want := []string{tasks[2].ID, tasks[1].ID, tasks[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("the workflow's tasks: %v, want dependencies first %v", got, want)
	}
	ws, next, err := e.c.Workflows(ctx, DefaultNamespace, state.WorkflowKey{}, 1)
	if err != nil || len(ws) != 1 || ws[0].Key.ID != "w1" || next.ID != "w1" {
		t.Fatalf("the first page of workflows: %+v %+v %v", ws, next, err)
	}
	if ws, next, err = e.c.Workflows(ctx, DefaultNamespace, next, 1); err != nil || len(ws) != 1 || ws[0].Key.ID != "w2" {
		t.Fatalf("the second page of workflows: %+v %+v %v", ws, next, err)
	}
	if ws, _, _ := e.c.Workflows(ctx, "other", state.WorkflowKey{}, 0); len(ws) != 0 {
		t.Fatalf("another namespace lists %+v", ws)
	}
	type answer struct {
		v    WorkflowView
		done bool
		err  error
	}
	out := make(chan answer, 1)
	go func() {
		v, done, err := e.c.WaitWorkflow(ctx, "", "w2", 20*time.Second)
		out <- answer{v, done, err}
	}()
	e.clock.WaitForTimers(1)
	for range 3 {
		l := e.lease("w", "q")
		if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if a := <-out; a.err != nil || !a.done || a.v.Counts[state.Completed] != 3 {
		t.Fatalf("the wait: %+v", a)
	}
	if _, _, err := e.c.WaitWorkflow(ctx, "", "nope", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a wait for no workflow: %v", err)
	}
}

// TestResolveRemote: a task submitted with a dependency in another
// partition is BLOCKED and its dependency is among the partition's
// RemoteDependencies, also after a restart (the edge is in the log); the
// end learned resolves each pending edge once (the second time it appends
// nothing); the lease carries the remote result; a failure learned for a
// dependent under DEAD ends it; the log replays to the live state.
func TestResolveRemote(t *testing.T) {
	e := newEnv(t, 3)
	remote := func(deps ...string) SubmitRequest {
		return SubmitRequest{Queue: "q", DependsOn: deps, Remote: deps}
	}
	a, err := e.c.Submit(ctx, remote("x-p2"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.c.Submit(ctx, remote("x-p2", "y-p2"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Task.State != state.Blocked || b.Task.State != state.Blocked {
		t.Fatalf("tasks with remote dependencies are %s and %s", a.Task.State, b.Task.State)
	}
	if _, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: []string{a.Task.ID}, Remote: []string{a.Task.ID}}); err == nil {
		t.Fatal("a task of the partition taken for a remote one")
	}
	e.restart()
	if deps, err := e.c.RemoteDependencies(); err != nil || !slices.Equal(deps, []string{"x-p2", "y-p2"}) {
		t.Fatalf("watched after a restart: %v (%v)", deps, err)
	}
	if n, err := e.c.ResolveRemote(ctx, "x-p2", RemoteEnd{Outcome: state.EndedCompleted, Result: []byte("rx")}); err != nil || n != 2 {
		t.Fatalf("resolved %d edges (%v), want 2", n, err)
	}
	if n, err := e.c.ResolveRemote(ctx, "x-p2", RemoteEnd{Outcome: state.EndedCompleted, Result: []byte("rx")}); err != nil || n != 0 {
		t.Fatalf("learned again: resolved %d edges (%v), want 0", n, err)
	}
	if _, err := e.c.ResolveRemote(ctx, "x-p2", RemoteEnd{}); err == nil {
		t.Fatal("an end without an outcome taken")
	}
	l := e.lease("w", "q")
	if l.TaskID != a.Task.ID || len(l.Dependencies) != 1 || string(l.Dependencies[0].Result) != "rx" || l.Dependencies[0].State != state.Completed {
		t.Fatalf("lease %s with %+v, want %s with x-p2's result", l.TaskID, l.Dependencies, a.Task.ID)
	}
	if n, err := e.c.ResolveRemote(ctx, "y-p2", RemoteEnd{Outcome: state.EndedDead}); err != nil || n != 1 {
		t.Fatalf("resolved %d edges (%v), want 1", n, err)
	}
	if got := e.get(b.Task.ID); got.State != state.Dead || got.FailureReason != "dependency_failed: task y-p2 is DEAD" {
		t.Fatalf("b after y-p2 ended DEAD: %s %q", got.State, got.FailureReason)
	}
	if deps, err := e.c.RemoteDependencies(); err != nil || len(deps) != 0 {
		t.Fatalf("still watched: %v (%v)", deps, err)
	}
	e.restart()
	if got := e.replayFromDisk(); !reflect.DeepEqual(got, e.c.Export()) {
		t.Fatal("the replay differs from the live state")
	}
}

// TestResolveRemoteMany: the ends of many remote dependencies resolve
// their pending edges in one append and one wait, a dependency named
// twice counting once; learned again, alone or among others, they append
// nothing for the edges already resolved; an invalid end refuses the
// whole call, naming it; the log replays to the live state.
func TestResolveRemoteMany(t *testing.T) {
	e := newEnv(t, 4)
	for _, deps := range [][]string{{"x-p2"}, {"x-p2", "y-p2"}, {"y-p2"}, {"z-p2"}} {
		if _, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: deps, Remote: deps}); err != nil {
			t.Fatal(err)
		}
	}
	x := RemoteResolve{Dependency: "x-p2", End: RemoteEnd{Outcome: state.EndedCompleted, Result: []byte("rx")}}
	y := RemoteResolve{Dependency: "y-p2", End: RemoteEnd{Outcome: state.EndedCompleted, Result: []byte("ry")}}
	z := RemoteResolve{Dependency: "z-p2", End: RemoteEnd{Outcome: state.EndedFailed}}
	if _, err := e.c.ResolveRemoteMany(ctx, []RemoteResolve{x, {Dependency: "y-p2"}}); err == nil || !strings.Contains(err.Error(), "ends[1].outcome") {
		t.Fatalf("an end without an outcome among others: %v", err)
	}
	cl := e.count()
	before := e.c.Stats().LastLSN
	if n, err := e.c.ResolveRemoteMany(ctx, []RemoteResolve{x, y, x}); err != nil || n != 4 {
		t.Fatalf("resolved %d edges (%v), want 4", n, err)
	}
	if got := e.c.Stats().LastLSN - before; got != 4 || cl.appends() != 1 || cl.waits() != 1 {
		t.Fatalf("%d records in %d appends and %d waits, want 4 in one of each", got, cl.appends(), cl.waits())
	}
	if n, err := e.c.ResolveRemoteMany(ctx, []RemoteResolve{x, y}); err != nil || n != 0 {
		t.Fatalf("learned again: resolved %d edges (%v), want 0", n, err)
	}
	if n, err := e.c.ResolveRemote(ctx, "y-p2", y.End); err != nil || n != 0 {
		t.Fatalf("learned again alone: resolved %d edges (%v), want 0", n, err)
	}
	if n, err := e.c.ResolveRemoteMany(ctx, []RemoteResolve{y, z, x}); err != nil || n != 1 {
		t.Fatalf("learned again with z: resolved %d edges (%v), want z's 1", n, err)
	}
	if got := e.c.Stats().LastLSN - before; got != 5 {
		t.Fatalf("%d records in all, want one an edge: 5", got)
	}
	if deps, err := e.c.RemoteDependencies(); err != nil || len(deps) != 0 {
		t.Fatalf("still watched: %v (%v)", deps, err)
	}
	e.restart()
	if got := e.replayFromDisk(); !reflect.DeepEqual(got, e.c.Export()) {
		t.Fatal("the replay differs from the live state")
	}
}
