package metrics

import (
	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// newAuthFailures registers tenure_auth_failures_total with both its
// reasons, at zero, so that an alert on it sees a series from the start.
func newAuthFailures(reg *prometheus.Registry) map[connect.Code]prometheus.Counter {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_auth_failures_total",
		Help: "Calls refused for their token: unauthenticated (no token, a malformed or unknown one) or permission_denied (its role or scope does not allow the call).",
	}, []string{"reason"})
	reg.MustRegister(v)
	out := map[connect.Code]prometheus.Counter{}
	for _, c := range []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied} {
		out[c] = v.WithLabelValues(c.String())
	}
	return out
}

// AuthFailed counts a call refused for its token, with code
// unauthenticated or permission_denied, into tenure_auth_failures_total
// (server.Metrics).
func (m *Metrics) AuthFailed(code connect.Code) {
	if c, ok := m.authFailures[code]; ok {
		c.Inc()
	}
}
