package server

import (
	"fmt"
	"net/http"

	"github.com/tenurehq/tenure/internal/route"
)

// mountNodeProbe answers other nodes' probes at route.NodeProbePath when
// the router serves a node of a cluster: with the node's id, to a request
// that the forwarded middleware verified as signed by a node of this
// cluster. The probe passes every check a forwarded request passes — the
// TLS handshake both ways (the peer CA, the client certificate), the
// cluster's signature — and the id shows that the advertised address
// reaches this node, not another. Anyone else gets 401.
func (s *Server) mountNodeProbe(mux *http.ServeMux) {
	id, ok := s.r.(route.NodeIdentity)
	if !ok {
		return
	}
	mux.HandleFunc("GET "+route.NodeProbePath, func(w http.ResponseWriter, r *http.Request) {
		if _, fw := route.Forwarded(r.Context()); !fw {
			http.Error(w, "only a node of this cluster may probe it: the request must be signed as forwarded by a node (docs/design/cluster.md)", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, id.NodeID())
	})
}
