package server_test

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
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
	tok, st := authtest.Store(t)
	mx, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := apitest.OpenNode(t)
	opts.Snapshots, opts.Events, opts.Auth, opts.Metrics = n, n, st, mx
	url, hc := h2cServer(t, server.New(n.Router(), opts))
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

// authClients starts authServer and returns its task and worker clients.
func authClients(t *testing.T) (tenurev1connect.TaskServiceClient, tenurev1connect.WorkerServiceClient, authtest.Tokens) {
	t.Helper()
	url, hc, tok := authServer(t)
	return tenurev1connect.NewTaskServiceClient(hc, url), tenurev1connect.NewWorkerServiceClient(hc, url), tok
}

// with sets the bearer token of request r.
func with(token string, r interface{ Header() http.Header }) {
	r.Header().Set("Authorization", "Bearer "+token)
}

// TestAuthCompleteBatchPerItem: an item of a CompleteBatch outside the
// worker's queues is refused on its own; the others are completed.
func TestAuthCompleteBatchPerItem(t *testing.T) {
	t.Parallel()
	tasks, workers, tok := authClients(t)
	var items []*tenurev1.CompleteRequest
	for _, q := range []string{authtest.InQueue, authtest.OtherQueue} {
		l := submitAndLease(t, tasks, workers, tok.Setup, q)
		items = append(items, &tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()})
	}
	cr := connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: items})
	with(tok.Scoped[auth.Worker], cr)
	resp, err := workers.CompleteBatch(apiCtx(t), cr)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Msg.GetFailed()
	if len(r) != 1 || r[0].GetIndex() != 1 || r[0].GetCode() != "permission_denied" || !strings.Contains(r[0].GetMessage(), `queue "q-other" is not one of its queues`) {
		t.Fatalf("CompleteBatch of a task of its queue and one of another: %v", r)
	}
	gr := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: items[0].TaskId})
	with(tok.Setup, gr)
	if got, err := tasks.GetTask(apiCtx(t), gr); err != nil || got.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Errorf("the task of its queue: %v, %v; want COMPLETED", got, err)
	}
}

// TestAuthCompleteBatchLease: the lease a CompleteBatch carries is decided
// as a Lease call: out of the worker's queues it refuses the whole call,
// before any item is applied; in them, the call completes and leases.
func TestAuthCompleteBatchLease(t *testing.T) {
	t.Parallel()
	tasks, workers, tok := authClients(t)
	br := connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
		{Namespace: authtest.InNamespace, Queue: authtest.InQueue}, {Namespace: authtest.InNamespace, Queue: authtest.InQueue},
	}})
	with(tok.Setup, br)
	if _, err := tasks.SubmitBatch(apiCtx(t), br); err != nil {
		t.Fatal(err)
	}
	lr := connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: authtest.InNamespace, Queue: authtest.InQueue, MaxTasks: 1})
	with(tok.Scoped[auth.Worker], lr)
	l, err := workers.Lease(apiCtx(t), lr)
	if err != nil || len(l.Msg.GetTasks()) != 1 {
		t.Fatalf("lease: %v %v", l, err)
	}
	first := l.Msg.GetTasks()[0]
	items := []*tenurev1.CompleteRequest{{TaskId: first.GetTaskId(), LeaseId: first.GetLeaseId()}}
	state := func() tenurev1.TaskState {
		gr := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: first.GetTaskId()})
		with(tok.Setup, gr)
		got, err := tasks.GetTask(apiCtx(t), gr)
		if err != nil {
			t.Fatal(err)
		}
		return got.Msg.GetTask().GetState()
	}

	cr := connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: items,
		Lease: &tenurev1.LeaseRequest{WorkerId: "w", Namespace: authtest.InNamespace, Queue: authtest.OtherQueue, MaxTasks: 1}})
	with(tok.Scoped[auth.Worker], cr)
	_, err = workers.CompleteBatch(apiCtx(t), cr)
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `lease this CompleteBatch carries is refused: token "worker-scoped" (role worker) may not call WorkerService/Lease on queue "q-other"`) {
		t.Fatalf("CompleteBatch leasing from another queue: %v, want permission denied naming the queue", err)
	}
	if s := state(); s != tenurev1.TaskState_TASK_STATE_LEASED {
		t.Fatalf("the item after the refused call: %v, want LEASED (nothing applied)", s)
	}

	cr = connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: items,
		Lease: &tenurev1.LeaseRequest{WorkerId: "w", Namespace: authtest.InNamespace, Queue: authtest.InQueue, MaxTasks: 1}})
	with(tok.Scoped[auth.Worker], cr)
	resp, err := workers.CompleteBatch(apiCtx(t), cr)
	if err != nil || len(resp.Msg.GetFailed()) != 0 || len(resp.Msg.GetLeased()) != 1 ||
		resp.Msg.GetLeased()[0].GetTaskId() == first.GetTaskId() {
		t.Fatalf("CompleteBatch leasing from its queue: %v, %v; want the item completed and the other task leased", resp, err)
	}
	if s := state(); s != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Errorf("the item: %v, want COMPLETED", s)
	}
}

// TestAuthRefusalTrailers: a call without a token is refused with
// WWW-Authenticate over Connect, and over gRPC without it, where it would
// be an HTTP/2 trailer that net/http drops with a log line per call
// ("ignoring invalid trailer"): the server's error log stays empty.
func TestAuthRefusalTrailers(t *testing.T) {
	t.Parallel()
	_, st := authtest.Store(t)
	n := apitest.OpenNode(t)
	var errLog strings.Builder
	var mu sync.Mutex
	ts := httptest.NewUnstartedServer(server.New(n.Router(), server.Options{Snapshots: n, Auth: st}).Handler())
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Config.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return errLog.Write(p)
	}), "", 0)
	ts.Start()
	t.Cleanup(ts.Close)
	hc := client.DefaultHTTPClient(client.ProtocolGRPC)
	t.Cleanup(hc.CloseIdleConnections)

	for _, tc := range []struct {
		protocol string
		opts     []connect.ClientOption
		header   string
	}{
		{"gRPC", []connect.ClientOption{connect.WithGRPC()}, ""},
		{"Connect", nil, `Bearer realm="tenure"`},
	} {
		for range 3 {
			_, err := tenurev1connect.NewTaskServiceClient(hc, ts.URL, tc.opts...).GetTask(apiCtx(t), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: "x"}))
			ce := new(connect.Error)
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || ce.Meta().Get("WWW-Authenticate") != tc.header {
				t.Fatalf("%s call without a token: %v (WWW-Authenticate %q); want unauthenticated with %q", tc.protocol, err, ce.Meta().Get("WWW-Authenticate"), tc.header)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if errLog.Len() > 0 {
		t.Errorf("the HTTP server logged on refused calls:\n%s", errLog.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAuthSpawn: a worker spawns within its scope only: a commit that
// spawns a task in another queue is refused, and commits nothing.
func TestAuthSpawn(t *testing.T) {
	t.Parallel()
	tasks, workers, tok := authClients(t)
	lt := submitAndLease(t, tasks, workers, tok.Setup, authtest.InQueue)
	commit := func(q string) error {
		cr := connect.NewRequest(&tenurev1.CommitRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(), Spawn: []*tenurev1.SubmitRequest{{Queue: q}}})
		with(tok.Scoped[auth.Worker], cr)
		_, err := workers.Commit(apiCtx(t), cr)
		return err
	}
	if err := commit(authtest.OtherQueue); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "spawning a task") {
		t.Fatalf("a spawn into another queue: %v", err)
	}
	if err := commit(authtest.InQueue); err != nil {
		t.Fatalf("a spawn into its queue: %v", err)
	}
}

// submitAndLease submits a task to queue q of authtest.InNamespace and
// leases it, both with token.
func submitAndLease(t *testing.T, tasks tenurev1connect.TaskServiceClient, workers tenurev1connect.WorkerServiceClient, token, q string) *tenurev1.LeasedTask {
	t.Helper()
	sr := connect.NewRequest(&tenurev1.SubmitRequest{Namespace: authtest.InNamespace, Queue: q})
	with(token, sr)
	if _, err := tasks.Submit(apiCtx(t), sr); err != nil {
		t.Fatal(err)
	}
	lr := connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: authtest.InNamespace, Queue: q, MaxTasks: 1})
	with(token, lr)
	l, err := workers.Lease(apiCtx(t), lr)
	if err != nil || len(l.Msg.GetTasks()) != 1 {
		t.Fatalf("lease of %s: %v %v", q, l, err)
	}
	return l.Msg.GetTasks()[0]
}

// TestNodeCallerMayOnlyWait: with tokens on, a call a node forwards for
// itself (route.NodeCaller: a partition's watcher of remote edges) is
// allowed to wait for a task, in any namespace, and nothing else; a
// forwarded call that names no caller is refused.
func TestNodeCallerMayOnlyWait(t *testing.T) {
	url, hc, _ := authServerWith(t, server.Options{Nodes: nodes{}})
	tasks := tenurev1connect.NewTaskServiceClient(hc, url)
	forwarded := func(who string, h http.Header) {
		h.Set(route.ForwardedHeader, "node-7")
		h.Set("Tenure-Forwarded-Principal", who)
	}
	wait := connect.NewRequest(&tenurev1.WaitTaskRequest{TaskId: "01m8tqx82868z2pcan3c2dfnvx"})
	forwarded(route.NodeCaller, wait.Header())
	if _, err := tasks.WaitTask(apiCtx(t), wait); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a node's own WaitTask: %v, want not_found (allowed, no such task)", err)
	}
	get := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: "01m8tqx82868z2pcan3c2dfnvx"})
	forwarded(route.NodeCaller, get.Header())
	if _, err := tasks.GetTask(apiCtx(t), get); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a node's own GetTask: %v, want unauthenticated", err)
	}
	wait = connect.NewRequest(&tenurev1.WaitTaskRequest{TaskId: "01m8tqx82868z2pcan3c2dfnvx"})
	forwarded("", wait.Header())
	if _, err := tasks.WaitTask(apiCtx(t), wait); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a forwarded WaitTask naming no caller: %v, want unauthenticated", err)
	}
}
