package metrics

import (
	"context"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// requestKey is one label pair of tenure_request_duration_seconds; code 0
// stands for ok.
type requestKey struct {
	procedure string
	code      connect.Code
}

// Interceptor times every API call into tenure_request_duration_seconds,
// by procedure and code (server.Metrics).
func (m *Metrics) Interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := m.clock.Now()
			resp, err := next(ctx, req)
			k := requestKey{procedure: req.Spec().Procedure}
			if err != nil {
				k.code = connect.CodeOf(err)
			}
			o, ok := m.requestSeries.load(k)
			if !ok {
				o = m.requestSeries.insert(k, m.newRequestSeries)
			}
			o.Observe(m.clock.Now().Sub(start).Seconds())
			return resp, err
		}
	})
}

func (m *Metrics) newRequestSeries(k requestKey) prometheus.Observer {
	code := "ok"
	if k.code != 0 {
		code = k.code.String()
	}
	return m.requests.WithLabelValues(k.procedure, code)
}

// ForwardInterceptor counts every request this node forwards to another
// into tenure_cluster_forwarded_requests_total (member.Config's
// PeerInterceptors).
func (m *Metrics) ForwardInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			p := req.Spec().Procedure
			c, ok := m.forwardedSeries.load(p)
			if !ok {
				c = m.forwardedSeries.insert(p, m.newForwardedSeries)
			}
			c.Inc()
			return next(ctx, req)
		}
	})
}

func (m *Metrics) newForwardedSeries(procedure string) prometheus.Counter {
	return m.forwarded.WithLabelValues(procedure)
}

// LimitHit counts one hit of the server's limit named into
// tenure_limit_hits_total (server.Metrics). The names are a fixed set
// (server.LimitConnections, ...).
func (m *Metrics) LimitHit(limit string) {
	m.limitHits.WithLabelValues(limit).Inc()
}
