package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/logbuf"
	"github.com/tenurehq/tenure/internal/tlsfiles"
)

// fixture is a directory of TLS files and the CAs that made them.
type fixture struct {
	t                   *testing.T
	now                 time.Time
	dir                 string
	cert, key, clientCA string
	ca1, ca2            *certgen.CA
	clk                 *clock.Fake
	log                 *logbuf.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	now := time.Now()
	f := &fixture{t: t, now: now, dir: t.TempDir(), clk: clock.NewFake(now), log: new(logbuf.Buffer)}
	f.cert, f.key, f.clientCA = filepath.Join(f.dir, "cert.pem"), filepath.Join(f.dir, "key.pem"), filepath.Join(f.dir, "ca.pem")
	f.ca1, f.ca2 = f.newCA("ca1"), f.newCA("ca2")
	return f
}

func (f *fixture) newCA(name string) *certgen.CA {
	f.t.Helper()
	ca, err := certgen.NewCA(name, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	return ca
}

// server issues a server certificate for 127.0.0.1 from ca and writes it
// over the certificate and key files.
func (f *fixture) server(ca *certgen.CA) *certgen.Pair {
	f.t.Helper()
	p, err := ca.Server("node", f.now, "127.0.0.1")
	if err != nil {
		f.t.Fatal(err)
	}
	if err := p.Write(f.cert, f.key); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) client(ca *certgen.CA) tls.Certificate {
	f.t.Helper()
	p, err := ca.Client("client", f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := p.TLS()
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) write(path string, data []byte) {
	f.t.Helper()
	if err := certgen.WriteFile(path, data, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) config() tlsfiles.Config {
	return tlsfiles.Config{CertFile: f.cert, KeyFile: f.key, Clock: f.clk, Logger: slog.New(slog.NewTextHandler(f.log, nil))}
}

func (f *fixture) open(cfg tlsfiles.Config) *tlsfiles.Reloader {
	f.t.Helper()
	r, err := tlsfiles.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// openMutual opens a server certificate of CA 1 with CA 1 as the client
// (and peer) CA.
func (f *fixture) openMutual() *tlsfiles.Reloader {
	f.t.Helper()
	f.server(f.ca1)
	f.write(f.clientCA, f.ca1.PEM)
	cfg := f.config()
	cfg.ClientCAFile = f.clientCA
	return f.open(cfg)
}

// served is the certificate a handshake at ServerConfig would get now.
func served(t *testing.T, r *tlsfiles.Reloader) *x509.Certificate {
	t.Helper()
	c, err := r.ServerConfig().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Certificates[0].Leaf
}

func same(a, b *x509.Certificate) bool { return a.SerialNumber.Cmp(b.SerialNumber) == 0 }

func TestNewNamesTheFileAtFault(t *testing.T) {
	f := newFixture(t)
	first := f.server(f.ca1)
	other, err := f.ca1.Server("other", f.now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	mismatched := filepath.Join(f.dir, "other-key.pem")
	f.write(mismatched, other.KeyPEM)
	notPEM := filepath.Join(f.dir, "not.pem")
	f.write(notPEM, []byte("hello"))
	missing := filepath.Join(f.dir, "missing.pem")
	f.write(f.clientCA, first.CertPEM) // a certificate, not a CA: still PEM

	for _, tc := range []struct {
		name string
		cfg  func(*tlsfiles.Config)
		want []string
	}{
		{"missing cert", func(c *tlsfiles.Config) { c.CertFile = missing }, []string{"reading the certificate", missing, "no such file"}},
		{"missing key", func(c *tlsfiles.Config) { c.KeyFile = missing }, []string{"reading the private key", missing}},
		{"key of another certificate", func(c *tlsfiles.Config) { c.KeyFile = mismatched }, []string{f.cert, mismatched, "does not match", "the PEM private key it was issued for"}},
		{"cert not PEM", func(c *tlsfiles.Config) { c.CertFile = notPEM }, []string{notPEM, "PEM"}},
		{"key and cert swapped", func(c *tlsfiles.Config) { c.CertFile, c.KeyFile = f.key, f.cert }, []string{f.key, f.cert}},
		{"missing client CA", func(c *tlsfiles.Config) { c.ClientCAFile = missing }, []string{"client CA", missing}},
		{"client CA not PEM", func(c *tlsfiles.Config) { c.ClientCAFile = notPEM }, []string{"client CA", notPEM, "no PEM certificate"}},
		{"missing peer CA", func(c *tlsfiles.Config) { c.ClientCAFile, c.PeerCAFile = f.clientCA, missing }, []string{"peer CA", missing}},
		{"no key", func(c *tlsfiles.Config) { c.KeyFile = "" }, []string{"key file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.config()
			tc.cfg(&cfg)
			_, err := tlsfiles.New(cfg)
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestChangedFilesAreReadAtAHandshakeAfterCheckEvery(t *testing.T) {
	f := newFixture(t)
	first := f.server(f.ca1)
	cfg := f.config()
	cfg.CheckEvery = 5 * time.Second
	r := f.open(cfg)
	if got := served(t, r); !same(got, first.Cert) {
		t.Fatalf("serves serial %s, want the first certificate's %s", tlsfiles.Serial(got), tlsfiles.Serial(first.Cert))
	}

	second := f.server(f.ca2)
	f.clk.Advance(5*time.Second - time.Nanosecond)
	if got := served(t, r); !same(got, first.Cert) {
		t.Fatalf("before CheckEvery passed, serves serial %s, want the first %s", tlsfiles.Serial(got), tlsfiles.Serial(first.Cert))
	}
	f.clk.Advance(time.Nanosecond)
	if got := served(t, r); !same(got, second.Cert) {
		t.Fatalf("after CheckEvery, serves serial %s, want the second %s", tlsfiles.Serial(got), tlsfiles.Serial(second.Cert))
	}
	if !same(r.Certificate(), second.Cert) {
		t.Errorf("Certificate() = %s, want the second %s", tlsfiles.Serial(r.Certificate()), tlsfiles.Serial(second.Cert))
	}
	if n := f.log.Count("TLS files reloaded"); n != 1 {
		t.Errorf("%d reloads logged, want 1:\n%s", n, f.log)
	}

	// Unchanged files are not read again.
	f.clk.Advance(time.Hour)
	served(t, r)
	if n := f.log.Count("TLS files reloaded"); n != 1 {
		t.Errorf("unchanged files were read again (%d reloads logged):\n%s", n, f.log)
	}
}

func TestBadFilesKeepTheCertificateInUse(t *testing.T) {
	f := newFixture(t)
	first := f.server(f.ca1)
	r := f.open(f.config())

	// A certificate written before its key: they do not match yet.
	next, err := f.ca1.Server("next", f.now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f.write(f.cert, next.CertPEM)
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	if got := served(t, r); !same(got, first.Cert) {
		t.Fatalf("with a mismatched key, serves %s, want the first certificate %s", tlsfiles.Serial(got), tlsfiles.Serial(first.Cert))
	}
	if n := f.log.Count("TLS files not reloaded"); n != 1 || !strings.Contains(f.log.String(), "does not match") {
		t.Fatalf("want one error about the mismatched key, log:\n%s", f.log)
	}
	// Not retried (nor logged again) while the files stay as they are.
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	served(t, r)
	if n := f.log.Count("TLS files not reloaded"); n != 1 {
		t.Fatalf("unchanged bad files were read again (%d errors logged)", n)
	}
	// A forced reload reads them, and fails the same way.
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Reload() = %v, want the mismatch", err)
	}
	if got := served(t, r); !same(got, first.Cert) {
		t.Fatalf("after a failed Reload, serves %s, want the first certificate", tlsfiles.Serial(got))
	}

	// The key arrives: the pair is read at the next check.
	f.write(f.key, next.KeyPEM)
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	if got := served(t, r); !same(got, next.Cert) {
		t.Fatalf("with the matching key, serves %s, want the new certificate %s", tlsfiles.Serial(got), tlsfiles.Serial(next.Cert))
	}

	// A file removed: the certificate in use stays.
	if err := os.Remove(f.cert); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	if got := served(t, r); !same(got, next.Cert) {
		t.Fatalf("with the certificate file gone, serves %s, want %s", tlsfiles.Serial(got), tlsfiles.Serial(next.Cert))
	}
	if !strings.Contains(f.log.String(), "no such file") {
		t.Errorf("the missing file was not logged:\n%s", f.log)
	}
}

func TestReloadReadsAtOnce(t *testing.T) {
	f := newFixture(t)
	f.server(f.ca1)
	r := f.open(f.config())
	second := f.server(f.ca2)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(t, r); !same(got, second.Cert) {
		t.Fatalf("after Reload, serves %s, want %s", tlsfiles.Serial(got), tlsfiles.Serial(second.Cert))
	}
}

// handshake runs a TLS handshake between server and client configurations
// over a loopback connection, and one byte from the server after it, so
// that a client certificate the server refuses (known to the client only
// then, in TLS 1.3) fails it. It returns the client's view and error.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Only against a hang: nothing here depends on time.
	deadline := time.Now().Add(10 * time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		sc.SetDeadline(deadline)
		s := tls.Server(sc, server)
		if s.Handshake() == nil {
			s.Write([]byte("x"))
		}
		s.Close()
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc.SetDeadline(deadline)
	c := tls.Client(cc, client)
	err = c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	state := c.ConnectionState()
	c.Close()
	<-done
	return state, err
}

// clientGet GETs url (and POSTs to it, as a gRPC client would) with cert
// sent whatever CAs the server names (nil: none). It returns the GET's
// status and body, and the gRPC status of the POST, or the error.
func clientGet(t *testing.T, roots *x509.CertPool, cert *tls.Certificate, url string) (status int, body, grpcStatus string, err error) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPost, url+"/tenure.v1.TaskService/Submit", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/grpc")
	gresp, err := hc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	io.Copy(io.Discard, gresp.Body)
	gresp.Body.Close()
	return resp.StatusCode, string(b), gresp.Header.Get("Grpc-Status") + gresp.Trailer.Get("Grpc-Status"), nil
}

func TestClientCertRequiredAndClientCAReloaded(t *testing.T) {
	f := newFixture(t)
	r := f.openMutual()
	ts := httptest.NewUnstartedServer(r.RequireClientCert(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Write([]byte("served"))
	}), "/healthz"))
	ts.TLS = r.ServerConfig()
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()

	fromCA1, fromCA2 := f.client(f.ca1), f.client(f.ca2)
	if status, body, grpc, err := clientGet(t, f.ca1.Pool(), &fromCA1, ts.URL); err != nil || status != http.StatusOK || body != "served" || grpc != "" {
		t.Fatalf("a client certificate of the client CA: %d %q grpc-status %q, %v; want it served", status, body, grpc, err)
	}
	status, body, grpc, err := clientGet(t, f.ca1.Pool(), nil, ts.URL)
	if err != nil || status != http.StatusUnauthorized || !strings.Contains(body, "requires a client certificate") || grpc != "16" {
		t.Fatalf("no client certificate: %d %q grpc-status %q, %v; want 401 saying a certificate is required, gRPC unauthenticated (16)", status, body, grpc, err)
	}
	if status, _, _, err := clientGet(t, f.ca1.Pool(), nil, ts.URL+"/healthz"); err != nil || status != http.StatusOK {
		t.Fatalf("the probe without a client certificate: %d, %v; want 200", status, err)
	}
	// Refused in the handshake; in TLS 1.3 the client learns it after its
	// own end of the handshake, as an alert or a closed connection.
	if _, _, _, err := clientGet(t, f.ca1.Pool(), &fromCA2, ts.URL); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}

	// The client CA changes to CA 2.
	f.write(f.clientCA, f.ca2.PEM)
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	if status, _, _, err := clientGet(t, f.ca1.Pool(), &fromCA2, ts.URL); err != nil || status != http.StatusOK {
		t.Fatalf("after the client CA changed, a certificate of the new CA: %d, %v; want it served", status, err)
	}
	if _, _, _, err := clientGet(t, f.ca1.Pool(), &fromCA1, ts.URL); err == nil {
		t.Fatal("after the client CA changed, a certificate of the old CA was accepted")
	}
}

func TestNoClientCANoCheck(t *testing.T) {
	f := newFixture(t)
	f.server(f.ca1)
	r := f.open(f.config())
	rec := httptest.NewRecorder()
	r.RequireClientCert(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("served")) })).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "served" {
		t.Errorf("without a client CA, a request without a certificate: %d %q, want it served", rec.Code, rec.Body)
	}
}

func TestPeerConfig(t *testing.T) {
	f := newFixture(t)
	r := f.openMutual() // the client CA is the peer CA too, by default

	peer := func(name string) *tls.Config {
		return r.PeerConfig(name)
	}
	// Another node of the same CA, requiring client certificates of it:
	// this node's own configuration is one.
	state, err := handshake(t, r.ServerConfig(), peer("127.0.0.1"))
	if err != nil {
		t.Fatalf("node to node: %v", err)
	}
	if !same(state.PeerCertificates[0], r.Certificate()) {
		t.Errorf("peer certificate %s, want %s", tlsfiles.Serial(state.PeerCertificates[0]), tlsfiles.Serial(r.Certificate()))
	}

	var hostErr x509.HostnameError
	if _, err := handshake(t, r.ServerConfig(), peer("10.9.9.9")); !errors.As(err, &hostErr) {
		t.Errorf("a certificate for another address: err = %v, want an x509.HostnameError", err)
	}
	if _, err := handshake(t, r.ServerConfig(), peer("")); err == nil || !strings.Contains(err.Error(), "no server name") {
		t.Errorf("no server name: err = %v, want it refused", err)
	}

	// A node whose certificate comes from CA 2, which the peer CA file
	// does not hold yet.
	p2, err := f.ca2.Server("node2", f.now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := p2.TLS()
	if err != nil {
		t.Fatal(err)
	}
	other := &tls.Config{Certificates: []tls.Certificate{c2}}
	var unknown x509.UnknownAuthorityError
	if _, err := handshake(t, other, peer("127.0.0.1")); !errors.As(err, &unknown) {
		t.Fatalf("a node of an unknown CA: err = %v, want an x509.UnknownAuthorityError", err)
	}
	// The CA file gains CA 2: the next check reads it.
	f.write(f.clientCA, append(append([]byte{}, f.ca1.PEM...), f.ca2.PEM...))
	f.clk.Advance(tlsfiles.DefaultCheckEvery)
	if _, err := handshake(t, other, peer("127.0.0.1")); err != nil {
		t.Fatalf("after the peer CA gained CA 2: %v", err)
	}
}

func TestSeparatePeerCA(t *testing.T) {
	f := newFixture(t)
	f.server(f.ca1)
	f.write(f.clientCA, f.ca2.PEM) // clients' certificates come from CA 2
	peerCA := filepath.Join(f.dir, "peer-ca.pem")
	f.write(peerCA, f.ca1.PEM) // nodes' from CA 1
	cfg := f.config()
	cfg.ClientCAFile, cfg.PeerCAFile = f.clientCA, peerCA
	r := f.open(cfg)

	// The far node does not ask for a client certificate here.
	other := f.open(tlsfiles.Config{CertFile: f.cert, KeyFile: f.key, Clock: f.clk})
	c := r.PeerConfig("127.0.0.1")
	if _, err := handshake(t, other.ServerConfig(), c); err != nil {
		t.Fatalf("the node's certificate, of the peer CA, refused: %v", err)
	}
	if _, err := handshake(t, r.ServerConfig(), &tls.Config{RootCAs: f.ca1.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{f.client(f.ca2)}}); err != nil {
		t.Fatalf("a client certificate of the client CA refused: %v", err)
	}
}

func TestDialPeerSpeaksHTTP2(t *testing.T) {
	f := newFixture(t)
	r := f.openMutual()

	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if len(req.TLS.PeerCertificates) == 0 || !same(req.TLS.PeerCertificates[0], r.Certificate()) {
			http.Error(w, "not the node's certificate", http.StatusForbidden)
			return
		}
		w.Write([]byte(req.Proto))
	}))
	ts.TLS = r.ServerConfig()
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()

	tr := &http.Transport{DialTLSContext: r.DialPeer, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP1(true)
	tr.Protocols.SetHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "HTTP/2.0" {
		t.Fatalf("answer %d %q, want 200 HTTP/2.0", resp.StatusCode, body)
	}
}
