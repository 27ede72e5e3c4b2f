package server_test

// Hostile bodies (docs/guides/limits.md): stalled, oversized in parallel,
// more at once than the byte budget holds. As in limits_test.go, nothing
// asserts how fast anything happens.

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

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
