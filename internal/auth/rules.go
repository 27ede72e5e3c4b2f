package auth

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/grpcreflect"

	"github.com/tenurehq/tenure/internal/coordinator"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// Scope says where the namespace and queue a call acts on come from.
type Scope int

const (
	// ScopeRequest: fields of the request name them (requestTargets).
	ScopeRequest Scope = iota + 1
	// ScopeTask: they are the task's that the request names by id, known
	// only once the server has found the task: Decide allows the role,
	// and the server calls CheckTask with the task before acting on it.
	ScopeTask
	// ScopeServer: the call covers the whole server, so every namespace:
	// only a token with namespace * may make it.
	ScopeServer
	// ScopeNone: the call acts on no namespace; any token of a role the
	// rule names may make it.
	ScopeNone
)

// Calls beside the API that need a token (HTTP endpoints, named by method
// and path as the server mounts them).
const (
	MetricsCall = "GET /metrics"
	PprofCall   = "/debug/pprof/"
)

// Rule says who may make one call.
type Rule struct {
	// Call is the Connect procedure ("/tenure.v1.TaskService/Submit") or
	// an HTTP endpoint (MetricsCall).
	Call string
	// Roles that may make it.
	Roles []Role
	// Scope says where the namespace and queue it acts on come from.
	Scope Scope
	// Where says, for docs/guides/security.md, where a ScopeRequest or ScopeTask call
	// finds its namespace and queue.
	Where string
}

// Every role, for the calls that any token may make.
var anyRole = Roles

const (
	whereNamespaceQueue = "request: `namespace` (unset: `default`), `queue`"
	whereListing        = "request: `namespace`, `queue` (unset: every one)"
	whereFilter         = "request: `filter.namespace`, `filter.queue` (unset, or `filter.all`: every one)"
	whereTask           = "task named by `task_id`, once found"
	whereSchedule       = "request: `namespace` (unset: `default`), `queue` (the schedule's tasks' queue)"
	whereWorkflow       = "request: `namespace` (unset: `default`), every queue of it"
)

// Rules is the authorisation table: every call that needs a token and who
// may make it. A call not in it is refused to every token.
// docs/guides/security.md shows it (a test keeps the two the same).
var Rules = []Rule{
	{tenurev1connect.TaskServiceSubmitProcedure, []Role{Admin, Submitter}, ScopeRequest, whereNamespaceQueue},
	{tenurev1connect.TaskServiceSubmitBatchProcedure, []Role{Admin, Submitter}, ScopeRequest, "request: each of `requests`, as for Submit"},
	{tenurev1connect.TaskServiceGetTaskProcedure, anyRole, ScopeTask, whereTask},
	{tenurev1connect.TaskServiceListTasksProcedure, []Role{Admin, Submitter, Reader}, ScopeRequest, whereListing},
	{tenurev1connect.TaskServiceGetTaskHistoryProcedure, anyRole, ScopeTask, whereTask},
	{tenurev1connect.TaskServiceWaitTaskProcedure, anyRole, ScopeTask, whereTask},
	{tenurev1connect.TaskServiceKillTaskProcedure, []Role{Admin}, ScopeTask, whereTask},
	{tenurev1connect.TaskServiceRetryTaskProcedure, []Role{Admin}, ScopeTask, whereTask},
	{tenurev1connect.TaskServiceRetryTasksProcedure, []Role{Admin}, ScopeRequest, whereFilter},
	{tenurev1connect.TaskServiceKillTasksProcedure, []Role{Admin}, ScopeRequest, whereFilter},
	{tenurev1connect.TaskServicePurgeTasksProcedure, []Role{Admin}, ScopeRequest, whereFilter},
	{tenurev1connect.WorkerServiceLeaseProcedure, []Role{Admin, Worker}, ScopeRequest, whereNamespaceQueue + ", or each of `queues`"},
	{tenurev1connect.WorkerServiceStartProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.WorkerServiceHeartbeatProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.WorkerServiceCommitProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.WorkerServiceCompleteProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.WorkerServiceCompleteBatchProcedure, []Role{Admin, Worker}, ScopeTask, "task of each item, once found (an item out of scope is refused on its own); and, with `lease` set, that request's `namespace` (unset: `default`), `queue`, as for Lease"},
	{tenurev1connect.WorkerServiceFailProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.WorkerServiceSnoozeProcedure, []Role{Admin, Worker}, ScopeTask, whereTask},
	{tenurev1connect.QueueServiceListQueuesProcedure, []Role{Admin, Reader}, ScopeRequest, "request: `namespace` (unset: every one)"},
	{tenurev1connect.QueueServiceGetQueueProcedure, []Role{Admin, Reader}, ScopeRequest, whereNamespaceQueue},
	{tenurev1connect.QueueServicePauseQueueProcedure, []Role{Admin}, ScopeRequest, whereNamespaceQueue},
	{tenurev1connect.QueueServiceResumeQueueProcedure, []Role{Admin}, ScopeRequest, whereNamespaceQueue},
	{tenurev1connect.QueueServiceSetQueueLimitsProcedure, []Role{Admin}, ScopeRequest, whereNamespaceQueue},
	{tenurev1connect.ScheduleServiceCreateScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServiceGetScheduleProcedure, []Role{Admin, Reader}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServiceListSchedulesProcedure, []Role{Admin, Reader}, ScopeRequest, whereListing},
	{tenurev1connect.ScheduleServiceUpdateScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServicePauseScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServiceResumeScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServiceDeleteScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.ScheduleServiceBackfillScheduleProcedure, []Role{Admin}, ScopeRequest, whereSchedule},
	{tenurev1connect.EventServiceWatchEventsProcedure, []Role{Admin, Submitter, Reader}, ScopeRequest, "request: `filter.namespace`, `filter.queue` (unset: every one)"},
	{tenurev1connect.OutboxServiceRelayProcedure, []Role{Admin, Submitter}, ScopeRequest, "request: each of `rows`' `request`, as for Submit"},
	{tenurev1connect.OutboxServiceReleaseProcedure, []Role{Admin, Submitter}, ScopeRequest, "request: each of `rows` (`namespace`, unset: `default`; `queue`)"},
	{tenurev1connect.OutboxServiceListOutboxHoldsProcedure, []Role{Admin, Submitter, Reader}, ScopeServer, ""},
	{tenurev1connect.OutboxServiceListOutboxesProcedure, []Role{Admin, Submitter, Reader}, ScopeServer, ""},
	{tenurev1connect.WorkflowServiceGetWorkflowProcedure, []Role{Admin, Submitter, Reader}, ScopeRequest, whereWorkflow},
	{tenurev1connect.WorkflowServiceListWorkflowsProcedure, []Role{Admin, Submitter, Reader}, ScopeRequest, "request: `namespace` (unset: every one)"},
	{tenurev1connect.WorkflowServiceCancelWorkflowProcedure, []Role{Admin}, ScopeRequest, whereWorkflow},
	{tenurev1connect.WorkflowServiceRetryWorkflowProcedure, []Role{Admin}, ScopeRequest, whereWorkflow},
	{tenurev1connect.WorkflowServiceWaitWorkflowProcedure, []Role{Admin, Submitter, Reader}, ScopeRequest, whereWorkflow},
	{tenurev1connect.AdminServiceSnapshotProcedure, []Role{Admin}, ScopeServer, ""},
	{tenurev1connect.AdminServiceWhoAmIProcedure, anyRole, ScopeNone, ""},
	{tenurev1connect.AdminServiceGetClusterProcedure, []Role{Admin, Reader}, ScopeServer, ""},
	{MetricsCall, []Role{Admin, Reader}, ScopeServer, ""},
	{PprofCall, []Role{Admin}, ScopeServer, ""},
	{"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo", anyRole, ScopeNone, ""},
	{"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo", anyRole, ScopeNone, ""},
}

// ruleOf is Rules by call.
var ruleOf = func() map[string]*Rule {
	m := make(map[string]*Rule, len(Rules))
	for i := range Rules {
		m[Rules[i].Call] = &Rules[i]
	}
	return m
}()

// DecidesOnRequest reports whether call is decided on its request message
// (its rule is ScopeRequest): a stream of it (WatchEvents) can be decided
// only once its message arrives.
func DecidesOnRequest(call string) bool {
	r, ok := ruleOf[call]
	return ok && r.Scope == ScopeRequest
}

// Decide says whether p may make call with the request message msg (nil
// for the calls beside the API). A nil error with checkTask set allows
// the call only for tasks in p's scope: the server must pass each task the
// request names to CheckTask before acting on it. The error, if any, is a
// refusal (permission denied) that names the role or the scope missing.
func Decide(p *Principal, call string, msg any) (checkTask bool, err error) {
	r, ok := ruleOf[call]
	if !ok {
		return false, fmt.Errorf("%s may not call %s: no token may (it is not in the authorisation table)", p, short(call))
	}
	if err := r.refusal(p); err != nil {
		return false, err
	}
	switch r.Scope {
	case ScopeNone, ScopeServer:
		return false, nil
	case ScopeTask:
		if err := carriedLease(p, msg); err != nil {
			return false, err
		}
		return !p.unrestricted(), nil
	}
	targets, ok := requestTargets(msg)
	if !ok {
		return false, fmt.Errorf("%s may not call %s with a %T: the authorisation table does not know that request", p, short(call), msg)
	}
	for _, t := range targets {
		if err := p.check(short(call), t, ""); err != nil {
			return false, err
		}
	}
	return false, nil
}

// carriedLease decides the Lease that a CompleteBatch request carries in
// its lease field, as the Lease call it stands for: a caller that may
// complete tasks but not lease from that queue is refused the whole call.
func carriedLease(p *Principal, msg any) error {
	m, ok := msg.(*tenurev1.CompleteBatchRequest)
	if !ok || m.GetLease() == nil {
		return nil
	}
	if _, err := Decide(p, tenurev1connect.WorkerServiceLeaseProcedure, m.GetLease()); err != nil {
		return fmt.Errorf("the lease this CompleteBatch carries is refused: %w", err)
	}
	return nil
}

// refusal is why p may not make r's call whatever it names: its role, or,
// for a call that covers the whole server, its namespaces. Nil if it may
// (within its scope).
func (r *Rule) refusal(p *Principal) error {
	if !slices.Contains(r.Roles, p.Role) {
		return fmt.Errorf("%s may not call %s: it needs role %s", p, short(r.Call), roleList(r.Roles))
	}
	if r.Scope == ScopeServer && !p.allowsNamespace("") {
		return fmt.Errorf("%s may not call %s: it covers every namespace and needs namespace *; %s", p, short(r.Call), p.scopeText())
	}
	return nil
}

// Permission says whether a principal may make one call of Rules.
type Permission struct {
	Call    string
	Allowed bool
	// Reason says why not, when not Allowed.
	Reason string
}

// Permissions lists every call of Rules, in order, with whether p may
// make it within its scope (AdminService.WhoAmI): what a program can
// offer the token's holder.
func Permissions(p *Principal) []Permission {
	out := make([]Permission, len(Rules))
	for i := range Rules {
		out[i] = Permission{Call: Rules[i].Call, Allowed: true}
		if err := Rules[i].refusal(p); err != nil {
			out[i] = Permission{Call: Rules[i].Call, Reason: err.Error()}
		}
	}
	return out
}

// CheckTask refuses call on task taskID, of namespace and queue t, unless
// they are in p's scope (see Decide).
func CheckTask(p *Principal, call, taskID string, t Target) error {
	return p.check(short(call), t, fmt.Sprintf(" on task %s (queue %q of namespace %q)", taskID, t.Queue, t.Namespace))
}

// CheckSpawn refuses a commit or completion (call) by p that spawns a task
// in t unless p's scope holds t: a spawn submits a task, within the scope
// of the worker that commits (docs/guides/security.md).
func CheckSpawn(p *Principal, call string, t Target) error {
	return p.check(short(call), t, fmt.Sprintf(" spawning a task in queue %q of namespace %q", t.Queue, t.Namespace))
}

// check refuses call unless p's scope holds t. on, if set, names the task
// the call is about.
func (p *Principal) check(call string, t Target, on string) error {
	switch {
	case !p.allowsNamespace(t.Namespace) && t.Namespace == "":
		return fmt.Errorf("%s may not call %s across every namespace: that needs namespace *; %s (name one of them in the request)", p, call, p.scopeText())
	case !p.allowsNamespace(t.Namespace) && on != "":
		return fmt.Errorf("%s may not call %s%s: namespace %q is not one of its namespaces; %s", p, call, on, t.Namespace, p.scopeText())
	case !p.allowsNamespace(t.Namespace):
		return fmt.Errorf("%s may not call %s in namespace %q: %s", p, call, t.Namespace, p.scopeText())
	case !p.allowsQueue(t.Queue) && t.Queue == "":
		return fmt.Errorf("%s may not call %s on every queue of namespace %q: that needs queue *; %s", p, call, t.Namespace, p.scopeText())
	case !p.allowsQueue(t.Queue) && on != "":
		return fmt.Errorf("%s may not call %s%s: queue %q is not one of its queues; %s", p, call, on, t.Queue, p.scopeText())
	case !p.allowsQueue(t.Queue):
		return fmt.Errorf("%s may not call %s on queue %q of namespace %q: %s", p, call, t.Queue, t.Namespace, p.scopeText())
	}
	return nil
}

// The requests a rule scopes, by what they name.
type (
	// inQueue names a queue of a namespace.
	inQueue interface {
		GetNamespace() string
		GetQueue() string
	}
	// inNamespace names a namespace.
	inNamespace interface{ GetNamespace() string }
	// filtered names the tasks of a bulk action.
	filtered interface{ GetFilter() *tenurev1.TaskFilter }
)

// requestTargets returns what the request of a ScopeRequest call acts on,
// or false for a message no rule knows. Where a request names no
// namespace, a call about one queue, task or workflow is about the
// default namespace, and a listing about every namespace.
func requestTargets(msg any) ([]Target, bool) {
	ns := func(s string) string { return cmp.Or(s, coordinator.DefaultNamespace) }
	switch m := msg.(type) {
	case *tenurev1.SubmitRequest, *tenurev1.GetQueueRequest, *tenurev1.PauseQueueRequest, *tenurev1.ResumeQueueRequest,
		*tenurev1.SetQueueLimitsRequest, *tenurev1.CreateScheduleRequest, *tenurev1.GetScheduleRequest,
		*tenurev1.UpdateScheduleRequest, *tenurev1.PauseScheduleRequest, *tenurev1.ResumeScheduleRequest,
		*tenurev1.DeleteScheduleRequest, *tenurev1.BackfillScheduleRequest:
		q := m.(inQueue)
		return []Target{{ns(q.GetNamespace()), q.GetQueue()}}, true
	case *tenurev1.ListTasksRequest, *tenurev1.ListSchedulesRequest:
		q := m.(inQueue)
		return []Target{{q.GetNamespace(), q.GetQueue()}}, true
	case *tenurev1.GetWorkflowRequest, *tenurev1.CancelWorkflowRequest, *tenurev1.RetryWorkflowRequest, *tenurev1.WaitWorkflowRequest:
		return []Target{{ns(m.(inNamespace).GetNamespace()), ""}}, true
	case *tenurev1.ListWorkflowsRequest, *tenurev1.ListQueuesRequest:
		return []Target{{m.(inNamespace).GetNamespace(), ""}}, true
	case *tenurev1.RetryTasksRequest, *tenurev1.KillTasksRequest, *tenurev1.PurgeTasksRequest:
		return filterTargets(m.(filtered).GetFilter()), true
	case *tenurev1.SubmitBatchRequest:
		return each(m.GetRequests(), func(r *tenurev1.SubmitRequest) Target { return Target{ns(r.GetNamespace()), r.GetQueue()} }), true
	case *tenurev1.RelayRequest:
		return each(m.GetRows(), func(r *tenurev1.OutboxRow) Target {
			return Target{ns(r.GetRequest().GetNamespace()), r.GetRequest().GetQueue()}
		}), true
	case *tenurev1.ReleaseRequest:
		return each(m.GetRows(), func(r *tenurev1.OutboxHold) Target { return Target{ns(r.GetNamespace()), r.GetQueue()} }), true
	case *tenurev1.LeaseRequest:
		if qs := m.GetQueues(); len(qs) > 0 {
			return each(qs, func(q string) Target { return Target{ns(m.GetNamespace()), q} }), true
		}
		return []Target{{ns(m.GetNamespace()), m.GetQueue()}}, true
	case *tenurev1.WatchEventsRequest:
		return []Target{{m.GetFilter().GetNamespace(), m.GetFilter().GetQueue()}}, true
	}
	return nil, false
}

// each is the target of each of xs.
func each[T any](xs []T, target func(T) Target) []Target {
	out := make([]Target, len(xs))
	for i, x := range xs {
		out[i] = target(x)
	}
	return out
}

// filterTargets is what a bulk action's filter selects from.
func filterTargets(f *tenurev1.TaskFilter) []Target {
	if f.GetAll() {
		return []Target{{}}
	}
	return []Target{{f.GetNamespace(), f.GetQueue()}}
}

// short is a call's name without the package: TaskService/Submit.
func short(call string) string { return strings.TrimPrefix(call, "/tenure.v1.") }

// roleList is "admin", "admin or worker", "admin, submitter or reader".
func roleList(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
