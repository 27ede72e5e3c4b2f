package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestAPITraceProgressSnooze: over the API, a submit's trace context comes
// back with the lease and the task; a heartbeat's progress shows in
// GetTask while the lease holds and in the history; a snooze answers when
// the task runs again, and the task shows the snoozed execution with the
// attempt given back.
func TestAPITraceProgressSnooze(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	tc := &tenurev1.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "rojo=00f067aa0ba902b7"}
	task := e.submit(t, &tenurev1.SubmitRequest{Queue: "tps", TraceContext: tc})
	if got := task.GetTraceContext(); got.GetTraceparent() != tc.Traceparent || got.GetTracestate() != tc.Tracestate {
		t.Fatalf("submitted task's trace context %v, want %v", got, tc)
	}
	l := e.leaseOne(t, "w", "tps")
	if l == nil || l.GetTraceContext().GetTraceparent() != tc.Traceparent || l.GetTraceContext().GetTracestate() != tc.Tracestate {
		t.Fatalf("lease %v does not carry the trace context", l)
	}
	pct := uint32(40)
	if _, err := e.worker.Heartbeat(apiCtx(t), connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(),
		Progress: &tenurev1.Progress{Message: "copying part 2 of 5", Percent: &pct}})); err != nil {
		t.Fatal(err)
	}
	got := e.get(t, task.GetTaskId())
	if p := got.GetProgress(); p.GetMessage() != "copying part 2 of 5" || p.Percent == nil || p.GetPercent() != 40 || p.GetReportedAt() == nil {
		t.Fatalf("task progress %v", p)
	}
	// Over JSON too, as the dashboard and curl read it.
	status, body := e.postJSON(t, tenurev1connect.TaskServiceGetTaskProcedure, fmt.Sprintf(`{"taskId":%q}`, task.GetTaskId()))
	var asJSON struct {
		Task struct {
			Progress struct {
				Message string
				Percent *int
			}
			TraceContext struct{ Traceparent, Tracestate string }
		}
	}
	if err := json.Unmarshal(body, &asJSON); status != 200 || err != nil || asJSON.Task.Progress.Message != "copying part 2 of 5" ||
		asJSON.Task.Progress.Percent == nil || *asJSON.Task.Progress.Percent != 40 || asJSON.Task.TraceContext.Traceparent != tc.Traceparent {
		t.Fatalf("GetTask as JSON: %d %s (%v)", status, body, err)
	}

	resp, err := e.worker.Snooze(apiCtx(t), connect.NewRequest(&tenurev1.SnoozeRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(),
		Delay: durationpb.New(time.Hour), Reason: "rate limited"}))
	if err != nil {
		t.Fatal(err)
	}
	until := resp.Msg.GetNotBefore().AsTime()
	if d := time.Until(until); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("snoozed until %v, %v from now; want an hour", until, d)
	}
	got = e.get(t, task.GetTaskId())
	if got.GetState() != tenurev1.TaskState_TASK_STATE_WAITING || got.GetAttempt() != 0 || got.GetAttemptsUsed() != 0 ||
		!got.GetNotBefore().AsTime().Equal(until) || got.GetProgress() != nil {
		t.Fatalf("after the snooze: %v attempt %d (used %d), not before %v, progress %v", got.GetState(), got.GetAttempt(), got.GetAttemptsUsed(), got.GetNotBefore().AsTime(), got.GetProgress())
	}
	if ex := got.GetExecutions(); len(ex) != 1 || ex[0].GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_SNOOZED || ex[0].GetReason() != "rate limited" || ex[0].GetAttempt() != 1 {
		t.Fatalf("executions %v", ex)
	}
	h, err := e.tasks.GetTaskHistory(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: task.GetTaskId()}))
	if err != nil {
		t.Fatal(err)
	}
	var types, details []string
	for _, x := range h.Msg.GetEntries() {
		types = append(types, x.GetType())
		details = append(details, x.GetDetail())
	}
	if strings.Join(types, " ") != "TaskCreated LeaseGranted LeaseExtended TaskSnoozed" ||
		!strings.Contains(details[2], "progress: 40% copying part 2 of 5") || !strings.Contains(details[3], "snoozed, to run again 1h0m0s later") || !strings.Contains(details[3], "rate limited") {
		t.Fatalf("history %v: %q", types, details)
	}
}

// TestAPIBadTraceProgressSnooze: a bad trace context, progress or snooze
// gets a clear refusal naming the field or what to do.
func TestAPIBadTraceProgressSnooze(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	e.submit(t, &tenurev1.SubmitRequest{Queue: "bad-tps", ExecutionWindow: durationpb.New(time.Hour)})
	l := e.leaseOne(t, "w", "bad-tps")
	committed := e.submit(t, &tenurev1.SubmitRequest{Queue: "bad-tps-c", ExecutionWindow: durationpb.New(time.Hour)})
	cl := e.leaseOne(t, "w", "bad-tps-c")
	if _, err := e.worker.Commit(apiCtx(t), connect.NewRequest(&tenurev1.CommitRequest{TaskId: committed.GetTaskId(), LeaseId: cl.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	snoozeProc := tenurev1connect.WorkerServiceSnoozeProcedure
	lease := func(l *tenurev1.LeasedTask) string {
		return fmt.Sprintf(`"taskId":%q,"leaseId":%q`, l.GetTaskId(), l.GetLeaseId())
	}
	for _, c := range []badCase{
		{name: "malformed traceparent", procedure: submitProc, body: `{"queue":"x","traceContext":{"traceparent":"not-a-traceparent"}}`,
			code: connect.CodeInvalidArgument, mention: []string{"trace_context.traceparent", "W3C"}},
		{name: "tracestate alone", procedure: submitProc, body: `{"queue":"x","traceContext":{"tracestate":"a=b"}}`,
			code: connect.CodeInvalidArgument, mention: []string{"trace_context.tracestate", "without a traceparent"}},
		{name: "batch item with a bad trace context", procedure: submitBatchProc, body: `{"requests":[{"queue":"x"},{"queue":"x","traceContext":{"traceparent":"00-x"}}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"requests[1].trace_context.traceparent"}},
		{name: "percent over 100", procedure: heartbeatProc, body: fmt.Sprintf(`{%s,"progress":{"percent":101}}`, lease(l)),
			code: connect.CodeInvalidArgument, mention: []string{"progress.percent", "over 100"}},
		{name: "progress message too long", procedure: heartbeatProc, body: fmt.Sprintf(`{%s,"progress":{"message":%q}}`, lease(l), strings.Repeat("m", 300)),
			code: connect.CodeResourceExhausted, mention: []string{"progress.message", "256"}},
		{name: "negative snooze", procedure: snoozeProc, body: fmt.Sprintf(`{%s,"delay":"-1s"}`, lease(l)),
			code: connect.CodeInvalidArgument, mention: []string{"delay", "negative"}},
		{name: "snooze too long", procedure: snoozeProc, body: fmt.Sprintf(`{%s,"delay":"90000s"}`, lease(l)),
			code: connect.CodeInvalidArgument, mention: []string{"delay", "24h"}},
		{name: "snooze of a committed task", procedure: snoozeProc, body: fmt.Sprintf(`{%s,"delay":"1s"}`, lease(cl)),
			code: connect.CodeFailedPrecondition, mention: []string{"cannot snooze", "Complete"}},
		{name: "snooze by a foreign lease", procedure: snoozeProc, body: fmt.Sprintf(`{"taskId":%q,"leaseId":"nope","delay":"1s"}`, l.GetTaskId()),
			code: connect.CodeFailedPrecondition, mention: []string{"lease lost"}},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
	// Nothing changed the leased task.
	if got := e.get(t, l.GetTaskId()); got.GetState() != tenurev1.TaskState_TASK_STATE_LEASED || got.GetProgress() != nil || len(got.GetExecutions()) != 1 {
		t.Fatalf("the refusals changed the task: %v", got)
	}
}

func (e *apiEnv) get(t *testing.T, id string) *tenurev1.Task {
	t.Helper()
	resp, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
	if err != nil {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return resp.Msg.GetTask()
}
