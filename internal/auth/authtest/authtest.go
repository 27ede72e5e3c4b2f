// Package authtest checks a running tenure server's authorisation against
// the table of who may call what in docs/guides/security.md: every
// call of the table, under every role, with a token scoped to one
// namespace (and, for workers, one queue) and with one whose scope is
// everything, on what is in and out of that scope, and with no token and
// a wrong one, over Connect and gRPC. It needs only the server's base URL,
// so the same run checks an embedded server and a cluster node.
//
// Use: TokenFile writes the token file, the test starts the server with
// it (--auth-file, and --pprof so that /debug/pprof/ is there to refuse),
// on a loopback address, then calls Run.
package authtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/testenv"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// The scope of the scoped tokens, and what is outside it.
const (
	InNamespace  = "authz-in"
	OutNamespace = "authz-out"
	InQueue      = "q-in"
	OtherQueue   = "q-other"
)

// Tokens are the tokens of a run, in the file TokenFile wrote.
type Tokens struct {
	// Setup is an admin token with namespace *: it makes the tasks the
	// run calls about.
	Setup string
	// Scoped holds, per role, a token of namespace InNamespace (and, for a
	// worker, queue InQueue); Star one of namespace * (and queue *).
	Scoped, Star map[auth.Role]string
}

// TokenFile writes a token file at path with the tokens of a run.
func TokenFile(t testing.TB, path string) Tokens {
	t.Helper()
	tk := Tokens{Scoped: map[auth.Role]string{}, Star: map[auth.Role]string{}}
	create := func(name string, role auth.Role, ns, q string) string {
		p := auth.Principal{Name: name, Role: role, Namespaces: []string{ns}}
		if role == auth.Worker {
			p.Queues = []string{q}
		}
		tok, _, err := auth.Create(path, p, time.Time{})
		if err != nil {
			t.Fatalf("authtest: making token %s: %v", name, err)
		}
		return tok
	}
	tk.Setup = create("setup", auth.Admin, auth.All, "")
	for _, r := range auth.Roles {
		tk.Scoped[r] = create(string(r)+"-scoped", r, InNamespace, InQueue)
		tk.Star[r] = create(string(r)+"-star", r, auth.All, auth.All)
	}
	return tk
}

// Store writes the token file of a run (TokenFile) in a directory of t's
// own and opens the store that reads it, as a server started with
// --auth-file would.
func Store(t testing.TB) (Tokens, *auth.Store) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.jsonl")
	tok := TokenFile(t, file)
	st, err := auth.Open(file, auth.StoreOptions{})
	if err != nil {
		t.Fatalf("authtest: opening the token file: %v", err)
	}
	return tok, st
}

// target is what a call is made about.
type target int

const (
	tgIn             target = iota // InNamespace, InQueue
	tgOtherQueue                   // InNamespace, OtherQueue
	tgOtherNamespace               // OutNamespace, InQueue
	tgEvery                        // no namespace named: every one (a listing, a bulk filter, the whole server)
	tgNone                         // a call about no namespace (reflection)
)

var targetNames = [...]string{"in scope", "another queue", "another namespace", "every namespace", "no namespace"}

func (tg target) String() string { return targetNames[tg] }

// namespace and queue of a target that names them.
func (tg target) names() (ns, q string) {
	switch tg {
	case tgIn:
		return InNamespace, InQueue
	case tgOtherQueue:
		return InNamespace, OtherQueue
	case tgOtherNamespace:
		return OutNamespace, InQueue
	}
	return "", ""
}

// inScope reports whether a scoped token of role may act on tg.
func inScope(role auth.Role, tg target) bool {
	switch tg {
	case tgIn, tgNone:
		return true
	case tgOtherQueue:
		return role != auth.Worker
	}
	return false
}

// answer is how a call was answered: its code (0: ok) and message.
type answer struct {
	code connect.Code
	msg  string
}

func (a answer) String() string {
	if a.code == 0 {
		return "ok"
	}
	return a.code.String() + ": " + a.msg
}

func answerOf(err error) answer {
	if err == nil {
		return answer{}
	}
	return answer{connect.CodeOf(err), err.Error()}
}

// env is one protocol's way to the server, and the tasks of the run.
type env struct {
	base     string
	protocol string
	hc       *http.Client
	opts     []connect.ClientOption
	tasks    tenurev1connect.TaskServiceClient
	workers  tenurev1connect.WorkerServiceClient
	queues   tenurev1connect.QueueServiceClient
	sched    tenurev1connect.ScheduleServiceClient
	outbox   tenurev1connect.OutboxServiceClient
	admin    tenurev1connect.AdminServiceClient
	events   tenurev1connect.EventServiceClient
	wf       tenurev1connect.WorkflowServiceClient
	task     map[target]string // a task of each target that names one
}

// req is a request carrying token (none if empty).
func req[T any](token string, m *T) *connect.Request[T] {
	r := connect.NewRequest(m)
	if token != "" {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	return r
}

// call is one row of the table: how to make it about a target.
type call struct {
	targets []target
	do      func(ctx context.Context, e *env, token string, tg target) answer
}

// at is what a unary call's request is about: the namespace, queue and
// task of its target.
type at struct {
	ns, q string
	task  string // the task of the target, for a call about one
}

// unary makes method m of the service client svc picks from the env, with
// the request build makes for the target, and answers its error.
func unary[C, Req, Resp any](svc func(*env) C, m func(C, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), build func(at) *Req) func(context.Context, *env, string, target) answer {
	return func(ctx context.Context, e *env, tok string, tg target) answer {
		ns, q := tg.names()
		_, err := m(svc(e), ctx, req(tok, build(at{ns: ns, q: q, task: e.task[tg]})))
		return answerOf(err)
	}
}

// The service clients of an env, for unary.
func taskSvc(e *env) tenurev1connect.TaskServiceClient         { return e.tasks }
func workerSvc(e *env) tenurev1connect.WorkerServiceClient     { return e.workers }
func queueSvc(e *env) tenurev1connect.QueueServiceClient       { return e.queues }
func scheduleSvc(e *env) tenurev1connect.ScheduleServiceClient { return e.sched }
func outboxSvc(e *env) tenurev1connect.OutboxServiceClient     { return e.outbox }
func adminSvc(e *env) tenurev1connect.AdminServiceClient       { return e.admin }
func workflowSvc(e *env) tenurev1connect.WorkflowServiceClient { return e.wf }

// before is a created_before that selects no task: the bulk actions of
// the run change nothing.
var before = timestamppb.New(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))

// noTick is a time one second after which a yearly schedule has no tick.
var noTick = time.Date(2001, 6, 1, 0, 0, 0, 0, time.UTC)

func filter(a at) *tenurev1.TaskFilter {
	return &tenurev1.TaskFilter{Namespace: a.ns, Queue: a.q, CreatedBefore: before}
}

var (
	named    = []target{tgIn, tgOtherQueue, tgOtherNamespace}
	listings = []target{tgIn, tgOtherQueue, tgOtherNamespace, tgEvery}
)

// calls are the runner's way to make each call of the security guide's table,
// by its name there.
var calls = map[string]call{
	"TaskService/Submit": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.Submit, func(a at) *tenurev1.SubmitRequest {
		return &tenurev1.SubmitRequest{Namespace: a.ns, Queue: a.q, Payload: []byte("authz")}
	})},
	"TaskService/SubmitBatch": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.SubmitBatch, func(a at) *tenurev1.SubmitBatchRequest {
		return &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Namespace: a.ns, Queue: a.q}}}
	})},
	"TaskService/GetTask": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.GetTask, func(a at) *tenurev1.GetTaskRequest {
		return &tenurev1.GetTaskRequest{TaskId: a.task}
	})},
	"TaskService/ListTasks": {listings, unary(taskSvc, tenurev1connect.TaskServiceClient.ListTasks, func(a at) *tenurev1.ListTasksRequest {
		return &tenurev1.ListTasksRequest{Namespace: a.ns, Queue: a.q, PageSize: 1}
	})},
	"TaskService/GetTaskHistory": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.GetTaskHistory, func(a at) *tenurev1.GetTaskHistoryRequest {
		return &tenurev1.GetTaskHistoryRequest{TaskId: a.task}
	})},
	"TaskService/WaitTask": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.WaitTask, func(a at) *tenurev1.WaitTaskRequest {
		return &tenurev1.WaitTaskRequest{TaskId: a.task}
	})},
	"WorkflowService/GetWorkflow": {named, unary(workflowSvc, tenurev1connect.WorkflowServiceClient.GetWorkflow, func(a at) *tenurev1.GetWorkflowRequest {
		return &tenurev1.GetWorkflowRequest{Namespace: a.ns, WorkflowId: "authz"}
	})},
	"WorkflowService/ListWorkflows": {listings, unary(workflowSvc, tenurev1connect.WorkflowServiceClient.ListWorkflows, func(a at) *tenurev1.ListWorkflowsRequest {
		return &tenurev1.ListWorkflowsRequest{Namespace: a.ns}
	})},
	"WorkflowService/CancelWorkflow": {named, unary(workflowSvc, tenurev1connect.WorkflowServiceClient.CancelWorkflow, func(a at) *tenurev1.CancelWorkflowRequest {
		return &tenurev1.CancelWorkflowRequest{Namespace: a.ns, WorkflowId: "authz"}
	})},
	"WorkflowService/RetryWorkflow": {named, unary(workflowSvc, tenurev1connect.WorkflowServiceClient.RetryWorkflow, func(a at) *tenurev1.RetryWorkflowRequest {
		return &tenurev1.RetryWorkflowRequest{Namespace: a.ns, WorkflowId: "authz"}
	})},
	"WorkflowService/WaitWorkflow": {named, unary(workflowSvc, tenurev1connect.WorkflowServiceClient.WaitWorkflow, func(a at) *tenurev1.WaitWorkflowRequest {
		return &tenurev1.WaitWorkflowRequest{Namespace: a.ns, WorkflowId: "authz"}
	})},
	"TaskService/KillTask": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.KillTask, func(a at) *tenurev1.KillTaskRequest {
		return &tenurev1.KillTaskRequest{TaskId: a.task, Reason: "authz"}
	})},
	"TaskService/RetryTask": {named, unary(taskSvc, tenurev1connect.TaskServiceClient.RetryTask, func(a at) *tenurev1.RetryTaskRequest {
		return &tenurev1.RetryTaskRequest{TaskId: a.task, Reason: "authz"}
	})},
	"TaskService/RetryTasks": {listings, unary(taskSvc, tenurev1connect.TaskServiceClient.RetryTasks, func(a at) *tenurev1.RetryTasksRequest {
		return &tenurev1.RetryTasksRequest{Filter: filter(a), Reason: "authz"}
	})},
	"TaskService/KillTasks": {listings, unary(taskSvc, tenurev1connect.TaskServiceClient.KillTasks, func(a at) *tenurev1.KillTasksRequest {
		return &tenurev1.KillTasksRequest{Filter: filter(a), Reason: "authz"}
	})},
	"TaskService/PurgeTasks": {listings, unary(taskSvc, tenurev1connect.TaskServiceClient.PurgeTasks, func(a at) *tenurev1.PurgeTasksRequest {
		return &tenurev1.PurgeTasksRequest{Filter: filter(a), Reason: "authz"}
	})},
	"WorkerService/Lease": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Lease, func(a at) *tenurev1.LeaseRequest {
		return &tenurev1.LeaseRequest{WorkerId: "authz", Namespace: a.ns, Queue: a.q, MaxTasks: 1, Wait: durationpb.New(0)}
	})},
	"WorkerService/Start": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Start, func(a at) *tenurev1.StartRequest {
		return &tenurev1.StartRequest{TaskId: a.task, LeaseId: "authz-lease"}
	})},
	"WorkerService/Heartbeat": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Heartbeat, func(a at) *tenurev1.HeartbeatRequest {
		return &tenurev1.HeartbeatRequest{TaskId: a.task, LeaseId: "authz-lease"}
	})},
	"WorkerService/Commit": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Commit, func(a at) *tenurev1.CommitRequest {
		return &tenurev1.CommitRequest{TaskId: a.task, LeaseId: "authz-lease"}
	})},
	"WorkerService/Complete": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Complete, func(a at) *tenurev1.CompleteRequest {
		return &tenurev1.CompleteRequest{TaskId: a.task, LeaseId: "authz-lease"}
	})},
	"WorkerService/CompleteBatch": {named, func(ctx context.Context, e *env, tok string, tg target) answer {
		resp, err := e.workers.CompleteBatch(ctx, req(tok, &tenurev1.CompleteBatchRequest{Items: []*tenurev1.CompleteRequest{{TaskId: e.task[tg], LeaseId: "authz-lease"}}}))
		if err != nil {
			return answerOf(err)
		}
		// The item's answer: a refusal is per item, and an item not named
		// among the failed succeeded.
		r := resp.Msg.GetFailed()
		if len(r) == 0 {
			return answer{}
		}
		if len(r) != 1 || r[0].GetIndex() != 0 {
			return answer{connect.CodeInternal, fmt.Sprintf("%d failures of 1 item: %v", len(r), r)}
		}
		var code connect.Code
		if r[0].GetCode() != "" && code.UnmarshalText([]byte(r[0].GetCode())) != nil {
			return answer{connect.CodeInternal, "unknown item code " + r[0].GetCode()}
		}
		return answer{code, r[0].GetMessage()}
	}},
	"WorkerService/Fail": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Fail, func(a at) *tenurev1.FailRequest {
		return &tenurev1.FailRequest{TaskId: a.task, LeaseId: "authz-lease", Reason: "authz"}
	})},
	"WorkerService/Snooze": {named, unary(workerSvc, tenurev1connect.WorkerServiceClient.Snooze, func(a at) *tenurev1.SnoozeRequest {
		return &tenurev1.SnoozeRequest{TaskId: a.task, LeaseId: "authz-lease", Reason: "authz"}
	})},
	"QueueService/ListQueues": {[]target{tgIn, tgOtherNamespace, tgEvery}, unary(queueSvc, tenurev1connect.QueueServiceClient.ListQueues, func(a at) *tenurev1.ListQueuesRequest {
		return &tenurev1.ListQueuesRequest{Namespace: a.ns}
	})},
	"QueueService/GetQueue": {named, unary(queueSvc, tenurev1connect.QueueServiceClient.GetQueue, func(a at) *tenurev1.GetQueueRequest {
		return &tenurev1.GetQueueRequest{Namespace: a.ns, Queue: a.q}
	})},
	"QueueService/PauseQueue": {named, unary(queueSvc, tenurev1connect.QueueServiceClient.PauseQueue, func(a at) *tenurev1.PauseQueueRequest {
		return &tenurev1.PauseQueueRequest{Namespace: a.ns, Queue: a.q, Reason: "authz"}
	})},
	"QueueService/ResumeQueue": {named, unary(queueSvc, tenurev1connect.QueueServiceClient.ResumeQueue, func(a at) *tenurev1.ResumeQueueRequest {
		return &tenurev1.ResumeQueueRequest{Namespace: a.ns, Queue: a.q, Reason: "authz"}
	})},
	"QueueService/SetQueueLimits": {named, unary(queueSvc, tenurev1connect.QueueServiceClient.SetQueueLimits, func(a at) *tenurev1.SetQueueLimitsRequest {
		conc := uint32(100)
		return &tenurev1.SetQueueLimitsRequest{Namespace: a.ns, Queue: a.q, MaxConcurrency: &conc, Reason: "authz"}
	})},
	// The schedule calls name schedule "authz", which CreateSchedule
	// makes (yearly: it fires nothing during a run); a call about it
	// before that, or after DeleteSchedule, is answered not_found, which
	// is no refusal.
	"ScheduleService/CreateSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.CreateSchedule, func(a at) *tenurev1.CreateScheduleRequest {
		return &tenurev1.CreateScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz", Cron: "@yearly"}
	})},
	"ScheduleService/GetSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.GetSchedule, func(a at) *tenurev1.GetScheduleRequest {
		return &tenurev1.GetScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz"}
	})},
	"ScheduleService/ListSchedules": {listings, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.ListSchedules, func(a at) *tenurev1.ListSchedulesRequest {
		return &tenurev1.ListSchedulesRequest{Namespace: a.ns, Queue: a.q}
	})},
	"ScheduleService/UpdateSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.UpdateSchedule, func(a at) *tenurev1.UpdateScheduleRequest {
		return &tenurev1.UpdateScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz", Cron: "@yearly", Reason: "authz"}
	})},
	"ScheduleService/PauseSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.PauseSchedule, func(a at) *tenurev1.PauseScheduleRequest {
		return &tenurev1.PauseScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz", Reason: "authz"}
	})},
	"ScheduleService/ResumeSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.ResumeSchedule, func(a at) *tenurev1.ResumeScheduleRequest {
		return &tenurev1.ResumeScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz", Reason: "authz"}
	})},
	"ScheduleService/DeleteSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.DeleteSchedule, func(a at) *tenurev1.DeleteScheduleRequest {
		return &tenurev1.DeleteScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz", Reason: "authz"}
	})},
	"ScheduleService/BackfillSchedule": {named, unary(scheduleSvc, tenurev1connect.ScheduleServiceClient.BackfillSchedule, func(a at) *tenurev1.BackfillScheduleRequest {
		// A range of one second without a tick of @yearly: nothing fires.
		return &tenurev1.BackfillScheduleRequest{Namespace: a.ns, Queue: a.q, Name: "authz",
			Start: timestamppb.New(noTick), End: timestamppb.New(noTick.Add(time.Second))}
	})},
	"EventService/WatchEvents": {listings, func(ctx context.Context, e *env, tok string, tg target) answer {
		ns, q := tg.names()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := e.events.WatchEvents(ctx, req(tok, &tenurev1.WatchEventsRequest{Filter: &tenurev1.EventFilter{Namespace: ns, Queue: q}}))
		if err != nil {
			return answerOf(err)
		}
		defer s.Close()
		// The first answer (the cursor it starts from) says it is allowed.
		if !s.Receive() {
			return answerOf(s.Err())
		}
		return answer{}
	}},
	"OutboxService/Relay": {named, unary(outboxSvc, tenurev1connect.OutboxServiceClient.Relay, func(a at) *tenurev1.RelayRequest {
		return &tenurev1.RelayRequest{Outbox: "authz", Rows: []*tenurev1.OutboxRow{
			{Row: 1, Request: &tenurev1.SubmitRequest{Namespace: a.ns, Queue: a.q, RequestId: "authz-" + a.ns + "-" + a.q}}}}
	})},
	"OutboxService/Release": {named, unary(outboxSvc, tenurev1connect.OutboxServiceClient.Release, func(a at) *tenurev1.ReleaseRequest {
		return &tenurev1.ReleaseRequest{Outbox: "authz", Rows: []*tenurev1.OutboxHold{
			{Row: 1, Namespace: a.ns, Queue: a.q, RequestId: "authz-" + a.ns + "-" + a.q}}}
	})},
	"OutboxService/ListOutboxHolds": {[]target{tgEvery}, unary(outboxSvc, tenurev1connect.OutboxServiceClient.ListOutboxHolds, func(_ at) *tenurev1.ListOutboxHoldsRequest {
		return &tenurev1.ListOutboxHoldsRequest{}
	})},
	"OutboxService/ListOutboxes": {[]target{tgEvery}, unary(outboxSvc, tenurev1connect.OutboxServiceClient.ListOutboxes, func(_ at) *tenurev1.ListOutboxesRequest {
		return &tenurev1.ListOutboxesRequest{}
	})},
	"AdminService/Snapshot": {[]target{tgEvery}, unary(adminSvc, tenurev1connect.AdminServiceClient.Snapshot, func(_ at) *tenurev1.SnapshotRequest {
		return &tenurev1.SnapshotRequest{}
	})},
	"AdminService/WhoAmI": {[]target{tgNone}, unary(adminSvc, tenurev1connect.AdminServiceClient.WhoAmI, func(_ at) *tenurev1.WhoAmIRequest {
		return &tenurev1.WhoAmIRequest{}
	})},
	"AdminService/GetCluster": {[]target{tgEvery}, unary(adminSvc, tenurev1connect.AdminServiceClient.GetCluster, func(_ at) *tenurev1.GetClusterRequest {
		return &tenurev1.GetClusterRequest{}
	})},
	auth.MetricsCall: {[]target{tgEvery}, func(ctx context.Context, e *env, tok string, _ target) answer {
		return e.get(ctx, "/metrics", tok)
	}},
	auth.PprofCall: {[]target{tgEvery}, func(ctx context.Context, e *env, tok string, _ target) answer {
		return e.get(ctx, "/debug/pprof/", tok)
	}},
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {[]target{tgNone}, func(ctx context.Context, e *env, tok string, _ target) answer {
		return e.reflect(ctx, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", tok)
	}},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {[]target{tgNone}, func(ctx context.Context, e *env, tok string, _ target) answer {
		return e.reflect(ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", tok)
	}},
}

// get answers an HTTP GET of path: 401 is unauthenticated, 403
// permission_denied, anything else ok.
func (e *env) get(ctx context.Context, path, tok string) answer {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		return answer{connect.CodeInternal, err.Error()}
	}
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := e.hc.Do(r)
	if err != nil {
		return answer{connect.CodeUnavailable, err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return answer{connect.CodeUnauthenticated, string(body)}
	case http.StatusForbidden:
		return answer{connect.CodePermissionDenied, string(body)}
	case http.StatusNotFound:
		return answer{connect.CodeNotFound, path + " is not served: start the server with --pprof"}
	}
	return answer{}
}

// reflect opens a reflection stream of procedure (over gRPC, which a
// bidirectional stream needs), sends an empty request and reads the
// answer: a refusal is its error.
func (e *env) reflect(ctx context.Context, procedure, tok string) answer {
	hc := client.DefaultHTTPClient(client.ProtocolGRPC)
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, e.base+procedure, connect.WithGRPC())
	s := c.CallBidiStream(ctx)
	if tok != "" {
		s.RequestHeader().Set("Authorization", "Bearer "+tok)
	}
	if err := s.Send(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
		return answerOf(err)
	}
	s.CloseRequest()
	_, err := s.Receive()
	s.CloseResponse()
	var ce *connect.Error
	if errors.As(err, &ce) && (ce.Code() == connect.CodeUnauthenticated || ce.Code() == connect.CodePermissionDenied) {
		return answerOf(err)
	}
	return answer{} // any other answer: the server served the stream
}

// row is one row of the security guide's table.
type row struct {
	call  string
	roles map[auth.Role]bool
}

// guideRows returns the rows of docs/guides/security.md's table of who
// may call what.
func guideRows(t testing.TB) []row {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "guides", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "<!-- auth-rules")
	table, _, ok2 := strings.Cut(rest, "<!-- /auth-rules -->")
	if !ok || !ok2 {
		t.Fatal("authtest: docs/guides/security.md has no table between <!-- auth-rules … --> and <!-- /auth-rules -->")
	}
	var rows []row
	var cols []auth.Role
	for _, l := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case len(cells) < 5 || strings.HasPrefix(cells[0], "---"):
			continue
		case cells[0] == "call":
			for _, c := range cells[1:5] {
				r, err := auth.ParseRole(c)
				if err != nil {
					t.Fatalf("authtest: the security guide's table header: %v", err)
				}
				cols = append(cols, r)
			}
			continue
		}
		r := row{call: strings.Trim(cells[0], "`"), roles: map[auth.Role]bool{}}
		for i, c := range cells[1:5] {
			if c != "yes" && c != "no" {
				t.Fatalf("authtest: the security guide's table, %s: cell %q is not yes or no", r.call, c)
			}
			r.roles[cols[i]] = c == "yes"
		}
		rows = append(rows, r)
	}
	if len(cols) != len(auth.Roles) || len(rows) == 0 {
		t.Fatalf("authtest: the security guide's table: roles %v, %d rows", cols, len(rows))
	}
	return rows
}

// Run checks every call of the security guide's table against the server at base
// (e.g. http://127.0.0.1:7070), which reads the token file of tok. It
// creates tasks in InNamespace and OutNamespace and calls every call on
// them; it leaves the server serving.
func Run(t *testing.T, base string, tok Tokens) {
	rows := guideRows(t)
	seen := map[string]bool{}
	for _, r := range rows {
		if _, ok := calls[r.call]; !ok {
			t.Errorf("authtest: the security guide's table has %s, which the runner cannot call: add it to calls", r.call)
		}
		seen[r.call] = true
	}
	for name := range calls {
		if !seen[name] {
			t.Errorf("authtest: the runner calls %s, which the security guide's table does not list", name)
		}
	}
	if t.Failed() {
		return
	}
	for _, protocol := range []string{client.ProtocolConnect, client.ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			e := newEnv(t, base, protocol, tok.Setup)
			n := 0
			for _, r := range rows {
				n += run(t, e, r, tok)
			}
			t.Logf("%d answers of %d calls checked", n, len(rows))
		})
	}
}

func newEnv(t *testing.T, base, protocol, setup string) *env {
	e := &env{base: base, protocol: protocol, hc: client.DefaultHTTPClient(protocol), task: map[target]string{}}
	if protocol == client.ProtocolGRPC {
		e.opts = append(e.opts, connect.WithGRPC())
	}
	e.tasks = tenurev1connect.NewTaskServiceClient(e.hc, base, e.opts...)
	e.workers = tenurev1connect.NewWorkerServiceClient(e.hc, base, e.opts...)
	e.queues = tenurev1connect.NewQueueServiceClient(e.hc, base, e.opts...)
	e.sched = tenurev1connect.NewScheduleServiceClient(e.hc, base, e.opts...)
	e.admin = tenurev1connect.NewAdminServiceClient(e.hc, base, e.opts...)
	e.events = tenurev1connect.NewEventServiceClient(e.hc, base, e.opts...)
	e.outbox = tenurev1connect.NewOutboxServiceClient(e.hc, base, e.opts...)
	e.wf = tenurev1connect.NewWorkflowServiceClient(e.hc, base, e.opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tg := range named {
		ns, q := tg.names()
		resp, err := e.tasks.Submit(ctx, req(setup, &tenurev1.SubmitRequest{Namespace: ns, Queue: q, Payload: []byte("authz fixture")}))
		if err != nil {
			t.Fatalf("authtest: submitting the task of %s with the setup token: %v", tg, err)
		}
		e.task[tg] = resp.Msg.GetTask().GetTaskId()
	}
	return e
}

// run makes the call of r under every token and target, checks each
// answer, and returns how many it checked.
func run(t *testing.T, e *env, r row, tok Tokens) (checked int) {
	c := calls[r.call]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(who string, tg target, want connect.Code, wantIn []string, got answer) {
		t.Helper()
		checked++
		refused := got.code == connect.CodeUnauthenticated || got.code == connect.CodePermissionDenied
		switch {
		case want == 0 && refused:
			t.Errorf("%s %s, %s, %s: refused, but the security guide's table allows it: %s: %s", e.protocol, r.call, who, tg, got.code, got.msg)
		case want == 0 && got.code == connect.CodeNotFound && strings.Contains(got.msg, "--pprof"):
			t.Errorf("%s %s: %s", e.protocol, r.call, got.msg)
		case want != 0 && got.code != want:
			t.Errorf("%s %s, %s, %s: answered %s, want %s", e.protocol, r.call, who, tg, got, want)
		case want != 0:
			for _, w := range wantIn {
				if !strings.Contains(got.msg, w) {
					t.Errorf("%s %s, %s, %s: the refusal does not name %q: %s", e.protocol, r.call, who, tg, w, got.msg)
				}
			}
		}
	}
	unknown, _ := auth.NewToken()
	tampered := tok.Setup[:17] + unknown[17:] // the setup token's id, another secret
	for who, token := range map[string]string{"no token": "", "an unknown token": unknown, "a tampered token": tampered} {
		check(who, c.targets[0], connect.CodeUnauthenticated, nil, c.do(ctx, e, token, c.targets[0]))
	}
	for _, role := range auth.Roles {
		for _, scoped := range []bool{true, false} {
			token, who := tok.Star[role], string(role)+" token of namespace *"
			if scoped {
				token, who = tok.Scoped[role], string(role)+" token of namespace "+InNamespace
			}
			for _, tg := range c.targets {
				want, wantIn := connect.Code(0), []string(nil)
				switch {
				case !r.roles[role]:
					want, wantIn = connect.CodePermissionDenied, []string{"(role " + string(role) + ")", "needs role"}
				case scoped && !inScope(role, tg):
					want = connect.CodePermissionDenied
					switch tg {
					case tgOtherQueue:
						wantIn = []string{`"` + OtherQueue + `"`}
					case tgOtherNamespace:
						wantIn = []string{`"` + OutNamespace + `"`}
					default:
						wantIn = []string{"namespace *"}
					}
				}
				check(who, tg, want, wantIn, c.do(ctx, e, token, tg))
			}
		}
	}
	return checked
}
