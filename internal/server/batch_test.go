package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestAPICompleteBatch: each item of a CompleteBatch is answered on its
// own, with the code Complete would have given: the answer names each item
// that failed, in order, with its index, and the others succeeded; only a
// request-level problem fails the call.
func TestAPICompleteBatch(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	held := e.leaseTwo(t, "cb")
	body := fmt.Sprintf(`{"items":[
		{"taskId":%q,"leaseId":%q,"result":"b2s="},
		{"taskId":%q,"leaseId":"made-up-lease"},
		{"taskId":"no-such-task","leaseId":"x"},
		{"leaseId":"x"},
		{"taskId":%q,"leaseId":%q}]}`,
		held[0].GetTaskId(), held[0].GetLeaseId(), held[1].GetTaskId(), held[0].GetTaskId(), held[0].GetLeaseId())
	status, out := e.postJSON(t, tenurev1connect.WorkerServiceCompleteBatchProcedure, body)
	if status != http.StatusOK {
		t.Fatalf("CompleteBatch: %d %s", status, out)
	}
	var resp struct {
		Failed []struct {
			TaskID, Code, Message string
			Index                 int
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	// Items 0 and 4 (the same completion again: same answer) succeeded.
	want := []struct {
		index                 int
		taskID, code, mention string
	}{
		{1, held[1].GetTaskId(), "failed_precondition", "lease lost"},
		{2, "no-such-task", "not_found", "no-such-task"},
		{3, "", "invalid_argument", "task_id"},
	}
	if len(resp.Failed) != len(want) {
		t.Fatalf("%d failures, want %d (items 1-3): %s", len(resp.Failed), len(want), out)
	}
	for i, w := range want {
		r := resp.Failed[i]
		if r.Index != w.index || r.TaskID != w.taskID || r.Code != w.code || !strings.Contains(r.Message, w.mention) {
			t.Errorf("failure %d: %+v, want item %d, task %q, code %q, a message with %q", i, r, w.index, w.taskID, w.code, w.mention)
		}
	}
	got, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: held[0].GetTaskId()}))
	if err != nil || got.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(got.Msg.GetTask().GetResult()) != "ok" {
		t.Fatalf("completed task: %v %v", got, err)
	}

	for _, c := range []badCase{
		{name: "no items", procedure: tenurev1connect.WorkerServiceCompleteBatchProcedure, body: `{"items":[]}`,
			code: connect.CodeInvalidArgument, mention: []string{"items", "at least one"}},
		{name: "too many items", procedure: tenurev1connect.WorkerServiceCompleteBatchProcedure,
			body: `{"items":[` + strings.Repeat(`{"taskId":"t","leaseId":"l"},`, 1000) + `{"taskId":"t","leaseId":"l"}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"items", "1001", "1000"}},
		// One shape of answer: no field asks for another.
		{name: "failed_only", procedure: tenurev1connect.WorkerServiceCompleteBatchProcedure, body: `{"failedOnly":true,"items":[{"taskId":"t","leaseId":"l"}]}`,
			code: connect.CodeInvalidArgument, mention: []string{"failedOnly"}},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
}

// leaseTwo submits two tasks to queue, with an hour's window, and leases
// them.
func (e *apiEnv) leaseTwo(t *testing.T, queue string) []*tenurev1.LeasedTask {
	t.Helper()
	var held []*tenurev1.LeasedTask
	for range 2 {
		e.submit(t, &tenurev1.SubmitRequest{Queue: queue, ExecutionWindow: durationpb.New(time.Hour)})
		held = append(held, e.leaseOne(t, "w", queue))
	}
	return held
}

// TestAPISubmitBatchIDs: the answer carries each task's id and whether it
// was a duplicate, in task_ids and duplicates, in request order.
func TestAPISubmitBatchIDs(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	req := &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
		{Queue: "compact", Payload: []byte("p0"), RequestId: "r0"},
		{Queue: "compact", Payload: []byte("p1"), RequestId: "r1"},
		{Queue: "compact", Payload: []byte("p2")},
	}}
	resp, err := e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	first := resp.Msg
	if len(first.GetTaskIds()) != 3 || !slices.Equal(first.GetDuplicates(), []bool{false, false, false}) {
		t.Fatalf("answer %v, want 3 ids, none a duplicate", first)
	}
	for i, id := range first.GetTaskIds() {
		got, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		if p := string(got.Msg.GetTask().GetPayload()); p != fmt.Sprintf("p%d", i) {
			t.Errorf("task_ids[%d] names the task of payload %q", i, p)
		}
	}
	// Again with r1 first, then a new task, then r0: duplicates in place.
	req.Requests = []*tenurev1.SubmitRequest{req.Requests[1], {Queue: "compact", Payload: []byte("p3")}, req.Requests[0]}
	resp, err = e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	ids := resp.Msg.GetTaskIds()
	if len(ids) != 3 || ids[0] != first.GetTaskIds()[1] || ids[2] != first.GetTaskIds()[0] || slices.Contains(first.GetTaskIds(), ids[1]) ||
		!slices.Equal(resp.Msg.GetDuplicates(), []bool{true, false, true}) {
		t.Errorf("second answer %v, want r1's id, a new id, r0's id, with duplicates true, false, true", resp.Msg)
	}
	if n := e.countQueue(t, "compact"); n != 4 {
		t.Errorf("%d tasks, want 4", n)
	}
}

// TestAPISubmitBatchOneShape: the fields that asked for other shapes of
// answer are gone: a request that names one is refused.
func TestAPISubmitBatchOneShape(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	for _, field := range []string{"idsOnly", "compactIds"} {
		c := badCase{name: field, procedure: tenurev1connect.TaskServiceSubmitBatchProcedure,
			body: `{"` + field + `":true,"requests":[{"queue":"q"}]}`, code: connect.CodeInvalidArgument, mention: []string{field}}
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
	if n := e.countQueue(t, "q"); n != 0 {
		t.Errorf("%d tasks created by refused batches", n)
	}
}
