package server_test

// The environment of the tests of limits: a node served as `tenure server`
// serves it, a normal client, and the raw clients hostile tests play.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/certgen/certtest"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// hostileTimeout bounds how long a test waits for the server to act on a
// hostile client; the limits under test are set to a small fraction of it.
const hostileTimeout = 20 * time.Second

// limitEnv is a node behind the API, served as `tenure server` serves it
// (Server.Serve), with metrics, and a normal client.
type limitEnv struct {
	n      *node.Node
	m      *metrics.Metrics
	addr   string
	url    string
	read   atomic.Int64 // bytes the server read from all its connections
	tls    *tls.Config  // a client's, with a client certificate, when the server serves TLS
	hc     *http.Client
	tasks  tenurev1connect.TaskServiceClient
	worker tenurev1connect.WorkerServiceClient
}

func newLimitEnv(t *testing.T, load server.LoadLimits) *limitEnv {
	t.Helper()
	return newLimitEnvOf(t, load, apitest.OpenNode(t))
}

// newLimitEnvOf is newLimitEnv of node n.
func newLimitEnvOf(t *testing.T, load server.LoadLimits, n *node.Node) *limitEnv {
	t.Helper()
	return newServedEnv(t, load, n, false)
}

// newServedEnv is newLimitEnvOf, served over TLS (client certificates
// required) if tlsOn. The normal client speaks HTTP/1.1, or over TLS
// HTTP/2 or HTTP/1.1 as ALPN chooses.
func newServedEnv(t *testing.T, load server.LoadLimits, n *node.Node, tlsOn bool) *limitEnv {
	t.Helper()
	e := &limitEnv{n: n}
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	var cfg server.HTTPConfig
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	if tlsOn {
		cfg.TLS, e.tls = mutualTLS(t)
		tr.TLSClientConfig = e.tls.Clone()
		tr.ForceAttemptHTTP2 = true
	}
	h := server.New(e.n.Router(), server.Options{Load: load, Metrics: m}).Serve(&countingListener{Listener: ln, n: &e.read}, cfg)
	t.Cleanup(h.Close)
	e.url = h.URL()
	e.hc = &http.Client{Transport: tr}
	t.Cleanup(e.hc.CloseIdleConnections)
	e.tasks = tenurev1connect.NewTaskServiceClient(e.hc, e.url)
	e.worker = tenurev1connect.NewWorkerServiceClient(e.hc, e.url)
	return e
}

// mutualTLS returns the TLS files of a server for 127.0.0.1 that requires
// client certificates of its CA, and the configuration of a client that
// trusts the CA and presents one.
func mutualTLS(t *testing.T) (*tlsfiles.Reloader, *tls.Config) {
	t.Helper()
	f := certtest.New(t, "test CA")
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := f.Client.TLS()
	if err != nil {
		t.Fatal(err)
	}
	return r, &tls.Config{RootCAs: f.CA.Pool(), Certificates: []tls.Certificate{pair}}
}

// conn opens a raw connection to the server (over TLS, with the client's
// certificate, if it serves TLS), for HTTP/1.1.
func (e *limitEnv) conn(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if e.tls == nil {
		return c
	}
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	return tc
}

// hits returns tenure_limit_hits_total{limit=limit} from the metrics
// (read without a connection: a flood may hold them all).
func (e *limitEnv) hits(t *testing.T, limit string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	e.m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	prefix := `tenure_limit_hits_total{limit="` + limit + `"} `
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(n)
		}
	}
	return 0
}

// served checks that a normal client is served: a submit and a lease
// that does not wait succeed.
func (e *limitEnv) served(t *testing.T, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	sub, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: queue, Payload: []byte("normal")}))
	if err != nil {
		t.Fatalf("a normal client's Submit failed: %v", err)
	}
	got, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "normal", Queue: queue}))
	if err != nil {
		t.Fatalf("a normal client's Lease failed: %v", err)
	}
	if len(got.Msg.GetTasks()) != 1 || got.Msg.GetTasks()[0].GetTaskId() != sub.Msg.GetTask().GetTaskId() {
		t.Fatalf("a normal client leased %v, want task %s", got.Msg.GetTasks(), sub.Msg.GetTask().GetTaskId())
	}
}

// countingListener counts the bytes the server reads.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// dial opens a raw connection to the server and sends head.
func dial(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatalf("sending %q: %v", head, err)
	}
	return c
}

// closedByServer reads c until the server closes it (EOF or reset), for at
// most d, and returns what it read and whether the server closed it.
func closedByServer(c net.Conn, d time.Duration) (got []byte, closed bool) {
	c.SetReadDeadline(time.Now().Add(d))
	got, err := io.ReadAll(c)
	var ne net.Error
	return got, !(errors.As(err, &ne) && ne.Timeout())
}

// eachConn runs fn on every connection at once and waits for all.
func eachConn(conns []net.Conn, fn func(i int, c net.Conn)) {
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { fn(i, c) })
	}
	wg.Wait()
}

// patternBody is n bytes of JSON-ish filler, made as it is read (a client
// that sends 15 MiB need not hold them).
type patternBody struct{ n int64 }

// filler is what patternBody copies from: filling byte by byte would cost
// the race detector seconds per hundred megabytes.
var filler = bytes.Repeat([]byte("A"), 64<<10)

func (b *patternBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(int64(len(p)), b.n)], filler)
	b.n -= int64(n)
	return n, nil
}

// post sends a JSON body of the given length to procedure (chunked if
// chunked) and returns the status and error code of the answer, or the
// transport's error (the server may close the connection while the body
// is still being sent).
func post(ctx context.Context, hc *http.Client, url, procedure string, body io.Reader, length int64, chunked bool, header http.Header) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+procedure, body)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	req.ContentLength = length
	if chunked {
		req.ContentLength = -1
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var eb connectErrorBody
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &eb)
	return resp.StatusCode, eb.Code + ": " + eb.Message, nil
}
