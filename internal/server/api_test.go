package server_test

// The API served by a node over HTTP, and what its tests share: a node
// behind the handler, JSON posts, submits, leases and counts.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

const apiCallTimeout = 10 * time.Second

// apiEnv is one in-process node behind a real HTTP server.
type apiEnv struct {
	url    string
	hc     *http.Client
	tasks  tenurev1connect.TaskServiceClient
	worker tenurev1connect.WorkerServiceClient
}

func newAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	return newAPIEnvWith(t, node.Config{})
}

// newAPIEnvClock is newAPIEnv with the node and the API on clk (nil: the
// real clock).
func newAPIEnvClock(t *testing.T, clk clock.Clock) *apiEnv {
	return newAPIEnvWith(t, node.Config{Coordinator: coordinator.Config{Clock: clk}})
}

// newAPIEnvWith is newAPIEnv on a node configured by cfg (its DataDir is
// set here), the API on the node's clock.
func newAPIEnvWith(t *testing.T, cfg node.Config) *apiEnv {
	t.Helper()
	cfg.DataDir = t.TempDir()
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("node.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("node.Close: %v", err)
		}
	})
	api := server.New(n.Router(), server.Options{Clock: cfg.Coordinator.Clock})
	ts := httptest.NewServer(api.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(api.Drain) // runs first: long-polls must not hold ts.Close
	hc := ts.Client()
	return &apiEnv{
		url:    ts.URL,
		hc:     hc,
		tasks:  tenurev1connect.NewTaskServiceClient(hc, ts.URL),
		worker: tenurev1connect.NewWorkerServiceClient(hc, ts.URL),
	}
}

func apiCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	t.Cleanup(cancel)
	return ctx
}

// postJSON sends body to procedure as a Connect unary JSON request and
// returns the HTTP status and the raw answer.
func (e *apiEnv) postJSON(t *testing.T, procedure, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(apiCtx(t), http.MethodPost, e.url+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return send(t, e.hc, req)
}

// send sends req and returns the HTTP status and the whole answer.
func send(t *testing.T, hc *http.Client, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	return resp.StatusCode, out
}

// connectErrorBody is the JSON body of a Connect unary error.
type connectErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiEnv) submit(t *testing.T, req *tenurev1.SubmitRequest) *tenurev1.Task {
	t.Helper()
	resp, err := e.tasks.Submit(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Submit(%v): %v", req, err)
	}
	return resp.Msg.GetTask()
}

// leaseOne long-polls for one task of queue; nil if none came.
func (e *apiEnv) leaseOne(t *testing.T, worker, queue string) *tenurev1.LeasedTask {
	t.Helper()
	resp, err := e.worker.Lease(apiCtx(t), connect.NewRequest(&tenurev1.LeaseRequest{
		WorkerId: worker, Queue: queue, Wait: durationpb.New(5 * time.Second),
	}))
	if err != nil {
		t.Fatalf("Lease(%s): %v", queue, err)
	}
	if len(resp.Msg.GetTasks()) == 0 {
		return nil
	}
	return resp.Msg.GetTasks()[0]
}

func (e *apiEnv) countQueue(t *testing.T, queue string) int {
	t.Helper()
	n := 0
	token := ""
	for {
		resp, err := e.tasks.ListTasks(apiCtx(t), connect.NewRequest(&tenurev1.ListTasksRequest{Queue: queue, PageSize: 1000, PageToken: token}))
		if err != nil {
			t.Fatalf("ListTasks(%s): %v", queue, err)
		}
		n += len(resp.Msg.GetTasks())
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return n
		}
	}
}

const (
	submitProc      = tenurev1connect.TaskServiceSubmitProcedure
	submitBatchProc = tenurev1connect.TaskServiceSubmitBatchProcedure
	getProc         = tenurev1connect.TaskServiceGetTaskProcedure
	listProc        = tenurev1connect.TaskServiceListTasksProcedure
	killProc        = tenurev1connect.TaskServiceKillTaskProcedure
	historyProc     = tenurev1connect.TaskServiceGetTaskHistoryProcedure
	leaseProc       = tenurev1connect.WorkerServiceLeaseProcedure
	commitProc      = tenurev1connect.WorkerServiceCommitProcedure
	heartbeatProc   = tenurev1connect.WorkerServiceHeartbeatProcedure
)
