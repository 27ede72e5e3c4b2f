package e2e

// TLS with the real binary: certificates made in the test (crypto/x509,
// package certgen), the server on --tls-cert/--tls-key, gRPC and JSON
// clients, the CLI and the exec worker on https://, client certificates
// required with --tls-client-ca, certificates replaced while the server
// runs (on SIGHUP, and by changing the files), and a two-node cluster whose
// nodes forward to each other over TLS.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"

	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/logbuf"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/sdk/client"
)

// pki makes CAs and certificates into a directory of the test.
type pki struct {
	t   *testing.T
	dir string
	now time.Time
}

func newPKI(t *testing.T) *pki { return &pki{t: t, dir: t.TempDir(), now: time.Now()} }

func (k *pki) path(name string) string { return filepath.Join(k.dir, name) }

// ca makes a CA and writes its certificate to <name>.pem.
func (k *pki) ca(name string) *certgen.CA {
	k.t.Helper()
	ca, err := certgen.NewCA(name, k.now)
	if err != nil {
		k.t.Fatal(err)
	}
	if err := certgen.WriteFile(k.path(name+".pem"), ca.PEM, 0o644); err != nil {
		k.t.Fatal(err)
	}
	return ca
}

// server issues a server certificate of ca for 127.0.0.1 and writes it
// to the files cert and key (replacing them by a rename).
func (k *pki) server(ca *certgen.CA, cert, key string) *certgen.Pair {
	k.t.Helper()
	p, err := ca.Server("tenure", k.now, "127.0.0.1")
	if err != nil {
		k.t.Fatal(err)
	}
	if err := p.Write(k.path(cert), k.path(key)); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// client issues a client certificate of ca, written to <name>.pem and
// <name>-key.pem.
func (k *pki) client(ca *certgen.CA, name string) tls.Certificate {
	k.t.Helper()
	p, err := ca.Client(name, k.now)
	if err != nil {
		k.t.Fatal(err)
	}
	if err := p.Write(k.path(name+".pem"), k.path(name+"-key.pem")); err != nil {
		k.t.Fatal(err)
	}
	c, err := p.TLS()
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

// trust is a client configuration trusting cas, presenting certs.
func trust(cas []*certgen.CA, certs ...tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		pool.AddCert(ca.Cert)
	}
	return &tls.Config{RootCAs: pool, Certificates: certs}
}

// protoTap records the protocol of every answer and whether it came over
// TLS.
type protoTap struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen map[string]int // "HTTP/2.0 tls" → answers
}

func (p *protoTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(req)
	if err == nil {
		p.mu.Lock()
		p.seen[fmt.Sprintf("%s tls=%v", resp.Proto, resp.TLS != nil)]++
		p.mu.Unlock()
	}
	return resp, err
}

func (p *protoTap) only(t *testing.T, want string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) != 1 || p.seen[want] == 0 {
		t.Errorf("answers came as %v, want all %q", p.seen, want)
	}
}

// submitAndGet submits one task through tasks and reads it back.
func submitAndGet(t *testing.T, tasks tenurev1connect.TaskServiceClient, queue string, payload []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	resp, err := tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: queue, Payload: payload}))
	if err != nil {
		return err
	}
	got, err := tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: resp.Msg.GetTask().GetTaskId()}))
	if err != nil {
		return err
	}
	if string(got.Msg.GetTask().GetPayload()) != string(payload) {
		return fmt.Errorf("GetTask payload %q, want %q", got.Msg.GetTask().GetPayload(), payload)
	}
	return nil
}

// TestTLSServer: a server on --tls-cert/--tls-key answers gRPC over HTTP/2
// and JSON over HTTP/1.1, both over TLS; the CLI and the exec worker reach
// it at https:// with --ca-file, and say what to do without it.
func TestTLSServer(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	ca := k.ca("ca")
	k.server(ca, "cert.pem", "key.pem")
	srv := startServerProcTLS(t, t.TempDir(), trust([]*certgen.CA{ca}), "--tls-cert", k.path("cert.pem"), "--tls-key", k.path("key.pem"))
	if !strings.HasPrefix(srv.url(), "https://") || !strings.Contains(srv.out.String(), "TLS on") {
		t.Fatalf("server output does not say TLS is on:\n%s", srv.out.String())
	}

	// gRPC: HTTP/2 over TLS; JSON (Connect): HTTP/1.1 over TLS.
	for _, p := range []struct {
		name  string
		http2 bool
		opt   connect.ClientOption
		want  string
	}{
		{"grpc", true, connect.WithGRPC(), "HTTP/2.0 tls=true"},
		{"json", false, connect.WithProtoJSON(), "HTTP/1.1 tls=true"},
	} {
		tr := &http.Transport{TLSClientConfig: trust([]*certgen.CA{ca}), Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP1(!p.http2)
		tr.Protocols.SetHTTP2(p.http2)
		tap := &protoTap{base: tr, seen: map[string]int{}}
		tasks := tenurev1connect.NewTaskServiceClient(&http.Client{Transport: tap}, srv.url(), p.opt)
		if err := submitAndGet(t, tasks, "tls", []byte("over "+p.name)); err != nil {
			t.Fatalf("%s over TLS: %v", p.name, err)
		}
		tap.only(t, p.want)
		tr.CloseIdleConnections()
	}

	// Plain HTTP is not served.
	plain := "http://" + srv.addr
	if err := submitAndGet(t, tenurev1connect.NewTaskServiceClient(&http.Client{}, plain, connect.WithProtoJSON()), "tls", []byte("x")); err == nil {
		t.Error("a plain HTTP client was served by a TLS server")
	}

	// The CLI: https:// with --ca-file.
	code, out := runBin(t, "submit", "--addr", srv.url(), "--ca-file", k.path("ca.pem"), "--queue", "cli", "from the cli")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 26 {
		t.Fatalf("tenure submit over TLS: exit %d:\n%s", code, out)
	}
	// An address without a scheme is https:// when a TLS flag is given.
	if code, out := runBin(t, "task", "get", id, "--addr", srv.addr, "--ca-file", k.path("ca.pem"), "--json"); code != 0 || !strings.Contains(out, `"queue": "cli"`) {
		t.Fatalf("tenure task get over TLS: exit %d:\n%s", code, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no CA", []string{"--addr", srv.url()}, []string{"certificate signed by unknown authority", "pass --ca-file"}},
		{"plain http", []string{"--addr", plain}, []string{"give --addr as https://"}},
		{"another CA", []string{"--addr", srv.url(), "--ca-file", k.path(k.ca("other").Cert.Subject.CommonName + ".pem")}, []string{"pass --ca-file"}},
		{"missing CA file", []string{"--addr", srv.url(), "--ca-file", k.path("missing.pem")}, []string{"--ca-file", k.path("missing.pem"), "no such file"}},
	} {
		code, out := runBin(t, append([]string{"task", "get", id}, tc.args...)...)
		if code != 1 || strings.Count(strings.TrimSpace(out), "\n") > 1 {
			t.Errorf("%s: exit %d, want 1 and one line with a hint:\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not say %q:\n%s", tc.name, w, out)
			}
		}
	}

	// The exec worker stops on a server it does not trust, saying why.
	if code, out := runBin(t, "worker", "--addr", srv.url(), "--queue", "cli", "--exec", "cat"); code != 1 || !strings.Contains(out, "pass --ca-file") {
		t.Errorf("tenure worker without --ca-file: exit %d, want 1 with a hint naming --ca-file:\n%s", code, out)
	}

	// The exec worker over TLS completes the task.
	w := spawn(t, "worker", "", []string{"worker", "--addr", srv.url(), "--ca-file", k.path("ca.pem"), "--queue", "cli", "--exec", "tr a-z A-Z"})
	defer stop(t, w)
	c := sdkWith(t, srv.url(), client.Options{TLSConfig: trust([]*certgen.CA{ca})})
	eventually.NoError(t, "the worker to complete the task", func() error {
		task, err := c.GetTask(context.Background(), client.GetTaskRequest{TaskID: id})
		if err != nil {
			return err
		}
		if task.State != client.TaskStateCompleted {
			return fmt.Errorf("the task is %v; worker output:\n%s", task.State, w.out.String())
		}
		return nil
	})
	if task, err := c.GetTask(context.Background(), client.GetTaskRequest{TaskID: id}); err != nil || string(task.Result) != "FROM THE CLI" {
		t.Errorf("result %q (%v), want FROM THE CLI", task.Result, err)
	}
}

// TestTLSClientCertificates: with --tls-client-ca a client needs a
// certificate of that CA; one of another CA, or none, is refused, and the
// probes stay open.
func TestTLSClientCertificates(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	ca, clientCA, other := k.ca("ca"), k.ca("client-ca"), k.ca("other")
	k.server(ca, "cert.pem", "key.pem")
	good, foreign := k.client(clientCA, "alice"), k.client(other, "mallory")
	srv := startServerProcTLS(t, t.TempDir(), trust([]*certgen.CA{ca}, good),
		"--tls-cert", k.path("cert.pem"), "--tls-key", k.path("key.pem"), "--tls-client-ca", k.path("client-ca.pem"))

	grpcWith := func(cfg *tls.Config) tenurev1connect.TaskServiceClient {
		tr := &http.Transport{TLSClientConfig: cfg, Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		return tenurev1connect.NewTaskServiceClient(&http.Client{Transport: tr}, srv.url(), connect.WithGRPC())
	}
	jsonWith := func(cfg *tls.Config) tenurev1connect.TaskServiceClient {
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return tenurev1connect.NewTaskServiceClient(&http.Client{Transport: tr}, srv.url(), connect.WithProtoJSON())
	}
	for name, tasks := range map[string]func(*tls.Config) tenurev1connect.TaskServiceClient{"grpc": grpcWith, "json": jsonWith} {
		if err := submitAndGet(t, tasks(trust([]*certgen.CA{ca}, good)), "mtls", []byte(name)); err != nil {
			t.Errorf("%s with a certificate of the client CA: %v", name, err)
		}
		err := submitAndGet(t, tasks(trust([]*certgen.CA{ca})), "mtls", []byte(name))
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "requires a client certificate") {
			t.Errorf("%s without a certificate: %v, want unauthenticated saying a certificate is required", name, err)
		}
		// Sent whatever CAs the server names (Go's client would not send
		// it): refused in the handshake.
		forced := trust([]*certgen.CA{ca})
		forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
		if err := submitAndGet(t, tasks(forced), "mtls", []byte(name)); err == nil {
			t.Errorf("%s with a certificate of another CA: served", name)
		}
	}

	get := func(path string, cfg *tls.Config) int {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(srv.url() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusOK, "/metrics": http.StatusUnauthorized} {
		if got := get(path, trust([]*certgen.CA{ca})); got != want {
			t.Errorf("GET %s without a client certificate: %d, want %d", path, got, want)
		}
	}
	if got := get("/metrics", trust([]*certgen.CA{ca}, good)); got != http.StatusOK {
		t.Errorf("GET /metrics with a client certificate: %d, want 200", got)
	}

	// The CLI.
	base := []string{"submit", "--addr", srv.url(), "--ca-file", k.path("ca.pem"), "--queue", "mtls"}
	if code, out := runBin(t, append(base, "--cert-file", k.path("alice.pem"), "--key-file", k.path("alice-key.pem"), "x")...); code != 0 {
		t.Errorf("tenure submit with a client certificate: exit %d:\n%s", code, out)
	}
	if code, out := runBin(t, append(base, "x")...); code != 1 || !strings.Contains(out, "--cert-file and --key-file") {
		t.Errorf("tenure submit without a client certificate: exit %d, want 1 naming --cert-file and --key-file:\n%s", code, out)
	}
	if code, out := runBin(t, append(base, "--cert-file", k.path("mallory.pem"), "--key-file", k.path("mallory-key.pem"), "x")...); code != 1 {
		t.Errorf("tenure submit with a client certificate of another CA: exit %d, want 1:\n%s", code, out)
	}
	if code, out := runBin(t, append(base, "--cert-file", k.path("alice.pem"), "x")...); code != 2 || !strings.Contains(out, "--key-file") {
		t.Errorf("tenure submit with --cert-file alone: exit %d, want 2 naming --key-file:\n%s", code, out)
	}
}

// servedSerial is the serial number of the certificate a new connection to
// p gets, or an error.
func servedSerial(p *serverProc) (string, error) {
	tr := &http.Transport{TLSClientConfig: p.clientTLS.Clone(), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: e2eCallTimeout}).Get(p.url() + "/healthz")
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	return tlsfiles.Serial(resp.TLS.PeerCertificates[0]), nil
}

// TestTLSRotation: the server's certificate replaced while it runs. After
// SIGHUP new connections get the new one; a bad file keeps the one in use;
// files that change are read without a signal.
func TestTLSRotation(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	ca1, ca2 := k.ca("ca1"), k.ca("ca2")
	first := k.server(ca1, "cert.pem", "key.pem")
	srv := startServerProcTLS(t, t.TempDir(), trust([]*certgen.CA{ca1, ca2}), "--tls-cert", k.path("cert.pem"), "--tls-key", k.path("key.pem"))
	serialIs := func(want *certgen.Pair) func() (bool, string) {
		return func() (bool, string) {
			got, err := servedSerial(srv)
			if err != nil {
				return false, err.Error()
			}
			return got == tlsfiles.Serial(want.Cert), "serial " + got + ", want " + tlsfiles.Serial(want.Cert)
		}
	}
	if ok, msg := serialIs(first)(); !ok {
		t.Fatalf("at start: %s", msg)
	}
	// A long-lived connection, opened before the rotation.
	keep := &http.Transport{TLSClientConfig: srv.clientTLS.Clone()}
	defer keep.CloseIdleConnections()
	keepGet := func() (string, error) {
		resp, err := (&http.Client{Transport: keep}).Get(srv.url() + "/healthz")
		if err != nil {
			return "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return tlsfiles.Serial(resp.TLS.PeerCertificates[0]), nil
	}
	if s, err := keepGet(); err != nil || s != tlsfiles.Serial(first.Cert) {
		t.Fatalf("long-lived connection: %s, %v", s, err)
	}

	hup := func(logged string) {
		t.Helper()
		before := strings.Count(srv.out.String(), logged)
		if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, srv, logged, before+1)
	}

	// SIGHUP, with a certificate of another CA: the next connection has it.
	second := k.server(ca2, "cert.pem", "key.pem")
	hup(`why="reload requested" serial=` + tlsfiles.Serial(second.Cert))
	if ok, msg := serialIs(second)(); !ok {
		t.Fatalf("after SIGHUP: %s", msg)
	}
	if s, err := keepGet(); err != nil || s != tlsfiles.Serial(first.Cert) {
		t.Errorf("the connection opened before the rotation: serial %s, %v; want it kept with the first certificate", s, err)
	}

	// SIGHUP with a broken certificate file: an error, the certificate in
	// use stays.
	if err := certgen.WriteFile(k.path("cert.pem"), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup("TLS files not reloaded")
	if ok, msg := serialIs(second)(); !ok {
		t.Fatalf("after a broken file: %s", msg)
	}
	if srv.exited() {
		t.Fatal("the server exited on a broken certificate file")
	}

	// No signal: new files are read at a handshake after they change.
	third := k.server(ca1, "cert.pem", "key.pem")
	eventually.NoError(t, "the changed files served", func() error {
		if ok, msg := serialIs(third)(); !ok {
			return errors.New(msg)
		}
		return nil
	})
	// The log line reaches the test through a pipe, so it may arrive after
	// the handshake that served the new certificate: wait for it too.
	reloaded := `why="files changed" serial=` + tlsfiles.Serial(third.Cert)
	waitOutput(t, srv, reloaded, 1)
}

// TestTLSStartErrors: bad TLS files or flags stop the server at start
// with one line naming the file or flag and what to do.
func TestTLSStartErrors(t *testing.T) {
	t.Parallel()
	k := newPKI(t)
	ca := k.ca("ca")
	k.server(ca, "cert.pem", "key.pem")
	k.server(ca, "other.pem", "other-key.pem")
	serverOnly, err := ca.Issue("server only", k.now, []string{"127.0.0.1"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	if err := serverOnly.Write(k.path("server-only.pem"), k.path("server-only-key.pem")); err != nil {
		t.Fatal(err)
	}
	missing := k.path("missing.pem")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"missing certificate", []string{"--tls-cert", missing, "--tls-key", k.path("key.pem")}, 1, []string{"--tls-cert", missing, "no such file"}},
		{"missing key", []string{"--tls-cert", k.path("cert.pem"), "--tls-key", missing}, 1, []string{"--tls-key", missing, "no such file"}},
		{"key of another certificate", []string{"--tls-cert", k.path("cert.pem"), "--tls-key", k.path("other-key.pem")}, 1,
			[]string{"--tls-cert, --tls-key", "does not match", "the PEM private key it was issued for"}},
		{"certificate that is a CA file", []string{"--tls-cert", k.path("ca.pem"), "--tls-key", k.path("key.pem")}, 1, []string{"does not match"}},
		{"client CA that is a key", []string{"--tls-cert", k.path("cert.pem"), "--tls-key", k.path("key.pem"), "--tls-client-ca", k.path("key.pem")}, 1,
			[]string{"--tls-client-ca", "no PEM certificate"}},
		{"certificate without key", []string{"--tls-cert", k.path("cert.pem")}, 2, []string{"--tls-cert and --tls-key go together"}},
		{"client CA without TLS", []string{"--tls-client-ca", k.path("ca.pem")}, 2, []string{"--tls-client-ca needs --tls-cert"}},
		{"peer CA in embedded mode", []string{"--tls-cert", k.path("cert.pem"), "--tls-key", k.path("key.pem"), "--tls-peer-ca", k.path("ca.pem")}, 2,
			[]string{"--tls-peer-ca is for cluster mode"}},
		// Refused before the database is dialled (nothing listens there).
		{"cluster node certificate without clientAuth", []string{"--mysql", "root@tcp(127.0.0.1:1)/tenure", "--node-id", "n1",
			"--tls-cert", k.path("server-only.pem"), "--tls-key", k.path("server-only-key.pem"), "--tls-client-ca", k.path("ca.pem")}, 1,
			[]string{"--tls-cert", k.path("server-only.pem"), "clientAuth"}},
	} {
		args := append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		code, out := runBin(t, args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, code, tc.code, out)
		}
		var errLine string
		for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "tenure server: ") {
				errLine = sc.Text()
			}
		}
		for _, w := range tc.want {
			if !strings.Contains(errLine, w) {
				t.Errorf("%s: the error line does not say %q:\n%s", tc.name, w, out)
			}
		}
	}
}

// TestClusterTLS: two cluster nodes serving TLS, requiring client
// certificates, forward requests to each other over TLS (each node's
// certificate is its client certificate), and lease across both.
func TestClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster e2e; skipped with -short")
	}
	t.Parallel()
	dsn := clustertest.NewDatabase(t) // skips without MySQL, fails under CI
	k := newPKI(t)
	ca := k.ca("ca")
	admin := k.client(ca, "admin")
	cfg := trust([]*certgen.CA{ca}, admin)
	var nodes []*serverProc
	for i := range 2 {
		n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn}
		cert, key := n.id+".pem", n.id+"-key.pem"
		k.server(ca, cert, key)
		n.extra = []string{"--tls-cert", k.path(cert), "--tls-key", k.path(key), "--tls-client-ca", k.path("ca.pem")}
		n.clientTLS = cfg
		p := start(t, n.launch(""))
		nodes = append(nodes, p)
	}

	clients := sdkEach(t, nodes, client.Options{Protocol: client.ProtocolGRPC, TLSConfig: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), eventually.Deadline)
	defer cancel()
	const tasks = 24
	ids := map[string]bool{}
	for i := range tasks {
		res, err := clients[i%2].Submit(ctx, client.SubmitRequest{Queue: "tls", Payload: []byte(strconv.Itoa(i))})
		if err != nil {
			t.Fatalf("Submit %d via node %d: %v", i, i%2+1, err)
		}
		ids[res.TaskID] = true
	}
	// Every task read through either node: the one that does not own its
	// partition forwards the call.
	for id := range ids {
		for i, c := range clients {
			if _, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: id}); err != nil {
				t.Fatalf("GetTask(%s) via node %d: %v", id, i+1, err)
			}
		}
	}
	// A lease through node 2 draws from every partition, node 1's too.
	leased := map[string]bool{}
	for len(leased) < tasks && ctx.Err() == nil {
		got, err := tasksOf(clients[1].Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "tls", MaxTasks: tasks, Wait: time.Second}))
		if err != nil {
			t.Fatalf("Lease via node 2: %v", err)
		}
		for _, lt := range got {
			leased[lt.ID] = true
		}
	}
	if len(leased) != tasks {
		t.Fatalf("leased %d of %d tasks via node 2", len(leased), tasks)
	}

	forwarded := 0.0
	for _, p := range nodes {
		for _, v := range metricValues(t, scrape(t, p), "tenure_cluster_forwarded_requests_total") {
			forwarded += v
		}
	}
	if forwarded == 0 {
		t.Fatal("no request was forwarded between the nodes")
	}
	for _, p := range nodes {
		if strings.Contains(p.out.String(), "TLS handshake error") {
			t.Errorf("a node logged a failed TLS handshake:\n%s", p.out.String())
		}
	}
}

// tlsMariaDB starts a MariaDB server of the test's own on a loopback port
// that accepts only TLS connections, with a certificate of ca for
// 127.0.0.1, and returns its address. The test is skipped where MariaDB's
// programs are not installed.
func tlsMariaDB(t *testing.T, k *pki, ca *certgen.CA) string {
	t.Helper()
	installDB, err1 := exec.LookPath("mariadb-install-db")
	mariadbd, err2 := exec.LookPath("mariadbd")
	if err1 != nil || err2 != nil {
		t.Skip("MariaDB's programs (mariadb-install-db, mariadbd) are not installed")
	}
	k.server(ca, "db.pem", "db-key.pem")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	var user []string
	if os.Geteuid() == 0 {
		user = []string{"--user=root"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eExitTimeout)
	defer cancel()
	install := exec.CommandContext(ctx, installDB, append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}, user...)...)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	for try := 0; ; try++ {
		addr := freeLoopbackAddr(t)
		_, port, _ := strings.Cut(addr, ":")
		out := new(logbuf.Buffer)
		cmd := exec.Command(mariadbd, append([]string{"--no-defaults", "--datadir=" + data, "--bind-address=127.0.0.1", "--port=" + port,
			"--socket=" + filepath.Join(dir, "sock"), "--skip-name-resolve",
			"--ssl-ca=" + k.path("ca.pem"), "--ssl-cert=" + k.path("db.pem"), "--ssl-key=" + k.path("db-key.pem"), "--require-secure-transport=ON"}, user...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		if up(t, out, done) {
			return addr
		}
		if try >= 3 || !strings.Contains(out.String(), "in use") {
			t.Fatalf("mariadbd exited:\n%s", out.String())
		}
	}
}

// up waits until mariadbd says it is ready (true) or exits (false).
func up(t *testing.T, out *logbuf.Buffer, exited <-chan struct{}) bool {
	t.Helper()
	gone := errors.New("mariadbd exited")
	err := eventually.Wait(func() error {
		if strings.Contains(out.String(), "ready for connections") {
			return nil
		}
		select {
		case <-exited:
			return eventually.Stop(gone)
		default:
			return errors.New("not ready for connections")
		}
	})
	if err != nil && err != gone {
		t.Fatalf("mariadbd did not start: %v\n%s", err, out.String())
	}
	return err == nil
}

// TestClusterMySQLTLS: a cluster node on a database that accepts only TLS,
// its certificate issued by a private CA: the DSN's tls=custom with
// --mysql-tls-ca connects; tls=true (the system's roots) is refused with a
// hint, and so is a DSN without TLS.
func TestClusterMySQLTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MariaDB server; skipped with -short")
	}
	t.Parallel()
	k := newPKI(t)
	ca := k.ca("ca")
	addr := tlsMariaDB(t, k, ca)
	dsn := "root@tcp(" + addr + ")/tenure"

	if code, out := runBin(t, "migrate", "--mysql", dsn+"?tls=true"); code != 1 || !strings.Contains(out, "--mysql-tls-ca") {
		t.Errorf("tls=true with a private CA: exit %d, want 1 with a hint naming --mysql-tls-ca:\n%s", code, out)
	}
	// (MariaDB answers "access denied", MySQL "insecure transport".)
	if code, out := runBin(t, "migrate", "--mysql", dsn); code != 1 {
		t.Errorf("no TLS to a database that requires it: exit %d, want 1:\n%s", code, out)
	}
	if code, out := runBin(t, "migrate", "--mysql", dsn+"?tls=custom"); code != 2 || !strings.Contains(out, "needs --mysql-tls-ca") {
		t.Errorf("tls=custom without --mysql-tls-ca: exit %d, want 2:\n%s", code, out)
	}

	n := &clNode{id: "n1", dsn: dsn + "?tls=custom"}
	n.extra = []string{"--mysql-tls-ca", k.path("ca.pem")}
	p := start(t, n.launch(""))
	c := sdk(t, p.url())
	ctx, cancel := context.WithTimeout(context.Background(), eventually.Deadline)
	defer cancel()
	res, err := c.Submit(ctx, client.SubmitRequest{Queue: "tls-db", Payload: []byte("x")})
	if err != nil {
		t.Fatalf("Submit to the node on the TLS database: %v", err)
	}
	if _, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: res.TaskID}); err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if code, out := runBin(t, "cluster", "status", "--mysql", dsn+"?tls=custom", "--mysql-tls-ca", k.path("ca.pem")); code != 0 || !strings.Contains(out, "n1") {
		t.Errorf("cluster status over TLS: exit %d:\n%s", code, out)
	}
}
