package main

// The --json output of every command that calls the API is the API's
// answer to its call (answers.go): TestCLIJSONIsTheAPIsAnswer holds each
// such command of the tree to it; TestCLITaskJSON,
// TestCLIQueuesJSONIsTheAPIsJSON and TestCLISchedulesJSONIsTheAPIsJSON
// check the answers' values against the API asked again, over data of
// every shape, and pin the field names scripts read.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// apiCall is one call the server answered: its procedure
// ("/tenure.v1.TaskService/GetTask"), request and answer.
type apiCall struct {
	procedure string
	req, resp proto.Message
}

// recorder is a proxy in front of a server that keeps every call the
// server answered with success, decoded (Connect, protobuf or JSON).
type recorder struct {
	t      *testing.T
	target string
	mu     sync.Mutex
	calls  []apiCall
}

// newRecorder puts a recorder in front of the server at target and
// returns it with its URL.
func newRecorder(t *testing.T, target string) (*recorder, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{t: t, target: target}
	srv := httptest.NewServer(r.wrap(httputil.NewSingleHostReverseProxy(u)))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// answerWriter keeps what a handler answers, as it passes it on.
type answerWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *answerWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Unwrap lets a proxy flush a stream's answers through it as they come.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
func (w *answerWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			r.t.Errorf("recorder: reading a request: %v", err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		aw := &answerWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(aw, req)
		in, out := methodTypes(r.t, req.URL.Path)
		if in == nil || aw.status != http.StatusOK {
			return
		}
		call := apiCall{procedure: req.URL.Path, req: in, resp: out}
		decode(r.t, req.Header, body, call.req)
		decode(r.t, aw.Header(), aw.body.Bytes(), call.resp)
		r.mu.Lock()
		r.calls = append(r.calls, call)
		r.mu.Unlock()
	})
}

// methodTypes returns new request and response messages of the API's
// procedure path, or nils for a path that is no procedure.
func methodTypes(t *testing.T, path string) (req, resp proto.Message) {
	service, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		return nil, nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, nil
	}
	m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
	if m == nil {
		t.Errorf("recorder: %s is no method of %s", method, service)
		return nil, nil
	}
	newOf := func(md protoreflect.MessageDescriptor) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatal(err)
		}
		return mt.New().Interface()
	}
	return newOf(m.Input()), newOf(m.Output())
}

// decode decodes a Connect unary body, as its headers say it is encoded,
// into m.
func decode(t *testing.T, h http.Header, body []byte, m proto.Message) {
	if h.Get("Content-Encoding") == "gzip" || h.Get("Connect-Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			t.Fatalf("recorder: gunzip: %v", err)
		}
	}
	var err error
	switch ct := h.Get("Content-Type"); ct {
	case "application/proto":
		err = proto.Unmarshal(body, m)
	case "application/json":
		err = protojson.Unmarshal(body, m)
	default:
		err = fmt.Errorf("content type %q", ct)
	}
	if err != nil {
		t.Fatalf("recorder: decoding a %T: %v", m, err)
	}
}

// take returns the calls kept since the last take, and forgets them.
func (r *recorder) take() []apiCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

// curl sends call's request again, as curl would (Connect, JSON), and
// returns the body the server answers.
func (r *recorder) curl(call apiCall) []byte {
	r.t.Helper()
	body, err := protojson.Marshal(call.req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.Post(r.target+call.procedure, "application/json", bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("curl %s: %d %v\n%s", call.procedure, resp.StatusCode, err, b)
	}
	return b
}

// compact is JSON without the spaces between its tokens.
func compact(t *testing.T, what string, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, b)
	}
	return buf.String()
}

// jsonCommands returns the path ("task get") of every command of the tree
// that takes --json.
func jsonCommands(root *cobra.Command) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Flags().Lookup("json") != nil {
			out = append(out, strings.TrimPrefix(c.CommandPath(), "tenure "))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	sort.Strings(out)
	return out
}

// notTheAPI are the commands whose --json prints no answer of the API, and
// what they print instead.
var notTheAPI = map[string]string{
	"bench":          "the benchmark's summary",
	"cluster status": "what the cluster's database holds (it asks no server)",
	"token list":     "the tokens of a token file (it asks no server)",
	"version":        "the binary's build information",
	"wal state":      "the state a data directory replays to (offline)",
}

// streams are the commands whose --json prints the answers of a stream of
// the API, one a line, each checked by a test of its own:
// TestCLIEventsJSONIsTheAPIsAnswers.
var streams = map[string]bool{"events": true}

// TestCLIJSONIsTheAPIsAnswer: every command of the tree that takes --json
// and calls the API prints, with --json, the API's answer to its call: the
// server's answer, as a proxy in front of it saw it, as protojson, equal
// byte for byte (spacing aside); for a command that only reads, also
// equal to what the server answers curl for the same request. A listing
// of several ListTasks calls prints their answers as one. A command with
// --json that is in neither this table nor notTheAPI fails the test.
func TestCLIJSONIsTheAPIsAnswer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	target := apitest.StartClock(t, clk)
	rec, addr := newRecorder(t, target)
	c := sdk(t, target)

	// The data the commands work on: a failed task, a completed one, one
	// waiting, five more; a schedule.
	failed := failTask(t, c, queueWith(t, c, "failing", 1))
	done := completeTask(t, c, queueWith(t, c, "done", 1))
	waiting := submitTask(t, c, client.SubmitRequest{Queue: "waiting", Payload: []byte("w"), RequestID: "w1"})
	queueWith(t, c, "many", 5)
	if _, err := c.CreateSchedule(ctx, client.ScheduleRequest{Queue: "reports", Name: "nightly", Cron: "0 2 * * *"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: "flow", Requests: []client.SubmitRequest{
		{Queue: "steps", RequestID: "s1"}, {Queue: "steps", DependsOn: []string{"s1"}}}}); err != nil {
		t.Fatal(err)
	}

	type answer struct {
		procedure string
		// list: the command lists tasks in pages of at most limit (0:
		// every task); its answer is that of every ListTasks call of the
		// listing, as one. A last call may follow, whose answer only
		// decides a hint on stderr.
		list  bool
		limit int
		// reads: the command changes nothing, so curl may ask again.
		reads bool
	}
	const (
		tasks     = "/tenure.v1.TaskService/"
		queues    = "/tenure.v1.QueueService/"
		schedules = "/tenure.v1.ScheduleService/"
		workflows = "/tenure.v1.WorkflowService/"
	)
	root := newRoot(&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, clock: clock.Real})
	tested := map[string]bool{}
	for _, tc := range []struct {
		args []string
		want answer
	}{
		{[]string{"submit", "--queue", "more", "x"}, answer{procedure: tasks + "Submit"}},
		{[]string{"submit", "--queue", "waiting", "--request-id", "w1", "w"}, answer{procedure: tasks + "Submit"}},
		{[]string{"task", "get", done}, answer{procedure: tasks + "GetTask", reads: true}},
		{[]string{"task", "history", done}, answer{procedure: tasks + "GetTaskHistory", reads: true}},
		{[]string{"task", "retry", failed, "--reason", "fixed"}, answer{procedure: tasks + "RetryTask"}},
		{[]string{"task", "kill", waiting, "--reason", "not needed"}, answer{procedure: tasks + "KillTask"}},
		{[]string{"tasks", "list"}, answer{procedure: tasks + "ListTasks", list: true, limit: 100, reads: true}},
		{[]string{"tasks", "list", "--queue", "many", "--limit", "2"}, answer{procedure: tasks + "ListTasks", list: true, limit: 2, reads: true}},
		{[]string{"tasks", "list", "--all"}, answer{procedure: tasks + "ListTasks", list: true, reads: true}},
		{[]string{"tasks", "list", "--queue", "none"}, answer{procedure: tasks + "ListTasks", list: true, limit: 100, reads: true}},
		{[]string{"tasks", "retry", "--queue", "failing", "--yes"}, answer{procedure: tasks + "RetryTasks"}},
		{[]string{"tasks", "kill", "--queue", "many", "--state", "waiting", "--yes"}, answer{procedure: tasks + "KillTasks"}},
		{[]string{"tasks", "purge", "--queue", "many", "--yes"}, answer{procedure: tasks + "PurgeTasks"}},
		{[]string{"queues"}, answer{procedure: queues + "ListQueues", reads: true}},
		{[]string{"queue", "get", "done"}, answer{procedure: queues + "GetQueue", reads: true}},
		{[]string{"queue", "pause", "done", "--reason", "audit"}, answer{procedure: queues + "PauseQueue"}},
		{[]string{"queue", "resume", "done"}, answer{procedure: queues + "ResumeQueue"}},
		{[]string{"queue", "limit", "done", "--max-concurrency", "3", "--rate", "2.5"}, answer{procedure: queues + "SetQueueLimits"}},
		{[]string{"schedule", "create", "hourly", "--queue", "reports", "--cron", "0 * * * *"}, answer{procedure: schedules + "CreateSchedule"}},
		{[]string{"schedule", "get", "nightly", "--queue", "reports"}, answer{procedure: schedules + "GetSchedule", reads: true}},
		{[]string{"schedule", "list"}, answer{procedure: schedules + "ListSchedules", reads: true}},
		{[]string{"schedule", "update", "nightly", "--queue", "reports", "--priority", "9"}, answer{procedure: schedules + "UpdateSchedule"}},
		{[]string{"schedule", "pause", "nightly", "--queue", "reports"}, answer{procedure: schedules + "PauseSchedule"}},
		{[]string{"schedule", "resume", "nightly", "--queue", "reports"}, answer{procedure: schedules + "ResumeSchedule"}},
		{[]string{"schedule", "backfill", "nightly", "--queue", "reports", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-03T00:00:00Z"}, answer{procedure: schedules + "BackfillSchedule"}},
		{[]string{"schedule", "delete", "hourly", "--queue", "reports", "--yes"}, answer{procedure: schedules + "DeleteSchedule"}},
		{[]string{"workflow", "get", "flow"}, answer{procedure: workflows + "GetWorkflow", reads: true}},
		{[]string{"workflow", "list"}, answer{procedure: workflows + "ListWorkflows", reads: true}},
		{[]string{"workflow", "cancel", "flow", "--reason", "wrong input"}, answer{procedure: workflows + "CancelWorkflow"}},
		{[]string{"workflow", "retry", "flow"}, answer{procedure: workflows + "RetryWorkflow"}},
		{[]string{"admin", "snapshot"}, answer{procedure: "/tenure.v1.AdminService/Snapshot"}},
	} {
		what := "tenure " + strings.Join(tc.args, " ") + " --json"
		rec.take()
		out := mustCLI(t, append(tc.args, "--json", "--addr", addr)...)
		var mine []apiCall
		for _, call := range rec.take() {
			if call.procedure == tc.want.procedure {
				mine = append(mine, call)
			}
		}
		if tc.want.list {
			mine = listing(t, what, mine, tc.want.limit)
		}
		if len(mine) == 0 || !tc.want.list && len(mine) != 1 {
			t.Errorf("%s: %d calls of %s, want one", what, len(mine), tc.want.procedure)
			continue
		}
		want := mine[0].resp
		if tc.want.list {
			want = mergedPages(mine)
		}
		b, err := protojson.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := compact(t, what, []byte(out))
		if api := compact(t, "the API's answer", b); got != api {
			t.Errorf("%s printed\n%s\nnot the API's answer\n%s", what, got, api)
		}
		if tc.want.reads && len(mine) == 1 {
			if curl := compact(t, "curl's answer", rec.curl(mine[0])); got != curl {
				t.Errorf("%s printed\n%s\nnot what the server answers curl\n%s", what, got, curl)
			}
		}
		cmd, _, err := root.Find(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		tested[strings.TrimPrefix(cmd.CommandPath(), "tenure ")] = true
	}

	// Every command of the tree with --json is above, or in notTheAPI.
	withJSON := jsonCommands(root)
	for _, c := range withJSON {
		if _, ok := notTheAPI[c]; !ok && !tested[c] && !streams[c] {
			t.Errorf("tenure %s takes --json but is not in the table of this test: add it (or to notTheAPI if it asks no server)", c)
		}
	}
	for c := range notTheAPI {
		if !slices.Contains(withJSON, c) {
			t.Errorf("notTheAPI names tenure %s, which takes no --json", c)
		}
	}
	t.Logf("%d commands print the API's answer with --json; %d print something else (notTheAPI)", len(tested), len(notTheAPI))
}

// listing returns the calls of a listing of tasks in pages of at most
// limit (0: every task): the calls up to one whose answer has no next page
// token or reaches the limit. At most one call may follow, asking for one
// task: the look at the next page that decides the hint on stderr.
func listing(t *testing.T, what string, calls []apiCall, limit int) []apiCall {
	t.Helper()
	n := 0
	for i, call := range calls {
		page := call.resp.(*tenurev1.ListTasksResponse)
		n += len(page.GetTasks())
		if page.GetNextPageToken() != "" && (limit == 0 || n < limit) {
			continue
		}
		for _, rest := range calls[i+1:] {
			if len(calls[i+1:]) > 1 || rest.req.(*tenurev1.ListTasksRequest).GetPageSize() != 1 {
				t.Errorf("%s: after its listing, calls %v", what, calls[i+1:])
			}
		}
		return calls[:i+1]
	}
	return calls
}

// mergedPages is the answers of ListTasks calls as one: their tasks, and
// the last one's next page token.
func mergedPages(calls []apiCall) *tenurev1.ListTasksResponse {
	out := &tenurev1.ListTasksResponse{}
	for _, call := range calls {
		page := call.resp.(*tenurev1.ListTasksResponse)
		out.Tasks = append(out.Tasks, page.GetTasks()...)
		out.NextPageToken = page.GetNextPageToken()
	}
	return out
}

// queueWith submits n tasks to queue and returns its name.
func queueWith(t *testing.T, c *client.Client, queue string, n int) string {
	t.Helper()
	for range n {
		submitTask(t, c, client.SubmitRequest{Queue: queue})
	}
	return queue
}

// TestCLITaskJSON pins the --json output of submit, task get, tasks list
// (a page of it too) and task history over tasks of every shape: it is
// the API's JSON of the same answer (protojson, as curl sees it), value
// for value, asked again of the API, and it has the field names scripts
// read.
func TestCLITaskJSON(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c := sdk(t, addr)
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
		gets = append(gets, sameJSON(t, "task get "+id, mustCLI(t, "task", "get", "--addr", addr, "--json", id), resp.Msg).(map[string]any)["task"])
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
	list := sameJSON(t, "tasks list", mustCLI(t, "tasks", "list", "--addr", addr, "--json"), all.Msg)
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
