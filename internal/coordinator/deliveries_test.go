package coordinator

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/state"
)

// cluster is three partitions of a cluster in one process, each its own
// coordinator over its own log: a DeliverFunc that reaches the partition
// a delivery names, which a test may make fail after the partition
// created the tasks (the home's crash between the two).
type cluster struct {
	t     *testing.T
	parts map[string]*env
	mu    sync.Mutex
	calls map[string]int // calls per partition
	// lose, when set, makes a delivery to that partition fail after it
	// succeeded there, once.
	lose string
}

func newCluster(t *testing.T) *cluster {
	cl := &cluster{t: t, parts: map[string]*env{}, calls: map[string]int{}}
	for i, s := range []string{"-p1", "-p2", "-p3"} {
		cl.parts[s] = newEnvIn(t, uint64(40+i), s)
	}
	return cl
}

func (cl *cluster) deliver(ctx context.Context, d Delivered) error {
	cl.mu.Lock()
	cl.calls[d.Place]++
	lose := cl.lose == d.Place
	if lose {
		cl.lose = ""
	}
	cl.mu.Unlock()
	to := cl.parts[d.Place]
	if to == nil {
		return errors.New("no such partition " + d.Place)
	}
	if err := to.c.CreateDelivered(ctx, d); err != nil {
		return err
	}
	if lose {
		return errors.New("the answer was lost")
	}
	return nil
}

// deliverAll runs the home's deliveries until none is pending.
func (cl *cluster) deliverAll(home *env) {
	cl.t.Helper()
	for range 10 {
		d, ok, err := home.c.nextDelivery()
		if err != nil {
			cl.t.Fatal(err)
		}
		if !ok {
			return
		}
		if err := cl.deliver(ctx, d); err != nil {
			continue // sent again, as RunDeliveries would
		}
		if err := home.c.markDelivered(ctx, d); err != nil && !errors.Is(err, errRedeliver) {
			cl.t.Fatal(err)
		}
	}
	cl.t.Fatalf("deliveries still pending after ten rounds: %d", len(home.c.Export().Deliveries))
}

// TestWorkflowAcrossPartitions: a workflow batch whose tasks go to three
// partitions is written whole in its home, the first task's partition:
// the home's tasks are created there, the others kept as deliveries with
// their final ids, delivered in record order to their partitions (a
// dependency there before its dependent), each created exactly once
// though a delivery's answer is lost and it is sent again; TasksDelivered
// applies once, the home's log replays to its live state, and the batch
// sent again names the same tasks and creates nothing.
func TestWorkflowAcrossPartitions(t *testing.T) {
	cl := newCluster(t)
	home := cl.parts["-p1"]
	reqs := func() []SubmitRequest {
		rs := []SubmitRequest{wfReq("a"), wfReq("b"), wfReq("c", "b"), wfReq("d"), wfReq("e", "a")}
		rs[1].Place, rs[2].Place, rs[3].Place = "-p2", "-p2", "-p3"
		rs[1].Queue, rs[2].Queue, rs[3].Queue = "q2", "q2", "q3"
		return rs
	}
	ids, err := home.c.SubmitWorkflow(ctx, "w", reqs())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"-p1", "-p2", "-p2", "-p3", "-p1"} {
		if !strings.HasSuffix(ids[i].ID, want) || ids[i].Duplicate {
			t.Fatalf("task %d: %+v, want a new id ending %s", i, ids[i], want)
		}
	}
	if ids[1].ID != DeliveredTaskID("default", "b", "-p2") {
		t.Fatalf("a delivered task's id %s is not derived from its request id", ids[1].ID)
	}
	ex := home.c.Export()
	if len(ex.Tasks) != 2 || len(ex.Deliveries) != 3 {
		t.Fatalf("the home holds %d tasks and %d deliveries, want 2 and 3", len(ex.Tasks), len(ex.Deliveries))
	}
	if v, _, _, err := home.c.Workflow(ctx, "", "w", state.OrderKey{}, 0); err != nil || v.Delivering != 3 || v.Done() {
		t.Fatalf("the home's view of the workflow: %+v, %v: want 3 tasks being delivered, not done", v, err)
	}
	if got := home.replayFromDisk(); !reflect.DeepEqual(got, ex) {
		t.Fatalf("the home's replayed log differs from its live state")
	}

	cl.lose = "-p2"
	cl.deliverAll(home)
	if cl.calls["-p2"] != 2 || cl.calls["-p3"] != 1 {
		t.Fatalf("calls per partition %v: want -p2 twice (its answer lost once), -p3 once", cl.calls)
	}
	if n := home.c.Export().Deliveries; n != nil {
		t.Fatalf("deliveries still pending: %v", n)
	}
	p2, p3 := cl.parts["-p2"], cl.parts["-p3"]
	if n := len(p2.c.Export().Tasks); n != 2 {
		t.Fatalf("partition -p2 holds %d tasks, want b and c once each", n)
	}
	b, c := p2.get(ids[1].ID), p2.get(ids[2].ID)
	if b.State != state.Waiting || c.State != state.Blocked || p3.get(ids[3].ID).State != state.Waiting {
		t.Fatalf("delivered tasks: b %s, c %s", b.State, c.State)
	}
	if w := p2.c.Export().Workflows; len(w) != 1 || w[0].Key.ID != "w" {
		t.Fatalf("partition -p2's workflows: %+v", w)
	}
	// b completes there: c, its dependent in its own partition, is released.
	l := p2.lease("w1", "q2")
	if err := p2.c.Complete(ctx, l.TaskID, l.LeaseID, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if got := p2.get(ids[2].ID).State; got != state.Waiting {
		t.Fatalf("c after b completed: %s", got)
	}

	home.restart()
	if got := home.replayFromDisk(); !reflect.DeepEqual(got, home.c.Export()) {
		t.Fatalf("the home's replayed log differs from its live state")
	}

	// The batch sent again names the same tasks and creates nothing.
	ids2, err := home.c.SubmitWorkflow(ctx, "w", reqs())
	if err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		if ids2[i].ID != ids[i].ID || !ids2[i].Duplicate {
			t.Fatalf("the batch sent again: task %d is %+v, want %s, a duplicate", i, ids2[i], ids[i].ID)
		}
	}
	if d := home.c.Export().Deliveries; d != nil {
		t.Fatalf("the batch sent again kept deliveries: %v", d)
	}
}

// TestEdgesAcrossPartitions: in a batch placed over partitions, an edge
// between tasks of two partitions is remote, marked so relative to the
// dependent's own partition (a delivered task's on a home task, a home
// task's on a delivered one); the home does not ask for a dependency it
// is still delivering, and a GONE for it resolves nothing, until it is
// delivered.
func TestEdgesAcrossPartitions(t *testing.T) {
	cl := newCluster(t)
	home := cl.parts["-p1"]
	rs := []SubmitRequest{wfReq("a"), wfReq("b", "a"), wfReq("c", "b")}
	rs[1].Place = "-p2"
	ids, err := home.c.SubmitWorkflow(ctx, "w", rs)
	if err != nil {
		t.Fatal(err)
	}
	d := home.c.Export().Deliveries
	if len(d) != 1 || !slices.Equal(d[0].Task.Remote, []uint32{0}) || d[0].Task.DependsOn[0] != ids[0].ID {
		t.Fatalf("the delivery of b: %+v, want a remote edge to %s", d, ids[0].ID)
	}
	c := home.c.st.Task(ids[2].ID)
	if g := home.c.st.Graph(c); c.State != state.Blocked || len(g.Edges) != 1 || !g.Edges[0].Remote {
		t.Fatalf("c at the home: %s, %+v; want BLOCKED on a remote edge", c.State, g)
	}
	if deps, err := home.c.RemoteDependencies(); err != nil || len(deps) != 0 {
		t.Fatalf("remote dependencies while b is being delivered: %v, %v", deps, err)
	}
	if n, err := home.c.ResolveRemote(ctx, ids[1].ID, RemoteEnd{Outcome: state.EndedGone}); err != nil || n != 0 {
		t.Fatalf("a GONE for b while it is being delivered resolved %d edges (%v)", n, err)
	}
	cl.deliverAll(home)
	if deps, err := home.c.RemoteDependencies(); err != nil || !slices.Equal(deps, []string{ids[1].ID}) {
		t.Fatalf("remote dependencies once b is delivered: %v, %v", deps, err)
	}
	if g := cl.parts["-p2"].c.st.Graph(cl.parts["-p2"].c.st.Task(ids[1].ID)); len(g.Edges) != 1 || !g.Edges[0].Remote {
		t.Fatalf("b in its partition: %+v, want a remote edge to a", g)
	}
}

// TestSpawnAcrossPartitions: a commit that spawns into another partition
// keeps the task as a delivery in the commit's record; only that commit
// spawns; the task is created there once, spawned by the committing task,
// in its workflow.
func TestSpawnAcrossPartitions(t *testing.T) {
	cl := newCluster(t)
	home, p2 := cl.parts["-p1"], cl.parts["-p2"]
	if _, err := home.c.SubmitWorkflow(ctx, "w", []SubmitRequest{wfReq("parent")}); err != nil {
		t.Fatal(err)
	}
	l := home.lease("w1", "q")
	child := SubmitRequest{Queue: "q2", RequestID: "child", Payload: []byte("c"), Place: "-p2"}
	_, spawned, err := home.c.CommitSpawn(ctx, l.TaskID, l.LeaseID, []byte("r"), []SubmitRequest{child})
	if err != nil {
		t.Fatal(err)
	}
	if len(spawned) != 1 || !strings.HasSuffix(spawned[0], "-p2") {
		t.Fatalf("spawned %v", spawned)
	}
	// The same lease committing again spawns nothing more.
	if _, _, err := home.c.CommitSpawn(ctx, l.TaskID, l.LeaseID, []byte("r"), []SubmitRequest{child}); err != nil {
		t.Fatal(err)
	}
	if n := len(home.c.Export().Deliveries); n != 1 {
		t.Fatalf("%d deliveries after a repeated commit, want 1", n)
	}
	cl.lose = "-p2"
	cl.deliverAll(home)
	got := p2.c.st.Task(spawned[0])
	if g := p2.c.st.Graph(got); g.Parent != l.TaskID || g.Workflow != "w" {
		t.Fatalf("the spawned task's graph there: %+v, want parent %s in workflow w", g, l.TaskID)
	}
	if n := len(p2.c.Export().Tasks); n != 1 {
		t.Fatalf("partition -p2 holds %d tasks, want the child once", n)
	}
}

// TestDeliveryOfCancelledWorkflow: a workflow cancelled at its home while
// a delivery of it is pending is delivered cancelled: its tasks are
// created DEAD there. One cancelled while a delivery was on its way is
// delivered again, cancelled, before it is marked delivered.
func TestDeliveryOfCancelledWorkflow(t *testing.T) {
	cl := newCluster(t)
	home, p2 := cl.parts["-p1"], cl.parts["-p2"]
	rs := []SubmitRequest{wfReq("a"), wfReq("b"), wfReq("c")}
	rs[1].Place, rs[2].Place = "-p2", "-p3"
	ids, err := home.c.SubmitWorkflow(ctx, "w", rs)
	if err != nil {
		t.Fatal(err)
	}
	// b is sent, then the workflow is cancelled before b is marked.
	d, _, _ := home.c.nextDelivery()
	if err := cl.deliver(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, _, err := home.c.CancelWorkflow(ctx, "", "w", Actor{By: "ops", Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := home.c.markDelivered(ctx, d); !errors.Is(err, errRedeliver) {
		t.Fatalf("marking a delivery whose workflow was cancelled meanwhile: %v", err)
	}
	if got := p2.get(ids[1].ID).State; got != state.Waiting {
		t.Fatalf("b before the second delivery: %s", got)
	}
	cl.deliverAll(home)
	for i, p := range []*env{p2, cl.parts["-p3"]} {
		if got := p.get(ids[i+1].ID); got.State != state.Dead || got.FailureReason != "workflow cancelled: stop" {
			t.Fatalf("task %d of the cancelled workflow: %s (%q)", i+1, got.State, got.FailureReason)
		}
	}
}

// TestRunDeliveries: the loop delivers what records keep, and stops with
// its context.
func TestRunDeliveries(t *testing.T) {
	cl := newCluster(t)
	home := cl.parts["-p1"]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- home.c.RunDeliveries(ctx, cl.deliver) }()
	rs := []SubmitRequest{wfReq("a"), wfReq("b")}
	rs[1].Place = "-p3"
	ids, err := home.c.SubmitWorkflow(ctx, "w", rs)
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the delivery is marked delivered", func() bool {
		home.c.mu.Lock()
		defer home.c.mu.Unlock()
		return home.c.st.DeliveryCount() == 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunDeliveries ended with %v", err)
	}
	if got := cl.parts["-p3"].get(ids[1].ID); got.State != state.Waiting {
		t.Fatalf("the delivered task is %s", got.State)
	}
}

// TestDeliveriesSurviveASnapshot: pending deliveries are kept by a
// snapshot: a coordinator recovered from it, its log compacted below,
// holds the same deliveries, delivers them, and marks them once.
func TestDeliveriesSurviveASnapshot(t *testing.T) {
	e := newSnapEnv(t, 3)
	e.mustOpen()
	rs := []SubmitRequest{wfReq("a"), wfReq("b"), wfReq("c", "b")}
	rs[1].Place, rs[2].Place = "-p2", "-p2"
	ids, err := e.c.SubmitWorkflow(ctx, "w", rs)
	if err != nil {
		t.Fatal(err)
	}
	e.work(40) // records after the batch, so that the log rolls over segments
	before := e.c.Export()
	e.snapshot(0)
	e.close()
	e.mustOpen()
	after := e.c.Export()
	if !reflect.DeepEqual(after.Deliveries, before.Deliveries) || len(after.Deliveries) != 2 {
		t.Fatalf("deliveries after a snapshot and a restart: %+v, want %+v", after.Deliveries, before.Deliveries)
	}
	d, ok, err := e.c.nextDelivery()
	if err != nil || !ok || len(d.Tasks) != 2 || d.Tasks[0].TaskID != ids[1].ID || d.Place != "-p2" || d.Workflow != "w" {
		t.Fatalf("the first delivery after recovery: %+v, %v, %v", d, ok, err)
	}
	if err := e.c.markDelivered(ctx, d); err != nil {
		t.Fatal(err)
	}
	last := e.c.Stats().LastLSN
	if err := e.c.markDelivered(ctx, d); err != nil || e.c.Stats().LastLSN != last {
		t.Fatalf("marking a delivery again: %v, lsn %d after %d; want nothing appended", err, e.c.Stats().LastLSN, last)
	}
	if n := e.c.Export().Deliveries; n != nil {
		t.Fatalf("deliveries after they were marked: %+v", n)
	}
}

// TestDeliveryGroups: a record's deliveries go to each partition in as
// few calls as the order allows: all of a partition's at once, but for a
// task that depends on one delivered elsewhere later, which waits for it.
func TestDeliveryGroups(t *testing.T) {
	cl := newCluster(t)
	home := cl.parts["-p1"]
	rs := []SubmitRequest{wfReq("a"), wfReq("b"), wfReq("c"), wfReq("d"), wfReq("e", "d"), wfReq("f", "e")}
	for i, p := range []string{"", "-p2", "-p3", "-p2", "-p3", "-p2"} {
		rs[i].Place = p
	}
	if _, err := home.c.SubmitWorkflow(ctx, "w", rs); err != nil {
		t.Fatal(err)
	}
	var groups [][]string
	for {
		d, ok, err := home.c.nextDelivery()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		var g []string
		for _, x := range d.Tasks {
			g = append(g, x.RequestID)
		}
		groups = append(groups, g)
		if err := cl.deliver(ctx, d); err != nil {
			t.Fatal(err)
		}
		if err := home.c.markDelivered(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if want := [][]string{{"b", "d"}, {"c", "e"}, {"f"}}; !reflect.DeepEqual(groups, want) {
		t.Fatalf("delivered in groups %v, want %v", groups, want)
	}
}

// TestCrossPartition: the figures behind the metrics count the pending
// deliveries, age the oldest by the clock from its creation, and count the
// pending remote edges (two BLOCKED tasks on one remote dependency are two
// edges); delivering empties the first, resolving the dependency the
// second.
func TestCrossPartition(t *testing.T) {
	cl := newCluster(t)
	home := cl.parts["-p1"]
	check := func(when string, want CrossPartition) {
		t.Helper()
		if got, err := home.c.CrossPartition(); err != nil || got != want {
			t.Fatalf("%s: %+v, %v; want %+v", when, got, err, want)
		}
	}
	check("before any workflow", CrossPartition{})
	rs := []SubmitRequest{wfReq("a"), wfReq("b", "a"), wfReq("c", "b"), wfReq("d", "b"), wfReq("e")}
	rs[1].Place, rs[4].Place = "-p2", "-p3"
	ids, err := home.c.SubmitWorkflow(ctx, "w", rs)
	if err != nil {
		t.Fatal(err)
	}
	home.clock.Advance(90 * time.Second)
	check("b and e being delivered", CrossPartition{Deliveries: 2, OldestDelivery: 90 * time.Second, RemoteEdges: 2})
	cl.deliverAll(home)
	check("once delivered", CrossPartition{RemoteEdges: 2})
	if n, err := home.c.ResolveRemote(ctx, ids[1].ID, RemoteEnd{Outcome: state.EndedCompleted}); err != nil || n != 2 {
		t.Fatalf("resolving b: %d edges, %v; want 2", n, err)
	}
	check("once b is resolved", CrossPartition{})
}
