package auth

import (
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestDecide: the refusals name the role, namespace or queue missing; the
// defaults of unset namespaces apply; task-addressed calls are left to
// CheckTask unless the token's scope is everything. (The whole matrix,
// over the API, is internal/auth/authtest's.)
func TestDecide(t *testing.T) {
	t.Parallel()
	sub := &Principal{Name: "ci", Role: Submitter, Namespaces: []string{"default", "web"}}
	wrk := &Principal{Name: "mailer", Role: Worker, Namespaces: []string{"default"}, Queues: []string{"emails"}}
	rdr := &Principal{Name: "grafana", Role: Reader, Namespaces: []string{"*"}}
	adm := &Principal{Name: "ops", Role: Admin, Namespaces: []string{"billing"}}
	anyQ := &Principal{Name: "all", Role: Worker, Namespaces: []string{"*"}, Queues: []string{"*"}}
	for _, tc := range []struct {
		p         *Principal
		call      string
		msg       any
		checkTask bool
		want      string // "" allowed, else a part of the refusal
	}{
		{sub, tenurev1connect.TaskServiceSubmitProcedure, &tenurev1.SubmitRequest{Queue: "q"}, false, ""},
		{sub, tenurev1connect.TaskServiceSubmitProcedure, &tenurev1.SubmitRequest{Namespace: "web", Queue: "q"}, false, ""},
		{sub, tenurev1connect.TaskServiceSubmitProcedure, &tenurev1.SubmitRequest{Namespace: "billing", Queue: "q"}, false,
			`token "ci" (role submitter) may not call TaskService/Submit in namespace "billing": its namespaces: default, web`},
		{sub, tenurev1connect.TaskServiceSubmitBatchProcedure, &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "q"}, {Namespace: "x", Queue: "q"}}}, false,
			`in namespace "x"`},
		{sub, tenurev1connect.TaskServiceKillTaskProcedure, &tenurev1.KillTaskRequest{TaskId: "t"}, false,
			`token "ci" (role submitter) may not call TaskService/KillTask: it needs role admin`},
		{sub, tenurev1connect.TaskServiceListTasksProcedure, &tenurev1.ListTasksRequest{}, false,
			"may not call TaskService/ListTasks across every namespace: that needs namespace *"},
		{sub, tenurev1connect.TaskServiceListTasksProcedure, &tenurev1.ListTasksRequest{Namespace: "web"}, false, ""},
		{sub, tenurev1connect.TaskServiceGetTaskProcedure, &tenurev1.GetTaskRequest{TaskId: "t"}, true, ""},
		{sub, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Queue: "emails"}, false, "it needs role admin or worker"},
		{wrk, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Queue: "emails"}, false, ""},
		{wrk, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Queue: "sms"}, false,
			`token "mailer" (role worker) may not call WorkerService/Lease on queue "sms" of namespace "default": its namespaces: default; its queues: emails`},
		{wrk, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Namespace: "web", Queue: "emails"}, false, `in namespace "web"`},
		{wrk, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Queues: []string{"emails"}}, false, ""},
		{wrk, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Queues: []string{"emails", "sms"}}, false,
			`may not call WorkerService/Lease on queue "sms" of namespace "default"`},
		{wrk, tenurev1connect.WorkerServiceCompleteBatchProcedure, &tenurev1.CompleteBatchRequest{Lease: &tenurev1.LeaseRequest{Queues: []string{"sms", "emails"}}}, false,
			`the lease this CompleteBatch carries is refused`},
		{anyQ, tenurev1connect.WorkerServiceLeaseProcedure, &tenurev1.LeaseRequest{Namespace: "web", Queues: []string{"a", "b"}}, false, ""},
		{wrk, tenurev1connect.WorkerServiceHeartbeatProcedure, &tenurev1.HeartbeatRequest{}, true, ""},
		{anyQ, tenurev1connect.WorkerServiceHeartbeatProcedure, &tenurev1.HeartbeatRequest{}, false, ""},
		{wrk, tenurev1connect.TaskServiceListTasksProcedure, &tenurev1.ListTasksRequest{Namespace: "default"}, false, "it needs role admin, submitter or reader"},
		{rdr, tenurev1connect.TaskServiceListTasksProcedure, &tenurev1.ListTasksRequest{}, false, ""},
		{rdr, tenurev1connect.TaskServiceGetTaskProcedure, &tenurev1.GetTaskRequest{}, false, ""},
		{rdr, MetricsCall, nil, false, ""},
		{rdr, PprofCall, nil, false, "it needs role admin"},
		{rdr, tenurev1connect.QueueServicePauseQueueProcedure, &tenurev1.PauseQueueRequest{Queue: "q"}, false, "it needs role admin"},
		{adm, tenurev1connect.QueueServicePauseQueueProcedure, &tenurev1.PauseQueueRequest{Queue: "q"}, false, `in namespace "default": its namespaces: billing`},
		{adm, tenurev1connect.QueueServicePauseQueueProcedure, &tenurev1.PauseQueueRequest{Namespace: "billing", Queue: "q"}, false, ""},
		{adm, tenurev1connect.TaskServiceKillTasksProcedure, &tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{All: true}}, false, "across every namespace"},
		{adm, tenurev1connect.TaskServiceKillTasksProcedure, &tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{Namespace: "billing"}}, false, ""},
		{adm, tenurev1connect.AdminServiceSnapshotProcedure, &tenurev1.SnapshotRequest{}, false, "it covers every namespace and needs namespace *; its namespaces: billing"},
		{adm, MetricsCall, nil, false, "it covers every namespace"},
		{adm, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", nil, false, ""},
		{rdr, "/tenure.v1.TaskService/NoSuchCall", nil, false, "no token may (it is not in the authorisation table)"},
		{adm, tenurev1connect.TaskServiceSubmitProcedure, &tenurev1.GetTaskRequest{}, false, "the authorisation table does not know that request"},
	} {
		checkTask, err := Decide(tc.p, tc.call, tc.msg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s calls %s with %v: refused: %v", tc.p, tc.call, tc.msg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s calls %s with %v: %v, want a refusal with %q", tc.p, tc.call, tc.msg, err, tc.want)
		case err == nil && checkTask != tc.checkTask:
			t.Errorf("%s calls %s: checkTask = %v, want %v", tc.p, tc.call, checkTask, tc.checkTask)
		}
	}
}

func TestCheckTask(t *testing.T) {
	t.Parallel()
	wrk := &Principal{Name: "mailer", Role: Worker, Namespaces: []string{"default"}, Queues: []string{"emails"}}
	sub := &Principal{Name: "ci", Role: Submitter, Namespaces: []string{"default"}}
	call := tenurev1connect.WorkerServiceCommitProcedure
	if err := CheckTask(wrk, call, "t1", Target{"default", "emails"}); err != nil {
		t.Errorf("its own queue: %v", err)
	}
	if err := CheckTask(sub, call, "t1", Target{"default", "anything"}); err != nil {
		t.Errorf("a submitter, any queue of its namespace: %v", err)
	}
	for _, tc := range []struct {
		p    *Principal
		t    Target
		want string
	}{
		{wrk, Target{"default", "sms"}, `token "mailer" (role worker) may not call WorkerService/Commit on task t1 (queue "sms" of namespace "default"): queue "sms" is not one of its queues; its namespaces: default; its queues: emails`},
		{wrk, Target{"web", "emails"}, `on task t1 (queue "emails" of namespace "web"): namespace "web" is not one of its namespaces`},
		{sub, Target{"web", "emails"}, `namespace "web" is not one of its namespaces; its namespaces: default`},
	} {
		if err := CheckTask(tc.p, call, "t1", tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s on %+v: %v, want %q", tc.p, tc.t, err, tc.want)
		}
	}
}

// TestPermissions: every call of the table is listed in order; a call is
// allowed exactly when Decide would allow the role (and, for a call over
// the whole server, the namespaces), and a refusal carries Decide's reason.
func TestPermissions(t *testing.T) {
	t.Parallel()
	rdr := &Principal{Name: "grafana", Role: Reader, Namespaces: []string{"web"}}
	perms := Permissions(rdr)
	if len(perms) != len(Rules) {
		t.Fatalf("%d permissions for %d rules", len(perms), len(Rules))
	}
	byCall := map[string]Permission{}
	for i, p := range perms {
		if p.Call != Rules[i].Call {
			t.Fatalf("permission %d is %s, rule %s", i, p.Call, Rules[i].Call)
		}
		if p.Allowed == (p.Reason != "") {
			t.Errorf("%s: allowed %v with reason %q", p.Call, p.Allowed, p.Reason)
		}
		byCall[p.Call] = p
	}
	for call, want := range map[string]string{
		tenurev1connect.TaskServiceGetTaskProcedure:        "",
		tenurev1connect.QueueServiceListQueuesProcedure:    "",
		tenurev1connect.AdminServiceWhoAmIProcedure:        "",
		tenurev1connect.TaskServiceRetryTaskProcedure:      `token "grafana" (role reader) may not call TaskService/RetryTask: it needs role admin`,
		tenurev1connect.QueueServicePauseQueueProcedure:    "it needs role admin",
		tenurev1connect.AdminServiceGetClusterProcedure:    "it covers every namespace and needs namespace *; its namespaces: web",
		tenurev1connect.WorkerServiceLeaseProcedure:        "it needs role admin or worker",
		tenurev1connect.TaskServiceSubmitProcedure:         "it needs role admin or submitter",
		tenurev1connect.TaskServicePurgeTasksProcedure:     "it needs role admin",
		tenurev1connect.TaskServiceGetTaskHistoryProcedure: "",
	} {
		p := byCall[call]
		if want == "" && !p.Allowed || want != "" && (p.Allowed || !strings.Contains(p.Reason, want)) {
			t.Errorf("%s: allowed %v, reason %q; want %q", call, p.Allowed, p.Reason, want)
		}
	}
	adm := &Principal{Name: "ops", Role: Admin, Namespaces: []string{"*"}}
	for _, p := range Permissions(adm) {
		if !p.Allowed {
			t.Errorf("an admin of namespace * may not call %s: %s", p.Call, p.Reason)
		}
	}
}
