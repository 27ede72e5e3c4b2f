package e2e

// Hostile clients against the real binary (docs/guides/limits.md): its
// memory under oversized bodies sent in parallel, and its flags' limits
// wired and counted at GET /metrics, or refused out of range. The
// in-process tests of each limit are in internal/server/limits_test.go.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// hostileMemoryBound is the most memory (peak resident set) a server with
// the default limits may use while 160 clients at once send it 15 MiB
// bodies (docs/guides/limits.md): 32 MiB and five times the default
// --max-inflight-request-bytes (64 MiB), since a body's read buffer grows
// to twice its size and Go's collector lets the heap grow to twice what is
// live. Without the limits it took 2.2 GB.
const hostileMemoryBound = 32<<20 + 5*64<<20

// peakRSS returns the peak resident set of process pid (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	return procStatusBytes(t, pid, "VmHWM")
}

// TestOversizedBodiesMemory: 160 clients at once send 15 MiB bodies to a
// server with the default limits: Submits with a Content-Length, chunked,
// and over gRPC (each over the Submit cap: refused unread or cut off, or a
// chunked one refused for want of room), and
// batches within the batch cap whose JSON breaks at the end (read, then
// refused; at most --max-inflight-request-bytes of them at once, the rest
// answered unavailable). Its peak memory stays under hostileMemoryBound,
// and a normal client is served throughout. It runs alone (not in
// parallel): it moves hundreds of megabytes through loopback.
func TestOversizedBodiesMemory(t *testing.T) {
	srv := startServerProc(t, t.TempDir())
	var usual time.Duration // the slowest of a normal client's calls before the attack
	{
		normal := newJSONClients(t, srv)
		for range 20 {
			usual = max(usual, normalCall(t, context.Background(), normal))
		}
		normal.close()
	}
	base := peakRSS(t, srv.cmd.Process.Pid)
	const clients, size = 40, 15 << 20
	big := bytes.Repeat([]byte("A"), size)
	batch := append([]byte(`{"requests":[{"queue":"q","payload":"`), big[:size-64]...) // never closed: invalid JSON

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	// gRPC over unencrypted HTTP/2, one message built once.
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	grpc := &http.Client{Transport: &http.Transport{Protocols: &h2}}
	defer grpc.CloseIdleConnections()
	msg, err := proto.Marshal(&tenurev1.SubmitRequest{Queue: "q", Payload: big})
	if err != nil {
		t.Fatal(err)
	}
	envelope := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	envelope = append(envelope, msg...)
	sendGRPC := func() string {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.url()+tenurev1connect.TaskServiceSubmitProcedure, bytes.NewReader(envelope))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		resp, err := grpc.Do(req)
		if err != nil {
			return "cut off"
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		code := resp.Trailer.Get("Grpc-Status")
		if code == "" {
			code = resp.Header.Get("Grpc-Status") // a trailers-only answer
		}
		if n, err := strconv.Atoi(code); err == nil {
			return connect.Code(n).String()
		}
		return "grpc-status " + code
	}
	send := func(path string, body []byte, chunked bool) string {
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: sent chunked
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.url()+path, r)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return "cut off" // the server closed the connection under the sender
		}
		defer resp.Body.Close()
		var eb struct{ Code string }
		raw, _ := io.ReadAll(resp.Body)
		json := string(raw)
		if i := strings.Index(json, `"code":"`); i >= 0 {
			eb.Code, _, _ = strings.Cut(json[i+8:], `"`)
		}
		return eb.Code
	}
	type outcome struct{ kind, answer string }
	var mu sync.Mutex
	outcomes := map[outcome]int{}
	count := func(kind, answer string) {
		mu.Lock()
		outcomes[outcome{kind, answer}]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() { count("submit", send(tenurev1connect.TaskServiceSubmitProcedure, big, false)) })
		wg.Go(func() { count("chunked submit", send(tenurev1connect.TaskServiceSubmitProcedure, big, true)) })
		wg.Go(func() { count("batch", send(tenurev1connect.TaskServiceSubmitBatchProcedure, batch, false)) })
		wg.Go(func() { count("grpc submit", sendGRPC()) })
	}
	// A normal client, meanwhile.
	normal := newJSONClients(t, srv)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var served int
	var slowest time.Duration
	for loop := true; loop; served++ {
		select {
		case <-done:
			loop = false
		default:
		}
		slowest = max(slowest, normalCall(t, ctx, normal))
	}
	peak := peakRSS(t, srv.cmd.Process.Pid)
	t.Logf("outcomes %v; a normal client's submit and lease took at most %v before the attack and %v in %d rounds during it; server peak RSS %d MiB (%d MiB before the attack)",
		outcomes, usual, slowest, served, peak>>20, base>>20)
	for o, n := range outcomes {
		// A chunked body takes room for its whole cap before it is read:
		// it may be refused for want of room, before its size is known.
		ok := o.answer == "resource_exhausted" || o.answer == "cut off" || o.kind == "chunked submit" && o.answer == "unavailable"
		if o.kind == "batch" {
			ok = o.answer == "invalid_argument" || o.answer == "unavailable" || o.answer == "cut off"
		}
		if !ok {
			t.Errorf("%d %s bodies were answered %q", n, o.kind, o.answer)
		}
	}
	if peak > hostileMemoryBound {
		t.Errorf("the server's peak memory was %d MiB, over the bound of %d MiB", peak>>20, hostileMemoryBound>>20)
	}
}

// TestLimitFlags: the limits' flags reach the server. With
// --body-read-timeout and --read-header-timeout at 200ms, connections
// that stall in their headers or their body are closed; past
// --max-connections one is closed at once; each is counted in GET
// /metrics.
func TestLimitFlags(t *testing.T) {
	t.Parallel()
	timeouts := startServerProc(t, t.TempDir(), "--body-read-timeout", "200ms", "--read-header-timeout", "200ms")
	capped := startServerProc(t, t.TempDir(), "--max-connections", "20")
	const partialHeaders = "POST /tenure.v1.TaskService/Submit HTTP/1.1\r\nHost: tenure\r\n"
	const partialBody = partialHeaders + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"queue\":"

	// stall opens n connections to srv that send part of their headers
	// (even ones) or of their body (odd ones), and returns how many the
	// server closed within d.
	stall := func(srv *serverProc, n int, d time.Duration) int {
		var wg sync.WaitGroup
		var closed atomic.Int64
		for i := range n {
			c, err := net.Dial("tcp", srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			head := partialHeaders
			if i%2 == 1 {
				head = partialBody
			}
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				c.SetReadDeadline(time.Now().Add(d))
				_, err := io.ReadAll(c)
				if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
					closed.Add(1)
				}
			})
		}
		wg.Wait()
		return int(closed.Load())
	}
	if n := stall(timeouts, 20, e2eCallTimeout); n != 20 {
		t.Errorf("with 200ms timeouts, the server closed %d of 20 stalled connections, want all", n)
	}
	if h, failed := limitHits(t, timeouts); h["header_read_timeout"] < 10 || h["header_read_timeout"] > 10+failed || h["body_read_timeout"] != 10 {
		t.Errorf("limit hits %v, want 10 header (and %d failed scrapes at most) and 10 body read timeouts", h, failed)
	}
	// The header timeout is 10s here: only the connections past the cap
	// are closed within 3s. The readiness probe's connection, closed by the
	// client, may not be closed by the server yet when the stall begins:
	// then it holds one of the 20.
	n := stall(capped, 30, 3*time.Second)
	if n != 10 && n != 11 {
		t.Errorf("with --max-connections 20, the server closed %d of 30 connections at once, want 10 (11 if the readiness probe's was still open)", n)
	}
	if h, failed := limitHits(t, capped); h["connections"] != n+failed {
		t.Errorf("limit hits %v, want %d connections (those closed at once, and %d scrapes refused)", h, n+failed, failed)
	}
}

// normalCall is a normal client's submit and lease, which must succeed;
// it returns how long they took.
func normalCall(t *testing.T, ctx context.Context, c *apiClients) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	defer cancel()
	start := time.Now()
	_, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "normal", Payload: []byte("x")}))
	if err == nil {
		_, err = c.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "normal", Queue: "normal"}))
	}
	if err != nil {
		t.Fatalf("a normal client's submit and lease failed: %v", err)
	}
	return time.Since(start)
}

// limitHits returns tenure_limit_hits_total by limit, from srv's GET
// /metrics, and how many scrapes failed first. A scrape is retried: with a
// 200ms --read-header-timeout, a busy test process may be too slow to send
// its own request's headers, and right after connections at the cap close,
// the server may not have seen them go; each failed scrape is itself a hit.
func limitHits(t *testing.T, srv *serverProc) (hits map[string]int, failed int) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var text string
	eventually.NoError(t, "a scrape of GET /metrics", func() error {
		var err error
		_, text, err = httpGet(t.Context(), hc, srv.url()+"/metrics", "")
		if err != nil {
			failed++
		}
		return err
	})
	hits = map[string]int{}
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, `tenure_limit_hits_total{limit="`); ok {
			name, v, _ := strings.Cut(rest, `"} `)
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			hits[name] = n
		}
	}
	return hits, failed
}
