package auth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The markers around the table of Rules in the security guide.
const (
	tableBegin = "<!-- auth-rules: the table of internal/auth/rules.go; go test ./internal/auth checks it -->"
	tableEnd   = "<!-- /auth-rules -->"
)

// renderTable is Rules as the security guide shows them.
func renderTable() string {
	var b strings.Builder
	b.WriteString("| call | admin | submitter | worker | reader | namespace and queue from |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range Rules {
		b.WriteString("| `" + short(r.Call) + "` |")
		for _, role := range Roles {
			if slices.Contains(r.Roles, role) {
				b.WriteString(" yes |")
			} else {
				b.WriteString(" no |")
			}
		}
		switch r.Scope {
		case ScopeRequest, ScopeTask:
			b.WriteString(" the " + r.Where + " |\n")
		case ScopeServer:
			b.WriteString(" the whole server: needs namespace `*` |\n")
		case ScopeNone:
			b.WriteString(" none: any valid token |\n")
		}
	}
	return b.String()
}

// securityGuide holds the table of who may call what.
const securityGuide = "docs/guides/security.md"

// TestGuideShowsTheRules: the security guide's table of who may call what
// is exactly Rules. On a mismatch the message holds the table to paste.
func TestGuideShowsTheRules(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(securityGuide)))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(guide), tableBegin+"\n")
	got, _, ok2 := strings.Cut(rest, tableEnd)
	if !ok || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q around the table of rules", securityGuide, tableBegin, tableEnd)
	}
	if want := renderTable(); got != want {
		t.Errorf("%s's table of rules is not internal/auth.Rules; paste this between the markers:\n%s", securityGuide, want)
	}
}

// TestEveryProcedureHasARule: every method of every tenure.v1 service is
// in Rules (a call missing from it would be refused to every token), and
// every rule names a method that exists or a call beside the API.
func TestEveryProcedureHasARule(t *testing.T) {
	t.Parallel()
	_ = tenurev1.File_tenure_v1_task_proto // registers the package's files
	procs := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("tenure.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			s := fd.Services().Get(i)
			for j := range s.Methods().Len() {
				procs["/"+string(s.FullName())+"/"+string(s.Methods().Get(j).Name())] = true
			}
		}
		return true
	})
	if len(procs) < 22 {
		t.Fatalf("found %d procedures of tenure.v1; the services did not register", len(procs))
	}
	for p := range procs {
		if ruleOf[p] == nil {
			t.Errorf("%s has no rule in Rules: every token is refused it", p)
		}
	}
	for _, r := range Rules {
		if strings.HasPrefix(r.Call, "/tenure.v1.") && !procs[r.Call] {
			t.Errorf("rule for %s: no such procedure", r.Call)
		}
		if len(r.Roles) == 0 || r.Scope == 0 || (r.Scope == ScopeRequest || r.Scope == ScopeTask) != (r.Where != "") {
			t.Errorf("rule for %s: roles %v, scope %d, where %q: a rule needs roles, a scope, and a where exactly for ScopeRequest and ScopeTask", r.Call, r.Roles, r.Scope, r.Where)
		}
	}
}

// TestRequestTargets: a request that names no namespace is about the
// default one when it is about one queue, task or workflow, and about
// every namespace when it lists or selects.
func TestRequestTargets(t *testing.T) {
	t.Parallel()
	one, every := []Target{{"default", "q"}}, []Target{{"", "q"}}
	for _, tc := range []struct {
		msg  any
		want []Target
	}{
		{&tenurev1.SubmitRequest{Queue: "q"}, one},
		{&tenurev1.GetQueueRequest{Queue: "q"}, one},
		{&tenurev1.PauseQueueRequest{Queue: "q"}, one},
		{&tenurev1.ResumeQueueRequest{Queue: "q"}, one},
		{&tenurev1.SetQueueLimitsRequest{Queue: "q"}, one},
		{&tenurev1.CreateScheduleRequest{Queue: "q"}, one},
		{&tenurev1.GetScheduleRequest{Queue: "q"}, one},
		{&tenurev1.UpdateScheduleRequest{Queue: "q"}, one},
		{&tenurev1.PauseScheduleRequest{Queue: "q"}, one},
		{&tenurev1.ResumeScheduleRequest{Queue: "q"}, one},
		{&tenurev1.DeleteScheduleRequest{Queue: "q"}, one},
		{&tenurev1.BackfillScheduleRequest{Queue: "q"}, one},
		{&tenurev1.LeaseRequest{Queue: "q"}, one},
		{&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "q"}, {Namespace: "n", Queue: "r"}}}, []Target{{"default", "q"}, {"n", "r"}}},
		{&tenurev1.LeaseRequest{Namespace: "n", Queues: []string{"q", "r"}}, []Target{{"n", "q"}, {"n", "r"}}},
		{&tenurev1.RelayRequest{Rows: []*tenurev1.OutboxRow{{Request: &tenurev1.SubmitRequest{Queue: "q"}}}}, one},
		{&tenurev1.ReleaseRequest{Rows: []*tenurev1.OutboxHold{{Queue: "q"}}}, one},
		{&tenurev1.ListTasksRequest{Queue: "q"}, every},
		{&tenurev1.ListSchedulesRequest{Queue: "q"}, every},
		{&tenurev1.WatchEventsRequest{Filter: &tenurev1.EventFilter{Queue: "q"}}, every},
		{&tenurev1.KillTasksRequest{Filter: &tenurev1.TaskFilter{Queue: "q"}}, every},
		{&tenurev1.GetWorkflowRequest{}, []Target{{"default", ""}}},
		{&tenurev1.CancelWorkflowRequest{}, []Target{{"default", ""}}},
		{&tenurev1.RetryWorkflowRequest{}, []Target{{"default", ""}}},
		{&tenurev1.WaitWorkflowRequest{}, []Target{{"default", ""}}},
		{&tenurev1.ListWorkflowsRequest{}, []Target{{"", ""}}},
		{&tenurev1.ListQueuesRequest{}, []Target{{"", ""}}},
		{&tenurev1.PurgeTasksRequest{Filter: &tenurev1.TaskFilter{All: true}}, []Target{{}}},
	} {
		got, ok := requestTargets(tc.msg)
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("%T: targets %v, %v; want %v", tc.msg, got, ok, tc.want)
		}
	}
}
