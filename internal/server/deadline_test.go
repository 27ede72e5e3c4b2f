package server_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/node"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestAPIDeadline drives a task deadline through the API on a node with a
// fake clock: a deadline in the past is refused naming the field; a timeout
// becomes the task's deadline, shown by the task and its lease, which ends
// there; the task then fails with deadline_exceeded and its worker's lease
// is lost.
func TestAPIDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	e := newAPIEnvWith(t, node.Config{Clock: clk})
	ctx := apiCtx(t)

	_, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", Deadline: timestamppb.New(start.Add(-time.Second))}))
	if d := apitest.ErrorDetail(err); connect.CodeOf(err) != connect.CodeInvalidArgument || d.GetField() != "deadline" || !strings.Contains(err.Error(), "in the past") {
		t.Fatalf("deadline in the past: %v (detail %v), want invalid_argument naming deadline", err, d)
	}
	if n := e.countQueue(t, "q"); n != 0 {
		t.Fatalf("a refused submit created %d tasks", n)
	}

	task := e.submit(t, &tenurev1.SubmitRequest{Queue: "q", Timeout: durationpb.New(10 * time.Second),
		ExecutionWindow: durationpb.New(time.Minute)})
	deadline := start.Add(10 * time.Second)
	if !task.GetDeadline().AsTime().Equal(deadline) {
		t.Fatalf("task deadline %v, want %v", task.GetDeadline().AsTime(), deadline)
	}
	l := e.leaseOne(t, "w", "q")
	if !l.GetDeadline().AsTime().Equal(deadline) || !l.GetLeaseExpiry().AsTime().Equal(deadline) {
		t.Fatalf("lease deadline %v, expiry %v; want both %v", l.GetDeadline().AsTime(), l.GetLeaseExpiry().AsTime(), deadline)
	}

	clk.Advance(10 * time.Second)
	_, err = e.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()}))
	if d := apitest.ErrorDetail(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_LEASE_LOST {
		t.Fatalf("heartbeat at the deadline: %v (detail %v), want failed_precondition LEASE_LOST", err, d)
	}
	got, err := e.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: task.GetTaskId()}))
	if err != nil {
		t.Fatal(err)
	}
	g := got.Msg.GetTask()
	if g.GetState() != tenurev1.TaskState_TASK_STATE_FAILED || g.GetFailureReason() != "deadline_exceeded" || g.GetDeadline() != nil {
		t.Fatalf("task %s (%q), deadline %v; want FAILED (deadline_exceeded), no deadline in force", g.GetState(), g.GetFailureReason(), g.GetDeadline())
	}
	h, err := e.tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: task.GetTaskId()}))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, en := range h.Msg.GetEntries() {
		types = append(types, en.GetType())
	}
	if len(types) < 3 || types[2] != "TaskDeadlineExceeded" || !strings.Contains(h.Msg.GetEntries()[0].GetDetail(), "deadline") {
		t.Fatalf("history %v (first: %q), want the creation with its deadline, the lease, then TaskDeadlineExceeded", types, h.Msg.GetEntries()[0].GetDetail())
	}
}
