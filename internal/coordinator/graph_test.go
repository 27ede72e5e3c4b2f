package coordinator

import (
	"errors"
	"strings"
	"testing"

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
