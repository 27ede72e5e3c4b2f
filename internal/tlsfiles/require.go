package tlsfiles

import (
	"errors"
	"net/http"
	"slices"

	"connectrpc.com/connect"
)

// RequireClientCert returns next behind a check that, with a client CA
// configured, answers a request over a connection without a client
// certificate (verified in the handshake) with unauthenticated, in the
// request's protocol (Connect, gRPC, gRPC-Web; 401 otherwise), saying
// that one is required; the paths open (probes) are answered all the same.
// Without a client CA it returns next.
func (r *Reloader) RequireClientCert(next http.Handler, open ...string) http.Handler {
	if r.cfg.ClientCAFile == "" {
		return next
	}
	ew := connect.NewErrorWriter()
	const msg = "this server requires a client certificate issued by its client CA: present one (tenure CLI: --cert-file and --key-file)"
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.TLS != nil && len(req.TLS.VerifiedChains) > 0 || slices.Contains(open, req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		if ew.IsSupported(req) {
			ew.Write(w, req, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
			return
		}
		http.Error(w, msg, http.StatusUnauthorized)
	})
}

// ConfigureServer makes srv serve r's files over TLS: its TLSConfig,
// HTTP/2 and HTTP/1.1 (as ALPN chooses, nothing unencrypted), and its
// handler behind RequireClientCert with the paths open. Serve it with
// srv.ServeTLS(ln, "", "").
func (r *Reloader) ConfigureServer(srv *http.Server, open ...string) {
	srv.TLSConfig = r.ServerConfig()
	srv.Handler = r.RequireClientCert(srv.Handler, open...)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
}
