package member

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/certgen/certtest"
	"github.com/tenurehq/tenure/internal/cluster/nodeauth"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/route"
)

// A probe reaches a node only as a forwarded request would: over TLS
// with the peer CA, signed, answered with the node's own id. What cannot
// pass by itself (a certificate, a refusal, another node or no tenure at
// the address) is a definite failure; what may pass (no answer, a 5xx) is
// not.
func TestProbeClassifies(t *testing.T) {
	now := time.Now()
	ca, other := certtest.CA(t, "cluster"), certtest.CA(t, "other")
	keys, err := nodeauth.New(bytes.Repeat([]byte{1}, nodeauth.SecretBytes), nil)
	if err != nil {
		t.Fatal(err)
	}
	// serve answers like a node (checking the signature as the server's
	// forwarded middleware does) through answer.
	serve := func(answer func(w http.ResponseWriter, r *http.Request)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != route.NodeProbePath {
				http.NotFound(w, r)
				return
			}
			if _, _, err := keys.Verify(r.Header, route.ForwardedHeader, r.URL.Path); err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			answer(w, r)
		})
	}
	asNode := func(id string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, id) }
	}
	tlsServer := func(issuer *certgen.CA, notBefore time.Time, h http.Handler) string {
		pair, err := issuer.Server("n2", notBefore, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pair.TLS()
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	plainServer := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	dialTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		var d tls.Dialer
		d.Config = &tls.Config{RootCAs: ca.Pool(), ServerName: host}
		return d.DialContext(ctx, network, addr)
	}
	member := func(tlsOn bool) *Member {
		cfg := Config{NodeID: "n1", ProbeTimeout: 2 * time.Second}
		if tlsOn {
			cfg.PeerDialTLS = dialTLS
		}
		return &Member{cfg: cfg, keys: keys, probeClient: cfg.probeClient()}
	}
	for _, c := range []struct {
		name     string
		tls      bool
		addr     string
		ok       bool
		definite bool
		errHas   string
	}{
		{"a node of the cluster's CA", true, tlsServer(ca, now, serve(asNode("n2"))), true, false, ""},
		{"plain HTTP", false, plainServer(serve(asNode("n2"))), true, false, ""},
		{"a certificate of another CA", true, tlsServer(other, now, serve(asNode("n2"))), false, true, "certificate signed by unknown authority"},
		{"an expired certificate", true, tlsServer(ca, now.Add(-72*time.Hour), serve(asNode("n2"))), false, true, "expired"},
		{"another node at the address", true, tlsServer(ca, now, serve(asNode("n3"))), false, true, `answered as node "n3", not "n2"`},
		{"not a tenure node of this version", true, tlsServer(ca, now, http.NotFoundHandler()), false, true, "404"},
		{"the signature refused", true, tlsServer(ca, now, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "not forwarded by a node of this cluster", http.StatusUnauthorized)
		})), false, true, "refused the probe: 401"},
		{"plain HTTP where TLS is expected", true, plainServer(serve(asNode("n2"))), false, true, ""},
		{"TLS where plain HTTP is expected", false, tlsServer(ca, now, serve(asNode("n2"))), false, true, ""},
		{"busy: 503", true, tlsServer(ca, now, serve(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		})), false, false, "503"},
		{"nobody listens", true, closed(), false, false, "connection refused"},
	} {
		detail, definite, err := member(c.tls).probe(t.Context(), registry.Node{ID: "n2", AdvertiseAddr: c.addr})
		if (err == nil) != c.ok || (err != nil && (definite != c.definite || !strings.Contains(err.Error(), c.errHas))) {
			t.Errorf("%s: probe = %q, definite %v, %v; want ok %v, definite %v, an error with %q", c.name, detail, definite, err, c.ok, c.definite, c.errHas)
		}
		if err == nil && !strings.Contains(detail, "answered as n2") {
			t.Errorf("%s: detail %q", c.name, detail)
		}
	}
}

// A failure that may pass counts only at the third in a row, the verdict
// before it standing meanwhile; a definite one counts at once; a success
// starts the count again.
func TestProbeVerdicts(t *testing.T) {
	busy := errors.New("context deadline exceeded")
	refused := errors.New("x509: certificate signed by unknown authority")
	var st peerProbe
	type step struct {
		ok, definite bool
		record, want bool // whether a verdict is recorded, and which
	}
	for i, s := range []step{
		{ok: false, record: false},                  // no verdict yet, a failure that may pass: nothing to say
		{ok: false, record: false},                  // nor after two
		{ok: false, record: true, want: false},      // the third in a row counts
		{ok: true, record: true, want: true},        // reached again
		{ok: false, record: true, want: true},       // one failure: the verdict stands
		{ok: false, record: true, want: true},       // two
		{ok: true, record: true, want: true},        // the count starts again
		{ok: false, record: true, want: true},       // one
		{ok: false, record: true, want: true},       // two
		{ok: false, record: true, want: false},      // three: unreachable
		{ok: true, record: true, want: true},        //
		{definite: true, record: true, want: false}, // a certificate refused: at once
	} {
		var err error
		switch {
		case s.definite:
			err = refused
		case !s.ok:
			err = busy
		}
		v, record := st.next("n2", "answered", s.definite, err)
		if record != s.record || (record && (v.OK != s.want || v.Target != "n2")) {
			t.Fatalf("step %d: next = %+v, %v; want recorded %v, ok %v", i, v, record, s.record, s.want)
		}
		if record && !v.OK && !strings.Contains(v.Detail, err.Error()) {
			t.Fatalf("step %d: detail %q does not say what failed", i, v.Detail)
		}
		if record && v.OK && err != nil && !strings.Contains(v.Detail, "of the 3 probes in a row") {
			t.Fatalf("step %d: detail %q does not say the verdict stands on failed probes", i, v.Detail)
		}
	}
}
