package server

import (
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/route"
)

// forwarded admits a request that says another node forwarded it
// (route.ForwardedHeader) only if Options.Nodes verifies that a node of
// this cluster did; it then marks the request forwarded, by that node, for
// the principal the node names. Anything else that carries the header is
// refused as unauthenticated: a client cannot pass its request off as
// forwarded, nor name a principal. Requests without it pass unchanged.
func (s *Server) forwarded(next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[http.CanonicalHeaderKey(route.ForwardedHeader)]; !ok {
			next.ServeHTTP(w, r)
			return
		}
		if s.opts.Nodes == nil {
			s.refuseForwarded(errs, w, r, fmt.Errorf("%s is set, but this server is not a node of a cluster: no node forwards to it; drop the header", route.ForwardedHeader))
			return
		}
		node, who, err := s.opts.Nodes.VerifyForwarded(r.Header, r.URL.Path)
		if err != nil {
			s.refuseForwarded(errs, w, r, err)
			return
		}
		ctx := route.WithForwarded(r.Context(), node)
		if who != "" {
			ctx = principal.With(ctx, who)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuseForwarded answers a request that falsely claims to be forwarded,
// in the protocol it came in, and logs it.
func (s *Server) refuseForwarded(errs *connect.ErrorWriter, w http.ResponseWriter, r *http.Request, err error) {
	s.opts.Logger.Warn("refused a request that claims to be forwarded by a node", "procedure", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	if errs.IsSupported(r) {
		_ = errs.Write(w, r, connect.NewError(connect.CodeUnauthenticated, err))
		return
	}
	http.Error(w, err.Error(), http.StatusUnauthorized)
}
