package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// TestWorkflowWithTheSDK: a workflow batch whose last step joins two
// others; the first step's handler spawns children and a continuation
// (worker.Spawn), which go with its commit; every handler reads its
// inputs from its lease (LeasedTask.Dependencies); Wait returns a step
// once it has ended, with its result, and SubmitAndWait submits and waits.
func TestWorkflowWithTheSDK(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	// A handler's result is its payload upper-cased, joined with the
	// results of its dependencies in order.
	startWorker(t, c, "wf", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		parts := []string{strings.ToUpper(string(task.Payload))}
		for _, d := range task.Dependencies {
			if d.State != client.TaskStateCompleted || d.ResultOmitted {
				return nil, fmt.Errorf("dependency %s is %s (omitted %v)", d.TaskID, d.State, d.ResultOmitted)
			}
			parts = append(parts, string(d.Result))
		}
		if string(task.Payload) == "fan" {
			if err := worker.Spawn(ctx,
				client.SubmitRequest{Queue: "wf", RequestID: task.ID + "-x", Payload: []byte("x")},
				client.SubmitRequest{Queue: "wf", RequestID: task.ID + "-y", Payload: []byte("y")},
				client.SubmitRequest{Queue: "wf", Payload: []byte("join"), DependsOn: []string{task.ID + "-x", task.ID + "-y"}},
			); err != nil {
				return nil, err
			}
		}
		return []byte(strings.Join(parts, "+")), nil
	}, opts{})

	res, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{WorkflowID: "sdk-flow", Requests: []client.SubmitRequest{
		{Queue: "wf", RequestID: "a", Payload: []byte("a")},
		{Queue: "wf", RequestID: "b", Payload: []byte("b"), DependsOn: []string{"a"}},
		{Queue: "wf", Payload: []byte("c"), DependsOn: []string{"a", "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	last, err := c.Wait(ctx, res[2].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if last.State != client.TaskStateCompleted || string(last.Result) != "C+A+B+A" || last.WorkflowID != "sdk-flow" {
		t.Fatalf("the last step: %s %q %q", last.State, last.Result, last.WorkflowID)
	}
	fan, err := c.SubmitAndWait(ctx, client.SubmitRequest{Queue: "wf", Payload: []byte("fan")})
	if err != nil || fan.State != client.TaskStateCompleted {
		t.Fatalf("SubmitAndWait: %v %v", fan, err)
	}
	// The continuation: found by the children's request ids, spawned by
	// the commit of fan.
	var join *client.Task
	for task, err := range c.ListTasks(ctx, client.ListTasksRequest{Queue: "wf"}) {
		if err != nil {
			t.Fatal(err)
		}
		if string(task.Payload) == "join" {
			join = task
		}
	}
	if join == nil || join.SpawnedBy != fan.ID || len(join.Dependencies) != 2 {
		t.Fatalf("the spawned continuation: %+v", join)
	}
	join, err = c.Wait(ctx, join.ID)
	if err != nil || !bytes.Equal(join.Result, []byte("JOIN+X+Y")) {
		t.Fatalf("the continuation: %v %q", err, join.Result)
	}
}

// TestWorkflowServiceWithTheSDK: a workflow seen whole (GetWorkflow,
// ListWorkflows), cancelled, waited for, retried and run to its end.
func TestWorkflowServiceWithTheSDK(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: "ops-flow", Requests: []client.SubmitRequest{
		{Queue: "ops", Payload: []byte("b"), DependsOn: []string{"a"}},
		{Queue: "ops", RequestID: "a", Payload: []byte("a")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.GetWorkflow(ctx, client.GetWorkflowRequest{WorkflowID: "ops-flow"})
	if err != nil {
		t.Fatal(err)
	}
	w := page.Workflow
	if w.State != client.WorkflowStateRunning || w.Total != 2 || w.Tasks.Waiting != 1 || w.Tasks.Blocked != 1 ||
		len(page.Tasks) != 2 || page.Tasks[0].ID != res[1].TaskID || page.Tasks[1].ID != res[0].TaskID {
		t.Fatalf("the workflow: %+v, tasks %v", w, page.Tasks)
	}
	var listed []string
	for w, err := range c.ListWorkflows(ctx, client.ListWorkflowsRequest{}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, w.ID)
	}
	if len(listed) != 1 || listed[0] != "ops-flow" {
		t.Fatalf("listed %v", listed)
	}
	ctl, err := c.CancelWorkflow(ctx, client.WorkflowControlRequest{WorkflowID: "ops-flow", Reason: "bad input", RequestedBy: "ops"})
	if err != nil || ctl.Tasks != 2 || ctl.Workflow.State != client.WorkflowStateCancelled || ctl.Workflow.Cancel == nil || ctl.Workflow.Cancel.RequestedBy != "ops" {
		t.Fatalf("cancel: %+v %v", ctl, err)
	}
	if w, err := c.WaitWorkflow(ctx, client.WaitWorkflowRequest{WorkflowID: "ops-flow"}); err != nil || !w.State.Ended() {
		t.Fatalf("a cancelled workflow has not ended: %+v %v", w, err)
	}
	if ctl, err = c.RetryWorkflow(ctx, client.WorkflowControlRequest{WorkflowID: "ops-flow"}); err != nil || ctl.Tasks != 2 || ctl.Workflow.State != client.WorkflowStateRunning {
		t.Fatalf("retry: %+v %v", ctl, err)
	}
	startWorker(t, c, "ops", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		return task.Payload, nil
	}, opts{})
	if w, err := c.WaitForWorkflow(ctx, "", "ops-flow"); err != nil || w.State != client.WorkflowStateCompleted || w.Tasks.Completed != 2 {
		t.Fatalf("the workflow run to its end: %+v %v", w, err)
	}
	if _, err := c.RetryWorkflow(ctx, client.WorkflowControlRequest{WorkflowID: "ops-flow"}); !errors.Is(err, client.ErrWrongState) {
		t.Fatalf("a retry of a completed workflow: %v", err)
	}
	if _, err := c.GetWorkflow(ctx, client.GetWorkflowRequest{WorkflowID: "nope"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("no workflow: %v", err)
	}
}
