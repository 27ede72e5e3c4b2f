package server

import (
	"context"
	"net/http"
)

// ForwardedHeader marks a request that one tenure node forwarded to another
// in cluster mode; its value is the id of the forwarding node. A Backend
// serves a forwarded request from its own partitions only and never
// forwards it again, so a request crosses at most one hop even while two
// nodes disagree about who owns a partition.
const ForwardedHeader = "Tenure-Forwarded"

type forwardedKey struct{}

// Forwarded reports whether the request being served carries
// ForwardedHeader, and from which node. Any client can set the header; all
// it gains is that its request is not forwarded.
func Forwarded(ctx context.Context) (from string, ok bool) {
	from, ok = ctx.Value(forwardedKey{}).(string)
	return from, ok
}

// withForwarded puts the value of ForwardedHeader, when present, into the
// request's context, where Forwarded finds it.
func withForwarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Values(ForwardedHeader); len(v) > 0 {
			r = r.WithContext(context.WithValue(r.Context(), forwardedKey{}, v[0]))
		}
		next.ServeHTTP(w, r)
	})
}
