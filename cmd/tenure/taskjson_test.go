package main

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestCLIJSONIsTheAPIsJSON pins the --json output of submit, task get,
// tasks list (a page of it too) and task history: it is the API's JSON
// form of the same answer (protojson, as curl sees it), value for value, and it has the
// field names scripts read.
func TestCLIJSONIsTheAPIsJSON(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	api := tenurev1connect.NewTaskServiceClient(http.DefaultClient, addr, connect.WithProtoJSON())

	// Tasks in every shape: completed after a start and a commit, with
	// fractional durations; waiting with a delay and a binary payload;
	// leased; failed once and killed.
	done := submitTask(t, c, client.SubmitRequest{Queue: "done", Payload: []byte("hello"), RequestID: "r1", Priority: 3,
		ExecutionWindow: 2500 * time.Millisecond, Retry: &client.RetryPolicy{MaxAttempts: 4, InitialBackoff: 1500 * time.Millisecond, Multiplier: 1.5}})
	lt := leaseOne(t, c, "done")
	if err := c.Start(ctx, client.StartRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(ctx, client.CommitRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: []byte("result")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		t.Fatal(err)
	}
	delayed := submitTask(t, c, client.SubmitRequest{Queue: "later", Payload: []byte{0, 1, 2}, NotBefore: time.Now().Add(time.Hour)})
	submitTask(t, c, client.SubmitRequest{Queue: "held"})
	leaseOne(t, c, "held")
	killed := submitTask(t, c, client.SubmitRequest{Queue: "killed", Retry: &client.RetryPolicy{InitialBackoff: time.Hour}})
	lt = leaseOne(t, c, "killed")
	if _, err := c.Fail(ctx, client.FailRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Reason: "transient"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KillTask(ctx, client.KillTaskRequest{TaskID: killed, Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	// Submitted with a trace context, snoozed once, then leased again and
	// reporting progress.
	workers := tenurev1connect.NewWorkerServiceClient(http.DefaultClient, addr)
	traced, err := api.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "traced",
		TraceContext: &tenurev1.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "rojo=1"}}))
	if err != nil {
		t.Fatal(err)
	}
	lt = leaseOne(t, c, "traced")
	if _, err := workers.Snooze(ctx, connect.NewRequest(&tenurev1.SnoozeRequest{TaskId: lt.ID, LeaseId: lt.LeaseID, Reason: "not yet"})); err != nil {
		t.Fatal(err)
	}
	lt = leaseOne(t, c, "traced")
	pct := uint32(25)
	if _, err := workers.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: lt.ID, LeaseId: lt.LeaseID,
		Progress: &tenurev1.Progress{Message: "a quarter", Percent: &pct}})); err != nil {
		t.Fatal(err)
	}

	var gets []any
	for _, id := range []string{done, delayed, killed, traced.Msg.GetTask().GetTaskId()} {
		resp, err := api.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		gets = append(gets, sameJSON(t, "task get "+id, mustCLI(t, "task", "get", "--addr", addr, "--json", id), resp.Msg.GetTask()))
	}
	pinJSON(t, "task get", gets[0], "taskId", "namespace", "queue", "payload", "state", "attempt", "priority", "requestId",
		"executionWindow", "retryPolicy", "retryPolicy.maxAttempts", "retryPolicy.initialBackoff", "retryPolicy.maxBackoff",
		"retryPolicy.backoffMultiplier", "createdAt", "updatedAt", "result", "executions",
		"executions[].attempt", "executions[].leaseId", "executions[].workerId", "executions[].status", "executions[].leasedAt",
		"executions[].startedAt", "executions[].committedAt", "executions[].finishedAt", "executions[].leaseExpiry")
	pinJSON(t, "task get (delayed)", gets[1], "notBefore")
	pinJSON(t, "task get (killed)", gets[2], "failureReason", "executions[].reason")
	pinJSON(t, "task get (traced)", gets[3], "traceContext.traceparent", "traceContext.tracestate", "progress.message", "progress.percent",
		"progress.reportedAt", "executions[].status")
	if ex := gets[3].(map[string]any)["executions"].([]any); ex[0].(map[string]any)["status"] != "EXECUTION_STATUS_SNOOZED" {
		t.Errorf("task get --json of a snoozed task: first execution %v", ex[0])
	}
	if task := gets[0].(map[string]any); task["state"] != "TASK_STATE_COMPLETED" || task["executionWindow"] != "2.500s" || task["payload"] != "aGVsbG8=" {
		t.Errorf("task get --json: state %v, executionWindow %v, payload %v; want TASK_STATE_COMPLETED, 2.500s, aGVsbG8=", task["state"], task["executionWindow"], task["payload"])
	}

	all, err := api.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	list := sameJSON(t, "tasks list", mustCLI(t, "tasks", "list", "--addr", addr, "--json"), &tenurev1.ListTasksResponse{Tasks: all.Msg.GetTasks()})
	pinJSON(t, "tasks list", list, "tasks", "tasks[].taskId", "tasks[].state", "tasks[].leaseId", "tasks[].workerId", "tasks[].leaseExpiry")
	sameJSON(t, "tasks list (none)", mustCLI(t, "tasks", "list", "--addr", addr, "--json", "--queue", "empty"), &tenurev1.ListTasksResponse{})
	// A page: the API's answer to page_size --limit, its next page token
	// included, so that a script can page with --page-token.
	first, err := api.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{PageSize: 2}))
	if err != nil {
		t.Fatal(err)
	}
	page := sameJSON(t, "tasks list --limit 2", mustCLI(t, "tasks", "list", "--addr", addr, "--json", "--limit", "2"), first.Msg)
	pinJSON(t, "tasks list --limit 2", page, "tasks", "nextPageToken")
	second, err := api.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{PageSize: 2, PageToken: first.Msg.GetNextPageToken()}))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "tasks list --limit 2 --page-token", mustCLI(t, "tasks", "list", "--addr", addr, "--json", "--limit", "2", "--page-token", first.Msg.GetNextPageToken()), second.Msg)

	for _, id := range []string{done, killed} {
		resp, err := api.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		hist := sameJSON(t, "task history "+id, mustCLI(t, "task", "history", "--addr", addr, "--json", id), resp.Msg)
		pinJSON(t, "task history", hist, "entries", "entries[].lsn", "entries[].type", "entries[].at", "entries[].leaseId",
			"entries[].workerId", "entries[].attempt", "entries[].detail")
		if lsn := hist.(map[string]any)["entries"].([]any)[0].(map[string]any)["lsn"]; reflect.TypeOf(lsn) != reflect.TypeFor[string]() {
			t.Errorf("task history --json: lsn %v is a %T; the API's JSON has 64-bit integers as strings", lsn, lsn)
		}
	}

	resp, err := api.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: done}))
	if err != nil {
		t.Fatal(err)
	}
	sub := sameJSON(t, "submit (a duplicate)", mustCLI(t, "submit", "--addr", addr, "--json", "--queue", "done", "--request-id", "r1", "hello"),
		&tenurev1.SubmitResponse{Task: resp.Msg.GetTask(), Duplicate: true})
	pinJSON(t, "submit", sub, "task", "task.taskId", "duplicate")
}

// asJSON decodes JSON into plain values, to compare outputs whatever
// their spacing and field order.
func asJSON(t *testing.T, what, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, s)
	}
	return v
}

// sameJSON checks that cli, the --json output of a command, is the API's
// JSON of want, value for value, and returns it decoded.
func sameJSON(t *testing.T, what, cli string, want proto.Message) any {
	t.Helper()
	b, err := protojson.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, api := asJSON(t, what, cli), asJSON(t, "the API's "+what, string(b))
	if !reflect.DeepEqual(got, api) {
		t.Errorf("%s --json differs from the API's JSON:\n got %v\nwant %v", what, got, api)
	}
	return got
}

// pinJSON checks that v, decoded JSON, has each field of want: "a.b" for a
// field of an object, "a[].b" for a field of the objects of a list.
func pinJSON(t *testing.T, what string, v any, want ...string) {
	t.Helper()
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				keys = append(keys, prefix+k)
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range v {
				walk(strings.TrimSuffix(prefix, ".")+"[].", e)
			}
		}
	}
	walk("", v)
	sort.Strings(keys)
	keys = slices.Compact(keys)
	for _, k := range want {
		if !slices.Contains(keys, k) {
			t.Errorf("%s --json has no field %q; it has %v", what, k, keys)
		}
	}
}

func submitTask(t *testing.T, c *client.Client, req client.SubmitRequest) string {
	t.Helper()
	res, err := c.Submit(t.Context(), req)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return res.TaskID
}

func leaseOne(t *testing.T, c *client.Client, queue string) client.LeasedTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lts, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w-" + queue, Queue: queue, Wait: 10 * time.Second}))
	if err != nil || len(lts) != 1 {
		t.Fatalf("Lease of %s: %+v, %v", queue, lts, err)
	}
	return lts[0]
}
