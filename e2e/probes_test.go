package e2e

// The probes and tools pointed at the real binary: the gRPC health service
// and server reflection over unencrypted HTTP/2 (as grpcurl and Kubernetes
// speak them), /healthz and /readyz, and --pprof.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tenurehq/tenure/sdk/client"
)

// TestServerProbes: a ready `tenure server` answers SERVING to the gRPC
// health service, lists its services over reflection, answers 200 on
// /healthz and /readyz, and serves /debug/pprof/ with --pprof only.
func TestServerProbes(t *testing.T) {
	t.Parallel()
	withPprof := startServerProc(t, t.TempDir(), "--pprof")
	without := startServerProc(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()

	h2c := client.DefaultHTTPClient(client.ProtocolGRPC) // unencrypted HTTP/2 only
	defer h2c.CloseIdleConnections()
	res, err := grpchealth.NewClient(h2c, withPprof.url(), connect.WithGRPC()).Check(ctx, &grpchealth.CheckRequest{})
	if err != nil || res.Status != grpchealth.StatusServing {
		t.Errorf("grpc.health.v1.Health/Check: %v, %v; want SERVING", res, err)
	}
	stream := grpcreflect.NewClient(h2c, withPprof.url(), connect.WithGRPC()).NewStream(ctx)
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("reflection: ListServices: %v", err)
	}
	stream.Close()
	for _, want := range []string{"tenure.v1.TaskService", "tenure.v1.WorkerService", "tenure.v1.AdminService", "tenure.v1.QueueService", "tenure.v1.ScheduleService", "grpc.health.v1.Health"} {
		if !slices.ContainsFunc(names, func(n protoreflect.FullName) bool { return string(n) == want }) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}

	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		srv      *serverProc
		path     string
		code     int
		contains string
	}{
		{withPprof, "/healthz", http.StatusOK, "ok"},
		{withPprof, "/readyz", http.StatusOK, "ready"},
		{withPprof, "/debug/pprof/cmdline", http.StatusOK, "--pprof"},
		{withPprof, "/debug/pprof/", http.StatusOK, "goroutine"},
		{without, "/debug/pprof/", http.StatusNotFound, ""},
		{without, "/debug/pprof/cmdline", http.StatusNotFound, ""},
	} {
		code, body, err := httpGet(ctx, hc, tc.srv.url()+tc.path, "")
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s (server started with %q) = %d %.200q, want %d with %q", tc.path, tc.srv.cmd.Args[1:], code, body, tc.code, tc.contains)
		}
	}
}
