package server_test

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/server"
)

// authServer serves a node's API with the tokens of authtest.TokenFile
// and metrics; it returns the URL, an h2c client and the tokens.
func authServer(t *testing.T) (string, *http.Client, authtest.Tokens) {
	t.Helper()
	return authServerWith(t, server.Options{})
}

// authServerWith is authServer with the other options of opts.
func authServerWith(t *testing.T, opts server.Options) (string, *http.Client, authtest.Tokens) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.jsonl")
	tok := authtest.TokenFile(t, file)
	st, err := auth.Open(file, auth.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mx, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := apitest.OpenNode(t)
	opts.Snapshots, opts.Auth, opts.Metrics = n, st, mx
	url, hc := h2cServer(t, server.New(n.Router(), opts).Handler())
	return url, hc, tok
}

// getWith answers GET url with token (none if empty): status, body and
// the WWW-Authenticate header.
func getWith(t *testing.T, hc *http.Client, url, token string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(apiCtx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header.Get("WWW-Authenticate")
}

// TestAuthLeavesProbesOpen: with tokens on, the probes answer without
// one; /metrics needs a reader (or admin) token of namespace *, and counts
// the refusals.
func TestAuthLeavesProbesOpen(t *testing.T) {
	t.Parallel()
	url, hc, tok := authServer(t)
	checkProbes(t, hc, url, http.StatusOK, "ready", "with tokens on, without one")
	checkHealth(t, grpchealth.NewClient(hc, url, connect.WithGRPC()), grpchealth.StatusServing, "with tokens on, without one")

	code, body, challenge := getWith(t, hc, url+"/metrics", "")
	if code != http.StatusUnauthorized || !strings.Contains(body, "unauthenticated: no token") || challenge != `Bearer realm="tenure"` {
		t.Errorf("GET /metrics without a token: %d %q, WWW-Authenticate %q", code, body, challenge)
	}
	code, body, _ = getWith(t, hc, url+"/metrics", tok.Scoped[auth.Reader])
	if code != http.StatusForbidden || !strings.Contains(body, "it covers every namespace and needs namespace *") {
		t.Errorf("GET /metrics with a reader token of one namespace: %d %q", code, body)
	}
	code, body, _ = getWith(t, hc, url+"/metrics", tok.Star[auth.Submitter])
	if code != http.StatusForbidden || !strings.Contains(body, "it needs role admin or reader") {
		t.Errorf("GET /metrics with a submitter token: %d %q", code, body)
	}
	code, body, _ = getWith(t, hc, url+"/metrics", tok.Star[auth.Reader])
	if code != http.StatusOK {
		t.Fatalf("GET /metrics with a reader token of namespace *: %d %q", code, body)
	}
	for reason, want := range map[string]string{"unauthenticated": "1", "permission_denied": "2"} {
		m := regexp.MustCompile(`tenure_auth_failures_total\{reason="` + reason + `"\} (\d+)`).FindStringSubmatch(body)
		if m == nil || m[1] != want {
			t.Errorf("tenure_auth_failures_total{reason=%q}: %v, want %s", reason, m, want)
		}
	}
}

// TestAuthCompleteBatchPerItem: an item of a CompleteBatch outside the
// worker's queues is refused on its own; the others are completed.
func TestAuthCompleteBatchPerItem(t *testing.T) {
	t.Parallel()
	url, hc, tok := authServer(t)
	tasks := tenurev1connect.NewTaskServiceClient(hc, url)
	workers := tenurev1connect.NewWorkerServiceClient(hc, url)
	with := func(token string, r interface{ Header() http.Header }) {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	var items []*tenurev1.CompleteRequest
	for _, q := range []string{authtest.InQueue, authtest.OtherQueue} {
		sr := connect.NewRequest(&tenurev1.SubmitRequest{Namespace: authtest.InNamespace, Queue: q})
		with(tok.Setup, sr)
		if _, err := tasks.Submit(apiCtx(t), sr); err != nil {
			t.Fatal(err)
		}
		lr := connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: authtest.InNamespace, Queue: q, MaxTasks: 1})
		with(tok.Setup, lr)
		l, err := workers.Lease(apiCtx(t), lr)
		if err != nil || len(l.Msg.GetTasks()) != 1 {
			t.Fatalf("lease of %s: %v %v", q, l, err)
		}
		items = append(items, &tenurev1.CompleteRequest{TaskId: l.Msg.GetTasks()[0].GetTaskId(), LeaseId: l.Msg.GetTasks()[0].GetLeaseId()})
	}
	cr := connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: items})
	with(tok.Scoped[auth.Worker], cr)
	resp, err := workers.CompleteBatch(apiCtx(t), cr)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Msg.GetResults()
	if len(r) != 2 || r[0].GetCode() != "" || r[1].GetCode() != "permission_denied" || !strings.Contains(r[1].GetMessage(), `queue "q-other" is not one of its queues`) {
		t.Fatalf("CompleteBatch of a task of its queue and one of another: %v", r)
	}
	gr := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: items[0].TaskId})
	with(tok.Setup, gr)
	if got, err := tasks.GetTask(apiCtx(t), gr); err != nil || got.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Errorf("the task of its queue: %v, %v; want COMPLETED", got, err)
	}
}
