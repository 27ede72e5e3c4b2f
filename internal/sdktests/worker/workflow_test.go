package worker_test

import (
	"bytes"
	"context"
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
