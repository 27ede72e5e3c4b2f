package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// tenureServices are the services of the API, every service of the
// tenure.v1 proto package (TestProbedServices).
var tenureServices = []string{
	tenurev1connect.TaskServiceName,
	tenurev1connect.WorkerServiceName,
	tenurev1connect.AdminServiceName,
	tenurev1connect.QueueServiceName,
	tenurev1connect.ScheduleServiceName,
	tenurev1connect.EventServiceName,
	tenurev1connect.OutboxServiceName,
	tenurev1connect.WorkflowServiceName,
}

// healthServices are the names the gRPC health service answers for: ""
// (the whole server) and each tenure service. All report the same
// readiness: one partition or all, they are served by the same node.
var healthServices = append([]string{""}, tenureServices...)

// reflectedServices are the services gRPC server reflection lists, so that
// grpcurl, Postman or evans can call tenure without its proto files.
var reflectedServices = append(slices.Clip(tenureServices),
	grpchealth.HealthV1ServiceName,
	grpcreflect.ReflectV1ServiceName,
	grpcreflect.ReflectV1AlphaServiceName,
)

// The paths of the HTTP probes. Orchestrators call them without
// credentials: a kubelet presents no client certificate.
const (
	HealthPath = "/healthz"
	ReadyPath  = "/readyz"
)

// mountProbes adds what tools and orchestrators point at a server, beside
// the API:
//
//   - GET /healthz, liveness: 200 while the process answers HTTP at all,
//     also while an embedded node replays its WAL (see Opening), so that a
//     liveness probe never kills a node for replaying a long log;
//   - GET /readyz, readiness: 200 only while the server can serve requests
//     now, else 503 and the reason on one line;
//   - grpc.health.v1.Health/Check, the same readiness for "" and each
//     tenure service (SERVING or NOT_SERVING);
//   - gRPC server reflection, v1 and v1alpha;
//   - with Options.Pprof, Go's profiler under /debug/pprof/, to loopback
//     clients only.
//
// With Options.Auth, reflection needs a valid token and pprof an admin
// token with namespace * (auth.go); the health endpoints stay open.
func (s *Server) mountProbes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET "+ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if err := s.ready(); err != nil {
			http.Error(w, "not ready: "+strings.ReplaceAll(err.Error(), "\n", " "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	small := connect.WithReadMaxBytes(int(s.otherCap.limit)) // also once decompressed
	mux.Handle(grpchealth.NewHandler(healthChecker{s}, small))
	reflector := grpcreflect.NewStaticReflector(reflectedServices...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, append(s.authOptions(), small)...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, append(s.authOptions(), small)...))
	if s.opts.Pprof {
		mux.Handle(auth.PprofCall, loopbackOnly(s.requireToken(auth.PprofCall, pprofHandler())))
	}
}

// ready is nil while the server can serve requests now: its partitions
// are open (an embedded node has replayed its WAL and is not reopening it
// after a storage failure; a cluster node is inside its trust window) and
// it is not shutting down.
func (s *Server) ready() error {
	if s.drain.Err() != nil {
		return errors.New("shutting down")
	}
	return s.r.Err()
}

// healthChecker answers the gRPC health service from the server's
// readiness. It does not implement grpchealth.Watcher: Watch answers
// unimplemented, and probes poll Check.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if !slices.Contains(healthServices, req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q: ask for \"\" (the whole server) or one of %s",
			req.Service, strings.Join(healthServices[1:], ", ")))
	}
	if h.s.ready() != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// pprofHandler serves net/http/pprof's pages under /debug/pprof/ (the
// package also registers them on http.DefaultServeMux, which tenure never
// serves).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // the index and every named profile
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// loopbackOnly refuses, with 403, a request whose peer address is not a
// loopback IP. The peer is the TCP connection's: headers such as
// X-Forwarded-For are not believed, so a proxy on the same host passes
// every client it forwards.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !ap.Addr().IsLoopback() {
			http.Error(w, fmt.Sprintf("forbidden: %s is served only to loopback clients and this request came from %s; "+
				"fetch it on the server's own host (127.0.0.1 or ::1), e.g. through an SSH tunnel", r.URL.Path, r.RemoteAddr), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
