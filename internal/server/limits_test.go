package server_test

// Hostile and broken clients (docs/guides/limits.md): stalled bodies,
// oversized bodies in parallel, a long-poll flood, a connection flood,
// refused heartbeats by the thousand. Each test sets the limit small,
// plays the attacker against a real HTTP server on loopback, and checks
// that the server cut the attacker off (and counted it in its metrics)
// while a normal client kept being served. The deadlines below only stop
// a hung test: they are far above the limits configured, and nothing
// asserts how fast anything happens.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// hostileTimeout bounds how long a test waits for the server to act on a
// hostile client; the limits under test are set to a small fraction of it.
const hostileTimeout = 20 * time.Second

// limitEnv is a node behind the API, served as `tenure server` serves it
// (the http.Server's timeouts and ConnState, the capped Listener), with
// metrics, and a normal client.
type limitEnv struct {
	n      *node.Node
	m      *metrics.Metrics
	addr   string
	url    string
	read   atomic.Int64 // bytes the server read from all its connections
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
	e := &limitEnv{n: n}
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	api := server.New(e.n.Router(), server.Options{Load: load, Metrics: m})
	l := load.WithDefaults()
	srv := &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		WriteTimeout:      l.WriteTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ConnState:         api.ConnState,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.url = "http://" + e.addr
	go srv.Serve(api.Listener(&countingListener{Listener: ln, n: &e.read}))
	t.Cleanup(func() {
		api.Drain()
		srv.Close()
	})
	e.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	t.Cleanup(e.hc.CloseIdleConnections)
	e.tasks = tenurev1connect.NewTaskServiceClient(e.hc, e.url)
	e.worker = tenurev1connect.NewWorkerServiceClient(e.hc, e.url)
	return e
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

// TestStalledBodies: 300 connections send a request's headers and half
// its body, then stop. Each is answered deadline_exceeded and closed by
// the server once --body-read-timeout (200ms here) passes; a normal client
// is served meanwhile. Over HTTP/2, the stalled streams are answered the
// same way and their connection keeps serving.
func TestStalledBodies(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{BodyReadTimeout: 200 * time.Millisecond})
	head := "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + `{"queue":"q","payload":"`
	conns := make([]net.Conn, 300)
	for i := range conns {
		conns[i] = dial(t, e.addr, head)
	}
	e.served(t, "normal")
	var closed, answered atomic.Int64
	eachConn(conns, func(_ int, c net.Conn) {
		got, ok := closedByServer(c, hostileTimeout)
		if ok {
			closed.Add(1)
		}
		if bytes.Contains(got, []byte("deadline_exceeded")) && bytes.Contains(got, []byte("body-read-timeout")) {
			answered.Add(1)
		}
	})
	if closed.Load() != int64(len(conns)) || answered.Load() != int64(len(conns)) {
		t.Errorf("of %d stalled connections, the server closed %d and answered %d deadline_exceeded; want all", len(conns), closed.Load(), answered.Load())
	}
	if got := e.hits(t, server.LimitBodyReadTimeout); got != len(conns) {
		t.Errorf("%s hits = %d, want %d", server.LimitBodyReadTimeout, got, len(conns))
	}

	// HTTP/2: 50 streams on one connection, each stalled mid-body.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	defer h2.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var h2answered atomic.Int64
	for range 50 {
		wg.Go(func() {
			pr, pw := io.Pipe()
			defer pw.Close()
			go io.WriteString(pw, `{"queue":"q","payload":"`)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+submitProc, pr)
			req.Header.Set("Content-Type", "application/json")
			resp, err := h2.Do(req)
			if err != nil {
				t.Errorf("stalled HTTP/2 stream: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor == 2 && bytes.Contains(body, []byte("deadline_exceeded")) {
				h2answered.Add(1)
			}
		})
	}
	wg.Wait()
	if h2answered.Load() != 50 {
		t.Errorf("%d of 50 stalled HTTP/2 streams were answered deadline_exceeded, want all", h2answered.Load())
	}
	hc := tenurev1connect.NewTaskServiceClient(h2, e.url, connect.WithGRPC())
	if _, err := hc.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "h2"})); err != nil {
		t.Errorf("a gRPC Submit after the stalled streams: %v", err)
	}
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

// TestOversizedBodiesInParallel: 40 clients at once send Submits of 15
// MiB, over the Submit cap (its payload limit as base64 plus 64 KiB).
// Each is refused 413 resource_exhausted, naming the payload limit, before
// its body is read: the server then reads and throws away what the client
// still sends (at most --max-discard-bytes), so the client gets the
// answer, and none is held. A normal client is served meanwhile. Without a
// Content-Length (chunked), a body is cut off just past the cap;
// compressed, once decompressed past it.
func TestOversizedBodiesInParallel(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{})
	const clients, size = 40, 15 << 20
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			status, code, err := post(ctx, hc, e.url, submitProc, &patternBody{size}, size, i%2 == 1, nil)
			if err != nil || status != http.StatusRequestEntityTooLarge || !strings.HasPrefix(code, "resource_exhausted: ") || !strings.Contains(code, "payload") {
				t.Errorf("a 15 MiB Submit was answered %d %s (%v), want 413 resource_exhausted naming the payload limit", status, code, err)
			}
		})
	}
	e.served(t, "normal")
	wg.Wait()
	if got := e.hits(t, server.LimitRequestBytes); got != clients {
		t.Errorf("%s hits = %d, want %d", server.LimitRequestBytes, got, clients)
	}

	// A gzip body that inflates past the cap.
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.Copy(zw, io.MultiReader(strings.NewReader(`{"queue":"q","payload":"`), &patternBody{size}, strings.NewReader(`"}`)))
	zw.Close()
	status, code, err := post(ctx, hc, e.url, submitProc, bytes.NewReader(zipped.Bytes()), int64(zipped.Len()), false, http.Header{"Content-Encoding": {"gzip"}})
	if err != nil || status != http.StatusRequestEntityTooLarge || !strings.HasPrefix(code, "resource_exhausted") {
		t.Errorf("a gzip Submit of %d bytes that inflates to %d: %d %s %v, want 413 resource_exhausted", zipped.Len(), size, status, code, err)
	}
	e.served(t, "after")
}

// stalledBody sends first bytes, then waits for go before sending the rest.
type stalledBody struct {
	first, rest io.Reader
	goOn        <-chan struct{}
	waited      bool
}

func (b *stalledBody) Read(p []byte) (int, error) {
	n, err := b.first.Read(p)
	if err != io.EOF {
		return n, err
	}
	if !b.waited {
		<-b.goOn
		b.waited = true
	}
	return b.rest.Read(p)
}

// TestInflightBodyBytes: 40 clients at once send batches of 8 MiB
// (within the batch cap), 1 MiB of each and then nothing for a while. The
// bodies being read at once stay within --max-inflight-request-bytes (64
// MiB, an eighth of it kept for bodies of at most 64 KiB): seven are
// read, the other 33 wait for room and are answered unavailable (retry),
// and a normal client's small requests still fit, in the share kept for
// them. Once the seven send the rest, they are answered as their content
// deserves (invalid JSON).
func TestInflightBodyBytes(t *testing.T) {
	t.Parallel()
	const budget = 64 << 20
	e := newLimitEnv(t, server.LoadLimits{MaxInflightBodyBytes: budget})
	const clients, size = 40, 8 << 20
	const admitted = (budget - budget/8) / size
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	goOn := make(chan struct{})
	answers := make(chan string, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			const head = `{"requests":[{"queue":"q","payload":"`
			body := &stalledBody{
				first: io.MultiReader(strings.NewReader(head), &patternBody{1 << 20}),
				rest:  &patternBody{size - 1<<20 - int64(len(head))},
				goOn:  goOn,
			}
			status, code, err := post(ctx, hc, e.url, submitBatchProc, body, size, false, nil)
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- fmt.Sprintf("%d %s", status, code)
		})
	}
	var unavailable int
	for unavailable < clients-admitted {
		select {
		case a := <-answers:
			if !strings.HasPrefix(a, "503 unavailable: ") || !strings.Contains(a, "--max-inflight-request-bytes") {
				t.Fatalf("a batch was answered %q while %d held the byte budget, want unavailable naming --max-inflight-request-bytes", a, admitted)
			}
			unavailable++
		case <-ctx.Done():
			t.Fatalf("%d of %d batches were refused for want of room before the deadline, want %d", unavailable, clients, clients-admitted)
		}
	}
	e.served(t, "normal") // small bodies fit beside the large ones
	close(goOn)
	wg.Wait()
	close(answers)
	for a := range answers {
		if !strings.HasPrefix(a, "400 invalid_argument: ") {
			t.Errorf("a batch read in full was answered %q, want invalid_argument (its JSON is broken)", a)
		}
	}
	if got := e.hits(t, server.LimitInflightBytes); got != clients-admitted {
		t.Errorf("%s hits = %d, want %d", server.LimitInflightBytes, got, clients-admitted)
	}
}

// TestLongPollFlood: workers flood the server with Lease calls that wait.
// One worker id gets --max-long-polls-per-worker (3 here) waiting at once
// and the server --max-long-polls (20); past them a Lease that would wait
// is answered resource_exhausted at once, naming the limit. A normal
// client (submit, lease without waiting) is served throughout, and once
// the flood ends long-polls are admitted again.
func TestLongPollFlood(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{MaxLongPolls: 20, MaxLongPollsPerWorker: 3})
	flood, stop := context.WithCancel(t.Context())
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	poll := func(ctx context.Context, worker string, wait time.Duration) error {
		_, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: worker, Queue: "flood", Wait: durationpb.New(wait)}))
		return err
	}
	// refusedEventually polls as worker until the server refuses it with
	// resource_exhausted naming flag (the flood's long-polls may still be
	// on their way in), and returns the refusal's detail.
	refusedEventually := func(worker, flag string) *tenurev1.ErrorDetail {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
		defer cancel()
		for {
			err := poll(ctx, worker, 50*time.Millisecond)
			var ce *connect.Error
			if errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted {
				if !strings.Contains(ce.Message(), flag) {
					t.Errorf("refusal %q does not name %s", ce.Message(), flag)
				}
				for _, d := range ce.Details() {
					if v, err := d.Value(); err == nil {
						if ed, ok := v.(*tenurev1.ErrorDetail); ok {
							return ed
						}
					}
				}
				t.Fatalf("refusal %v carries no ErrorDetail", ce)
			}
			if err != nil && ctx.Err() == nil {
				t.Fatalf("Lease of %s: %v, want it admitted or refused resource_exhausted", worker, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("the server never refused a long-poll of %s with %s", worker, flag)
			}
		}
	}
	// A flood long-poll retries until admitted: a probe may hold a slot
	// for a moment.
	spawn := func(worker string) {
		wg.Go(func() {
			for flood.Err() == nil {
				err := poll(flood, worker, 30*time.Second)
				if connect.CodeOf(err) == connect.CodeResourceExhausted {
					continue
				}
				if err != nil && flood.Err() == nil {
					t.Errorf("flood long-poll of %s: %v", worker, err)
				}
				return
			}
		})
	}

	for range 3 {
		spawn("greedy")
	}
	d := refusedEventually("greedy", "--max-long-polls-per-worker")
	if d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE || d.GetField() != "wait" || d.GetLimit() != 3 {
		t.Errorf("per-worker refusal detail %v, want TOO_LARGE, field wait, limit 3", d)
	}
	e.served(t, "normal-1")
	for i := range 17 {
		spawn(fmt.Sprintf("w%d", i))
	}
	d = refusedEventually("newcomer", "--max-long-polls")
	if d.GetField() != "wait" || d.GetLimit() != 20 {
		t.Errorf("server-wide refusal detail %v, want field wait, limit 20", d)
	}
	e.served(t, "normal-2")
	if e.hits(t, server.LimitLongPollsPerWorker) < 1 || e.hits(t, server.LimitLongPolls) < 1 {
		t.Errorf("hits: %s %d, %s %d; want both counted", server.LimitLongPollsPerWorker, e.hits(t, server.LimitLongPollsPerWorker),
			server.LimitLongPolls, e.hits(t, server.LimitLongPolls))
	}

	// The server sees the flood's calls end as their connections close.
	stop()
	wg.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	for {
		err := poll(ctx, "newcomer", 10*time.Millisecond)
		if err == nil {
			break
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || ctx.Err() != nil {
			t.Fatalf("a long-poll after the flood ended: %v, want it admitted", err)
		}
	}
}

// TestConnectionFlood: 150 connections open at once and send part of a
// request's headers. --max-connections (50 here) are kept — their header
// timeout is long in this test — and the other 100 are closed at once. A
// normal client is served once the flood lets go; below the cap, it is
// served beside it.
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{MaxConnections: 50, ReadHeaderTimeout: time.Hour})
	const partial = "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\n"
	conns := make([]net.Conn, 150)
	for i := range conns {
		conns[i] = dial(t, e.addr, partial)
	}
	// The server closes the excess at accept; the kept ones stay open
	// (their header timeout is an hour), so waiting 3 s tells them apart.
	var closed atomic.Int64
	eachConn(conns, func(_ int, c net.Conn) {
		if _, ok := closedByServer(c, 3*time.Second); ok {
			closed.Add(1)
		}
	})
	if closed.Load() != 100 {
		t.Errorf("the server closed %d of 150 connections at once, want the 100 past --max-connections 50", closed.Load())
	}
	if got := e.hits(t, server.LimitConnections); got != 100 {
		t.Errorf("%s hits = %d, want 100", server.LimitConnections, got)
	}

	for _, c := range conns {
		c.Close()
	}
	// The server sees the flood's connections end as it reads them; until
	// then a new connection may still be turned away, and the client
	// retries.
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	for {
		_, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "after"}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a normal client was not served after the flood ended: %v", err)
		}
	}
	below := make([]net.Conn, 40)
	for i := range below {
		below[i] = dial(t, e.addr, partial)
	}
	for range 5 {
		e.served(t, "beside")
	}
}

// TestHeaderTimeout: 50 connections send part of a request's headers and
// stop; another sends a whole request, then part of a second one. Each is
// closed once --read-header-timeout (1s here) passes, and counted; a
// keep-alive connection that only idles out (--idle-timeout, 2s) is
// closed without being counted as a hit.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second})
	const partial = "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\n"
	whole := "POST " + getProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	conns := make([]net.Conn, 50)
	for i := range conns {
		conns[i] = dial(t, e.addr, partial)
	}
	second := dial(t, e.addr, whole)
	br := bufio.NewReader(second)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer of a whole request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	io.WriteString(second, partial)
	idle := dial(t, e.addr, whole)
	e.served(t, "normal")

	var closed atomic.Int64
	eachConn(append(conns, second, idle), func(_ int, c net.Conn) {
		if _, ok := closedByServer(c, hostileTimeout); ok {
			closed.Add(1)
		}
	})
	if closed.Load() != 52 {
		t.Errorf("the server closed %d of 52 connections, want all (header and idle timeouts)", closed.Load())
	}
	if got := e.hits(t, server.LimitHeaderReadTimeout); got != 51 {
		t.Errorf("%s hits = %d, want 51 (the idle connection is not one)", server.LimitHeaderReadTimeout, got)
	}
}

// TestRefusedHeartbeatFlood: a worker whose lease expired, and callers
// with made-up lease ids, heartbeat a task a thousand times. The stale
// lease's refusals write at most its expiry and one TaskCancelled; the
// made-up leases write nothing.
func TestRefusedHeartbeatFlood(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{})
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	sub, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "hb", ExecutionWindow: durationpb.New(100 * time.Millisecond)}))
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.GetTask().GetTaskId()
	got, err := e.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "hb"}))
	if err != nil || len(got.Msg.GetTasks()) != 1 {
		t.Fatalf("Lease: %v %v", got, err)
	}
	stale := got.Msg.GetTasks()[0].GetLeaseId()
	// Wait until the lease has expired (its window is 100ms; the node
	// scans every 10ms).
	for {
		got, err := e.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Fatalf("GetTask: %v", err)
		}
		if got.Msg.GetTask().GetState() != tenurev1.TaskState_TASK_STATE_LEASED {
			break
		}
	}
	flood := func(lease func(i int) string) uint64 {
		before := e.n.Coordinator().Stats().LastLSN
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 125 {
					_, err := e.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lease(g*125 + i)}))
					if connect.CodeOf(err) != connect.CodeFailedPrecondition {
						t.Errorf("a refused heartbeat was answered %v, want failed_precondition", err)
						return
					}
				}
			})
		}
		wg.Wait()
		return e.n.Coordinator().Stats().LastLSN - before
	}
	if n := flood(func(int) string { return stale }); n != 1 {
		t.Errorf("1000 heartbeats by an expired lease wrote %d records, want 1 (one TaskCancelled)", n)
	}
	if n := flood(func(i int) string { return "made-up-" + strconv.Itoa(i) }); n != 0 {
		t.Errorf("1000 heartbeats by made-up leases wrote %d records, want none", n)
	}
}
