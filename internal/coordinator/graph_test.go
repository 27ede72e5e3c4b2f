package coordinator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// wfReq is a request of queue q with request id rid depending on deps.
func wfReq(rid string, deps ...string) SubmitRequest {
	return SubmitRequest{Queue: "q", RequestID: rid, Payload: []byte(rid), DependsOn: deps}
}

// TestSubmitWorkflowRefusals: bad graphs are refused with the field named
// and nothing created.
func TestSubmitWorkflowRefusals(t *testing.T) {
	e := newEnv(t, 1)
	existing := e.submit("q")
	other := e.submit("q", func(r *SubmitRequest) { r.Namespace = "other" })
	deep := e.c.cfg.Limits
	deep.MaxWorkflowDepth, deep.MaxDependencies = 3, 2
	e.c.cfg.Limits = deep
	for _, tc := range []struct {
		name, field, says string
		reqs              []SubmitRequest
	}{
		{"cycle", "requests[0].depends_on", "a cycle: requests[0] → requests[2] → requests[1] → requests[0]",
			[]SubmitRequest{wfReq("a", "c"), wfReq("b", "a"), wfReq("c", "b")}},
		{"itself", "requests[1].depends_on[0]", "the task itself", []SubmitRequest{wfReq("a"), wfReq("b", "b")}},
		{"unknown", "requests[1].depends_on[1]", "neither a task of this server nor the request_id", []SubmitRequest{wfReq("a"), wfReq("b", "a", "nope")}},
		{"another namespace", "requests[0].depends_on[0]", "namespace", []SubmitRequest{wfReq("a", other.ID)}},
		{"named twice", "requests[0].depends_on[1]", "named twice", []SubmitRequest{wfReq("a", existing.ID, existing.ID)}},
		{"too many", "requests[2].depends_on", "over the limit of 2", []SubmitRequest{wfReq("x"), wfReq("y"), wfReq("a", "x", "y", existing.ID)}},
		{"too deep", "requests[3].depends_on", "a chain of 4 tasks is over the limit of 3", []SubmitRequest{wfReq("a"), wfReq("b", "a"), wfReq("c", "b"), wfReq("d", "c")}},
	} {
		before := e.c.Stats().Tasks
		_, err := e.c.SubmitWorkflow(ctx, "wf-"+strings.ReplaceAll(tc.name, " ", "-"), tc.reqs)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Problem, tc.says) {
			t.Errorf("%s: got %v, want field %s saying %q", tc.name, err, tc.field, tc.says)
		}
		if n := e.c.Stats().Tasks; n != before {
			t.Errorf("%s: %d tasks were created", tc.name, n-before)
		}
	}
}

// TestSubmitWorkflowAgain: a workflow batch sent again is answered with the
// first one's tasks; its id used for other tasks is refused; a batch task
// may name by request id a task that exists already.
func TestSubmitWorkflowAgain(t *testing.T) {
	e := newEnv(t, 2)
	batch := func() []SubmitRequest {
		return []SubmitRequest{{Queue: "q", Payload: []byte("x")}, wfReq("b"), {Queue: "q", DependsOn: []string{"b"}}}
	}
	first, err := e.c.SubmitWorkflow(ctx, "w", batch())
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.c.SubmitWorkflow(ctx, "w", batch())
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if again[i].ID != first[i].ID || first[i].Duplicate || !again[i].Duplicate {
			t.Fatalf("task %d: first %+v, again %+v", i, first[i], again[i])
		}
	}
	if e.get(first[2].ID).State != state.Blocked || e.get(first[0].ID).RequestID != WorkflowRequestID("w", 0) {
		t.Fatalf("the join is %s, the first task's request id %q", e.get(first[2].ID).State, e.get(first[0].ID).RequestID)
	}
	changed := batch()
	changed[0].Payload = []byte("other")
	var fe *FieldError
	if _, err := e.c.SubmitWorkflow(ctx, "w", changed); !errors.As(err, &fe) || fe.Field != "workflow_id" {
		t.Fatalf("a workflow id reused for other tasks: %v", err)
	}
	// Without a workflow: a dependency named by the request id of a task
	// that exists.
	res, err := e.c.SubmitBatchIDs(ctx, []SubmitRequest{wfReq("b"), wfReq("n", "b")})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].ID != first[1].ID {
		t.Fatalf("answers %+v", res)
	}
	if e.get(res[1].ID).State != state.Blocked {
		t.Fatalf("n is %s", e.get(res[1].ID).State)
	}
	// A single submit depends on task ids only.
	one, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: []string{first[1].ID}})
	if err != nil || one.State != state.Blocked {
		t.Fatalf("submit with a dependency: %+v, %v", one, err)
	}
	if _, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: []string{"b"}}); !errors.As(err, &fe) || fe.Field != "depends_on[0]" {
		t.Fatalf("a single submit naming a request id: %v", err)
	}
}

// TestSpawnAndResults: a commit spawns once, within the limits and the
// task's namespace; a dependent's lease carries its dependencies' results
// up to the payload limit, the rest marked omitted.
func TestSpawnAndResults(t *testing.T) {
	e := newEnv(t, 3)
	lim := e.c.cfg.Limits
	lim.MaxSpawn, lim.MaxPayloadBytes = 3, 10
	e.c.cfg.Limits = lim
	p := e.submit("q")
	l := e.lease("w", "q")
	var fe *FieldError
	if _, _, err := e.c.CommitSpawn(ctx, p.ID, l.LeaseID, nil, []SubmitRequest{{Queue: "q"}, {Queue: "q"}, {Queue: "q"}, {Queue: "q"}}); !errors.As(err, &fe) || fe.Field != "spawn" {
		t.Fatalf("a spawn over the limit: %v", err)
	}
	if _, _, err := e.c.CommitSpawn(ctx, p.ID, l.LeaseID, nil, []SubmitRequest{{Queue: "q", Namespace: "other"}}); !errors.As(err, &fe) || fe.Field != "spawn[0].namespace" {
		t.Fatalf("a spawn into another namespace: %v", err)
	}
	if _, _, err := e.c.CommitSpawn(ctx, p.ID, l.LeaseID, nil, []SubmitRequest{{Queue: "q", DependsOn: []string{"nope"}}}); !errors.As(err, &fe) || fe.Field != "spawn[0].depends_on[0]" {
		t.Fatalf("a spawn naming an unknown task: %v", err)
	}
	if e.get(p.ID).State != state.Leased {
		t.Fatalf("a refused spawn committed the task: %s", e.get(p.ID).State)
	}
	spawn := []SubmitRequest{{Queue: "r", RequestID: "k1", Payload: []byte("1")}, {Queue: "r", RequestID: "k2", Payload: []byte("2")},
		{Queue: "join", DependsOn: []string{"k1", "k2", p.ID}}}
	_, ids, err := e.c.CommitSpawn(ctx, p.ID, l.LeaseID, []byte("p"), spawn)
	if err != nil || len(ids) != 3 {
		t.Fatalf("spawn: %v %v", ids, err)
	}
	if _, again, err := e.c.CommitSpawn(ctx, p.ID, l.LeaseID, []byte("p"), spawn); err != nil || again != nil {
		t.Fatalf("a repeated commit: %v %v", again, err)
	}
	if _, err := e.c.CompleteSpawn(ctx, p.ID, l.LeaseID, nil, spawn); err == nil || !errors.Is(err, ErrWrongState) {
		t.Fatalf("a completion of a committed task that spawns: %v", err)
	}
	if err := e.c.Complete(ctx, p.ID, l.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for i, res := range []string{"12345678", "abcdefgh"} {
		k := e.lease("w", "r")
		if err := e.c.Complete(ctx, k.TaskID, k.LeaseID, []byte(res)); err != nil || k.TaskID != ids[i] {
			t.Fatalf("child %d: %s, %v", i, k.TaskID, err)
		}
	}
	j := e.lease("w", "join")
	want := []DependencyResult{{TaskID: ids[0], State: state.Completed, Result: []byte("12345678")},
		{TaskID: ids[1], State: state.Completed, Omitted: true}, {TaskID: p.ID, State: state.Completed, Result: []byte("p")}}
	if j.TaskID != ids[2] || !reflect.DeepEqual(j.Dependencies, want) {
		t.Fatalf("the join's lease: %s %+v", j.TaskID, j.Dependencies)
	}
}

// TestWaitTask: a wait answers when the task ends, whichever record ends
// it (its own completion, or a dependency's failure), and when its time
// runs out with the task as it is.
func TestWaitTask(t *testing.T) {
	e := newEnv(t, 4)
	a := e.submit("q")
	d, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", DependsOn: []string{a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		v    TaskView
		done bool
		err  error
	}
	wait := func(id string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			v, done, err := e.c.WaitTask(ctx, id, 20*time.Second)
			out <- answer{v, done, err}
		}()
		return out
	}
	// Nothing ends: the wait answers at its end, not done.
	w := wait(a.ID)
	e.clock.WaitForTimers(1)
	e.clock.Advance(20 * time.Second)
	if got := <-w; got.err != nil || got.done || got.v.State != state.Waiting {
		t.Fatalf("a wait that ran out: %+v", got)
	}
	// a fails: the waiter of d, which it ends, answers too.
	wa, wd := wait(a.ID), wait(d.ID)
	e.clock.WaitForTimers(2)
	l := e.lease("w", "q")
	if _, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "boom", true); err != nil {
		t.Fatal(err)
	}
	for _, w := range []<-chan answer{wa, wd} {
		if got := <-w; got.err != nil || !got.done || !got.v.State.Terminal() {
			t.Fatalf("a wait for a task that ended: %+v", got)
		}
	}
	if v, done, err := e.c.WaitTask(ctx, d.ID, 0); err != nil || !done || v.State != state.Dead {
		t.Fatalf("a wait of 0 for an ended task: %v %v %v", v.State, done, err)
	}
	if _, _, err := e.c.WaitTask(ctx, "nope", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a wait for no task: %v", err)
	}
}
