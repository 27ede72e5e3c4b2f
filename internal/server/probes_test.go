package server_test

// What probes and tools point at a server: liveness and readiness over
// HTTP, the gRPC health service, gRPC server reflection (both over real
// unencrypted HTTP/2 with the gRPC protocol, as grpcurl and Kubernetes
// speak it) and the opt-in, loopback-only profiler.

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// h2cServer serves api as `tenure server` does and returns its URL and a
// client that speaks only unencrypted HTTP/2 to it, as gRPC tools do.
func h2cServer(t *testing.T, api *server.Server) (string, *http.Client) {
	t.Helper()
	hc := client.DefaultHTTPClient(client.ProtocolGRPC)
	t.Cleanup(hc.CloseIdleConnections)
	return apitest.Serve(t, api), hc
}

// get answers GET url's status and body.
func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(apiCtx(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, body := send(t, hc, req)
	return code, string(body)
}

// TestReflectionListsServices: a gRPC reflection client lists every
// service, and can fetch the descriptor of TaskService with its methods
// (what grpcurl's list and describe do).
func TestReflectionListsServices(t *testing.T) {
	t.Parallel()
	n := apitest.OpenNode(t)
	url, hc := h2cServer(t, server.New(n.Router(), server.Options{}))
	stream := grpcreflect.NewClient(hc, url, connect.WithGRPC()).NewStream(apiCtx(t))
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	got := make([]string, len(names))
	for i, nm := range names {
		got[i] = string(nm)
	}
	slices.Sort(got)
	want := []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"tenure.v1.AdminService",
		"tenure.v1.EventService",
		"tenure.v1.OutboxService",
		"tenure.v1.QueueService",
		"tenure.v1.ScheduleService",
		"tenure.v1.TaskService",
		"tenure.v1.WorkerService",
		"tenure.v1.WorkflowService",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ListServices = %v, want %v", got, want)
	}

	files, err := stream.FileContainingSymbol(protoreflect.FullName(tenurev1connect.TaskServiceName))
	if err != nil {
		t.Fatalf("FileContainingSymbol(%s): %v", tenurev1connect.TaskServiceName, err)
	}
	var methods []string
	for _, f := range files {
		for _, s := range f.GetService() {
			if f.GetPackage()+"."+s.GetName() == tenurev1connect.TaskServiceName {
				for _, m := range s.GetMethod() {
					methods = append(methods, m.GetName())
				}
			}
		}
	}
	if !slices.Contains(methods, "Submit") || !slices.Contains(methods, "GetTask") {
		t.Errorf("the descriptor of %s has methods %v, want Submit and GetTask among them", tenurev1connect.TaskServiceName, methods)
	}
	if _, err := stream.Close(); err != nil {
		t.Errorf("closing the reflection stream: %v", err)
	}

	// The client above falls back to v1alpha when v1 is missing; grpcurl
	// asks v1 and older tools v1alpha: each procedure must answer gRPC.
	for _, svc := range []string{grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName} {
		req, err := http.NewRequestWithContext(apiCtx(t), http.MethodPost, url+"/"+svc+"/ServerReflectionInfo", http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/grpc" || resp.Trailer.Get("Grpc-Status") != "0" {
			t.Errorf("%s with no request: HTTP %d, content type %q, grpc-status %q; want 200, application/grpc, 0",
				svc, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Trailer.Get("Grpc-Status"))
		}
	}
}

// checkHealth asks the gRPC health service about every name it answers
// for and fails unless each is want.
func checkHealth(t *testing.T, hc *grpchealth.Client, want grpchealth.Status, when string) {
	t.Helper()
	for _, svc := range []string{"", tenurev1connect.TaskServiceName, tenurev1connect.WorkerServiceName, tenurev1connect.AdminServiceName, tenurev1connect.QueueServiceName,
		tenurev1connect.ScheduleServiceName} {
		res, err := hc.Check(apiCtx(t), &grpchealth.CheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("%s: Health/Check(%q): %v", when, svc, err)
		}
		if res.Status != want {
			t.Errorf("%s: Health/Check(%q) = %v, want %v", when, svc, res.Status, want)
		}
	}
}

// checkProbes fails unless /healthz answers 200 and /readyz answers
// readyz with a body holding want.
func checkProbes(t *testing.T, hc *http.Client, url string, readyz int, want, when string) {
	t.Helper()
	if code, body := get(t, hc, url+"/healthz"); code != http.StatusOK {
		t.Errorf("%s: /healthz = %d %q, want 200: the process answers", when, code, body)
	}
	code, body := get(t, hc, url+"/readyz")
	if code != readyz || !strings.Contains(body, want) || strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Errorf("%s: /readyz = %d %q, want %d and one line with %q", when, code, body, readyz, want)
	}
}

// TestReadiness: a server over an embedded node still replaying its WAL
// (an Opening) is alive but not ready — /readyz 503 with the reason, the
// gRPC health service NOT_SERVING, API calls unavailable — and ready once
// the node is open; not ready again while the node does not serve, and
// after Drain.
func TestReadiness(t *testing.T) {
	t.Parallel()
	opening := server.NewOpening("the server is replaying its WAL")
	api := server.New(opening.Router(), server.Options{Snapshots: opening})
	url, hc := h2cServer(t, api)
	health := grpchealth.NewClient(hc, url, connect.WithGRPC())
	tasks := tenurev1connect.NewTaskServiceClient(hc, url, connect.WithGRPC())
	admin := tenurev1connect.NewAdminServiceClient(hc, url, connect.WithGRPC())

	checkHealth(t, health, grpchealth.StatusNotServing, "replaying")
	checkProbes(t, hc, url, http.StatusServiceUnavailable, "not ready: unavailable: the server is replaying its WAL", "replaying")
	_, err := tasks.Submit(apiCtx(t), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "replaying its WAL") {
		t.Errorf("replaying: Submit: %v, want unavailable naming the replay", err)
	}
	if _, err := admin.Snapshot(apiCtx(t), connect.NewRequest(&tenurev1.SnapshotRequest{})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("replaying: Snapshot: %v, want unavailable", err)
	}
	if _, err := health.Check(apiCtx(t), &grpchealth.CheckRequest{Service: "tenure.v1.NoSuchService"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Health/Check of an unknown service: %v, want not_found", err)
	}

	n := apitest.OpenNode(t)
	opening.Open(n, n, n)
	checkHealth(t, health, grpchealth.StatusServing, "open")
	checkProbes(t, hc, url, http.StatusOK, "ready", "open")
	if _, err := tasks.Submit(apiCtx(t), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q"})); err != nil {
		t.Errorf("open: Submit: %v", err)
	}
	if _, err := admin.Snapshot(apiCtx(t), connect.NewRequest(&tenurev1.SnapshotRequest{})); err != nil {
		t.Errorf("open: Snapshot: %v", err)
	}

	// Readiness follows the node: here one whose host stops serving
	// (reopening its log after a storage failure, or, in cluster mode, a
	// node outside its trust window: both are the router's Err).
	h := &switchHost{Node: n}
	opening.Open(h, n, n)
	checkProbes(t, hc, url, http.StatusOK, "ready", "host serving")
	h.err.Store(&errHostDown)
	checkHealth(t, health, grpchealth.StatusNotServing, "host down")
	checkProbes(t, hc, url, http.StatusServiceUnavailable, "not ready: unavailable: partition 0 is reopening its log after a storage failure (disk full)", "host down")
	h.err.Store(nil)
	checkHealth(t, health, grpchealth.StatusServing, "host back")

	api.Drain()
	checkHealth(t, health, grpchealth.StatusNotServing, "drained")
	checkProbes(t, hc, url, http.StatusServiceUnavailable, "not ready: shutting down", "drained")
}

var errHostDown = errors.New("unavailable: partition 0 is reopening its log after a storage failure\n(disk full)")

// switchHost is a node whose Err the test sets.
type switchHost struct {
	*node.Node
	err atomic.Pointer[error]
}

func (h *switchHost) Err() error {
	if e := h.err.Load(); e != nil {
		return *e
	}
	return h.Node.Err()
}

func (h *switchHost) Do(fn func(*coordinator.Coordinator) error) error {
	if err := h.Err(); err != nil {
		return err
	}
	return h.Node.Do(fn)
}

// TestPprof: /debug/pprof/ is 404 without Options.Pprof; with it, served
// to loopback clients and refused with 403 to any other.
func TestPprof(t *testing.T) {
	t.Parallel()
	n := apitest.OpenNode(t)

	off := httptest.NewServer(server.New(n.Router(), server.Options{}).Handler())
	t.Cleanup(off.Close)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine"} {
		if code, body := get(t, off.Client(), off.URL+path); code != http.StatusNotFound {
			t.Errorf("without Pprof: GET %s = %d %q, want 404", path, code, body)
		}
	}

	h := server.New(n.Router(), server.Options{Pprof: true}).Handler()
	on := httptest.NewServer(h)
	t.Cleanup(on.Close)
	for path, want := range map[string]string{
		"/debug/pprof/":                   "goroutine",
		"/debug/pprof/goroutine?debug=1":  "goroutine profile:",
		"/debug/pprof/cmdline":            "",
		"/debug/pprof/symbol":             "num_symbols",
		"/debug/pprof/heap?debug=1&gc=0":  "heap profile:",
		"/debug/pprof/allocs?debug=1&x=1": "heap profile:",
	} {
		code, body := get(t, on.Client(), on.URL+path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("with Pprof, from loopback: GET %s = %d %.200q, want 200 with %q", path, code, body, want)
		}
	}

	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:40000", http.StatusOK},
		{"127.8.9.10:40000", http.StatusOK},
		{"[::1]:40000", http.StatusOK},
		{"[::ffff:127.0.0.1]:40000", http.StatusOK},
		{"192.0.2.7:40000", http.StatusForbidden},
		{"10.0.0.1:40000", http.StatusForbidden},
		{"[2001:db8::1]:40000", http.StatusForbidden},
		{"[::ffff:192.0.2.7]:40000", http.StatusForbidden},
		{"0.0.0.0:40000", http.StatusForbidden},
		{"not an address", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET /debug/pprof/ from %s = %d, want %d", tc.remote, rec.Code, tc.want)
		}
		if body := rec.Body.String(); tc.want == http.StatusForbidden && (!strings.Contains(body, "only to loopback clients") || !strings.Contains(body, tc.remote)) {
			t.Errorf("403 for %s says %q, want the reason (loopback clients only) and the client's address", tc.remote, body)
		}
	}
}
