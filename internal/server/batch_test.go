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
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestAPICompleteBatch: each item of a CompleteBatch is answered on its
// own, in order, with the code Complete would have given; only a
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
		Results []struct{ TaskID, Code, Message string }
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	want := []struct{ taskID, code, mention string }{
		{held[0].GetTaskId(), "", ""},
		{held[1].GetTaskId(), "failed_precondition", "lease lost"},
		{"no-such-task", "not_found", "no-such-task"},
		{"", "invalid_argument", "task_id"},
		{held[0].GetTaskId(), "", ""}, // the same completion again: same answer
	}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results for %d items: %s", len(resp.Results), len(want), out)
	}
	for i, w := range want {
		r := resp.Results[i]
		if r.TaskID != w.taskID || r.Code != w.code || !strings.Contains(r.Message, w.mention) || (w.code == "") != (r.Message == "") {
			t.Errorf("result %d: %+v, want task %q, code %q, a message with %q", i, r, w.taskID, w.code, w.mention)
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

// TestAPICompleteBatchFailedOnly: with failed_only the answer names only
// the items that failed, each with its index, and the others are done.
func TestAPICompleteBatchFailedOnly(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	held := e.leaseTwo(t, "cbf")
	body := fmt.Sprintf(`{"failedOnly":true,"items":[
		{"taskId":%q,"leaseId":"made-up-lease"},
		{"taskId":%q,"leaseId":%q},
		{"taskId":"no-such-task","leaseId":"x"},
		{"taskId":%q,"leaseId":%q}]}`,
		held[1].GetTaskId(), held[0].GetTaskId(), held[0].GetLeaseId(), held[1].GetTaskId(), held[1].GetLeaseId())
	status, out := e.postJSON(t, tenurev1connect.WorkerServiceCompleteBatchProcedure, body)
	if status != http.StatusOK {
		t.Fatalf("CompleteBatch: %d %s", status, out)
	}
	var resp struct {
		Results []json.RawMessage
		Failed  []struct {
			TaskID, Code string
			Index        int
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != 0 || len(resp.Failed) != 2 ||
		resp.Failed[0].Index != 0 || resp.Failed[0].TaskID != held[1].GetTaskId() || resp.Failed[0].Code != "failed_precondition" ||
		resp.Failed[1].Index != 2 || resp.Failed[1].TaskID != "no-such-task" || resp.Failed[1].Code != "not_found" {
		t.Fatalf("answer %s, want failures of items 0 and 2 only", out)
	}
	for _, h := range held {
		got, err := e.tasks.GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: h.GetTaskId()}))
		if err != nil || got.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Fatalf("task %s: %v %v, want it completed", h.GetTaskId(), got, err)
		}
	}
}

// TestAPISubmitBatchCompactIDs: with compact_ids the answer carries each
// task's id and whether it was a duplicate in task_ids and duplicates, in
// request order, and no responses.
func TestAPISubmitBatchCompactIDs(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	req := &tenurev1.SubmitBatchRequest{CompactIds: true, Requests: []*tenurev1.SubmitRequest{
		{Queue: "compact", Payload: []byte("p0"), RequestId: "r0"},
		{Queue: "compact", Payload: []byte("p1"), RequestId: "r1"},
		{Queue: "compact", Payload: []byte("p2")},
	}}
	resp, err := e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	first := resp.Msg
	if len(first.GetResponses()) != 0 || len(first.GetTaskIds()) != 3 || !slices.Equal(first.GetDuplicates(), []bool{false, false, false}) {
		t.Fatalf("answer %v, want 3 ids, none a duplicate, and no responses", first)
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

// TestAPISubmitBatchIDsOnly: with ids_only the answer carries each task's
// id and nothing else.
func TestAPISubmitBatchIDsOnly(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	req := &tenurev1.SubmitBatchRequest{IdsOnly: true, Requests: []*tenurev1.SubmitRequest{
		{Queue: "ids", Payload: []byte("p0"), RequestId: "r0"},
		{Queue: "ids", Payload: []byte("p1")},
	}}
	for round, dup := range []bool{false, true} {
		if round == 1 {
			req.Requests = req.Requests[:1]
		}
		resp, err := e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range resp.Msg.GetResponses() {
			want := &tenurev1.Task{TaskId: r.GetTask().GetTaskId()}
			if r.GetTask().GetTaskId() == "" || !proto.Equal(r.GetTask(), want) || r.GetDuplicate() != dup {
				t.Errorf("round %d response %d: %v, want only a task id (duplicate %v)", round, i, r, dup)
			}
		}
	}
	if n := e.countQueue(t, "ids"); n != 2 {
		t.Errorf("%d tasks, want 2", n)
	}
}
