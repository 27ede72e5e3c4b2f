package server

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/auth"
)

// Metrics is what the API needs of package metrics: the handler of GET
// /metrics, an interceptor that times every call, and a counter of limit
// hits.
type Metrics interface {
	// Handler answers GET /metrics in the Prometheus text format.
	Handler() http.Handler
	// Interceptor observes every call of the API (its procedure, code and
	// duration). It runs outside every other interceptor.
	Interceptor() connect.Interceptor
	// AuthFailed counts a call refused for its token: code is
	// unauthenticated or permission_denied.
	AuthFailed(code connect.Code)
	// LimitHit counts one request refused or cut off, or one connection
	// closed, by the limit named (LimitConnections, ...).
	LimitHit(limit string)
}

// metricsOptions are the handler options that time every call, if the
// server has metrics.
func (s *Server) metricsOptions() []connect.HandlerOption {
	if s.opts.Metrics == nil {
		return nil
	}
	return []connect.HandlerOption{connect.WithInterceptors(s.opts.Metrics.Interceptor())}
}

// mountMetrics serves GET /metrics on mux, if the server has metrics.
func (s *Server) mountMetrics(mux *http.ServeMux) {
	if s.opts.Metrics == nil {
		return
	}
	mux.Handle(auth.MetricsCall, s.requireToken(auth.MetricsCall, s.opts.Metrics.Handler()))
}
