package server_test

// Refusals that reach clients which send their whole request before they
// read the answer (docs/guides/limits.md): Python's urllib and http.client,
// curl without Expect, many others. The server refuses such a request
// before reading it in full; it must still read (and throw away) what the
// client sends, within bounds, or the client sees a reset instead of the
// answer.

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
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
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// sendFirst is a client that sends a whole request — head, then body —
// before it reads a byte of the answer, over a connection of its own. It
// returns the answer and its body, or the error that cut it off (a reset
// while sending or reading).
func sendFirst(addr, head string, body io.Reader) (*http.Response, []byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	return sendFirstOn(c, head, body)
}

// sendFirstOn is sendFirst over c.
func sendFirstOn(c net.Conn, head string, body io.Reader) (*http.Response, []byte, error) {
	c.SetDeadline(time.Now().Add(hostileTimeout))
	if _, err := io.WriteString(c, head); err != nil {
		return nil, nil, fmt.Errorf("sending the headers: %w", err)
	}
	if _, err := io.Copy(c, body); err != nil {
		return nil, nil, fmt.Errorf("sending the body: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer's body: %w", err)
	}
	return resp, got, nil
}

// wireError decodes the JSON of a Connect unary error: its code and its
// tenure ErrorDetail (nil if it has none).
func wireError(body []byte) (string, *tenurev1.ErrorDetail, error) {
	var wire struct {
		Code    string `json:"code"`
		Details []struct{ Type, Value string }
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return "", nil, fmt.Errorf("the answer is not a Connect error (%v): %.200q", err, body)
	}
	for _, d := range wire.Details {
		if d.Type != "tenure.v1.ErrorDetail" {
			continue
		}
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			return "", nil, err
		}
		var td tenurev1.ErrorDetail
		if err := proto.Unmarshal(raw, &td); err != nil {
			return "", nil, err
		}
		return wire.Code, &td, nil
	}
	return wire.Code, nil, nil
}

// capSubmit is the cap of a Submit's body: the payload limit as base64,
// and 64 KiB.
const capSubmit = (1<<20+2)/3*4 + 64<<10

// checkRefusal checks that a send-first client got the documented refusal
// of a request over a size limit: status, code resource_exhausted, an
// ErrorDetail TOO_LARGE naming field (if not empty) and limit, and the
// connection closed after it.
func checkRefusal(resp *http.Response, body []byte, err error, status int, field string, limit int64) error {
	if err != nil {
		return err
	}
	code, d, err := wireError(body)
	switch {
	case err != nil:
		return err
	case resp.StatusCode != status || code != "resource_exhausted":
		return fmt.Errorf("answered %d %s, want %d resource_exhausted", resp.StatusCode, code, status)
	case d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE || d.GetField() != field || d.GetLimit() != limit:
		return fmt.Errorf("detail %v, want reason TOO_LARGE, field %q, limit %d", d, field, limit)
	case !resp.Close:
		return fmt.Errorf("answered without Connection: close (%v): the rest of the request would be read as the next", resp.Header)
	}
	return nil
}

// TestRefusalsReachSendFirstClients: clients that send their whole request
// before reading — 40 Submits of 2 MiB and 10 of 20 MiB with a
// Content-Length, 5 of 20 MiB chunked, 3 with a 2 MiB Authorization header
// — each get the documented refusal: 413 (431 for the headers)
// resource_exhausted with its ErrorDetail, and none a reset. They run ten
// at a time, and a normal client is served meanwhile.
func TestRefusalsReachSendFirstClients(t *testing.T) {
	t.Parallel()
	e := newLimitEnv(t, server.LoadLimits{})
	type client struct {
		name    string
		head    string
		body    int64
		chunked bool
		status  int
		field   string
		limit   int64
	}
	head := func(length int64, extra string) string {
		h := "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\n" + extra
		if length < 0 {
			return h + "Transfer-Encoding: chunked\r\n\r\n"
		}
		return h + fmt.Sprintf("Content-Length: %d\r\n\r\n", length)
	}
	var clients []client
	for range 40 {
		clients = append(clients, client{name: "2 MiB body", head: head(2<<20, ""), body: 2 << 20, status: http.StatusRequestEntityTooLarge, limit: capSubmit})
	}
	for range 10 {
		clients = append(clients, client{name: "20 MiB body", head: head(20<<20, ""), body: 20 << 20, status: http.StatusRequestEntityTooLarge, limit: capSubmit})
	}
	for range 5 {
		clients = append(clients, client{name: "20 MiB chunked body", head: head(-1, ""), body: 20 << 20, chunked: true, status: http.StatusRequestEntityTooLarge, limit: capSubmit})
	}
	for range 3 {
		auth := "Authorization: Bearer " + strings.Repeat("t", 2<<20) + "\r\n"
		clients = append(clients, client{name: "2 MiB Authorization header", head: head(2, auth), body: 2,
			status: http.StatusRequestHeaderFieldsTooLarge, field: "headers", limit: int64(server.DefaultLoadLimits.MaxHeaderBytes)})
	}

	var wg sync.WaitGroup
	var failed atomic.Int64
	slots := make(chan struct{}, 10)
	for _, c := range clients {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var body io.Reader = &patternBody{c.body}
			if c.chunked {
				body = chunked(body)
			}
			resp, got, err := sendFirst(e.addr, c.head, body)
			if err := checkRefusal(resp, got, err, c.status, c.field, c.limit); err != nil {
				failed.Add(1)
				t.Errorf("%s: %v", c.name, err)
			}
		})
	}
	e.served(t, "normal")
	wg.Wait()
	t.Logf("%d of %d send-first clients did not get the refusal", failed.Load(), len(clients))
	if got := e.hits(t, server.LimitRequestBytes); got != 55 {
		t.Errorf("%s hits = %d, want 55", server.LimitRequestBytes, got)
	}
	if got := e.hits(t, server.LimitHeaderBytes); got != 3 {
		t.Errorf("%s hits = %d, want 3", server.LimitHeaderBytes, got)
	}
	e.served(t, "after")
}

// chunked encodes r in HTTP/1.1 chunks of at most 64 KiB.
func chunked(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
					pw.CloseWithError(werr)
					return
				}
			}
			if err == io.EOF {
				_, err = io.WriteString(pw, "0\r\n\r\n")
				pw.CloseWithError(err)
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// TestDiscardBound: what the server reads of a refused request is bounded
// by --max-discard-bytes (1 MiB here): of a 20 MiB body refused by its
// Content-Length it reads at most that (and its headers' read buffer),
// then closes the connection, and counts the hit.
func TestDiscardBound(t *testing.T) {
	t.Parallel()
	const bound = 1 << 20
	e := newLimitEnv(t, server.LoadLimits{MaxDiscardBytes: bound})
	before := e.read.Load()
	c := dial(t, e.addr, "POST "+submitProc+" HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: 20971520\r\n\r\n")
	go io.Copy(c, &patternBody{20 << 20}) // until the server closes the connection
	if _, closed := closedByServer(c, hostileTimeout); !closed {
		t.Fatalf("the server did not close a connection that sent more than --max-discard-bytes of a refused body")
	}
	if read := e.read.Load() - before; read > bound+64<<10 {
		t.Errorf("the server read %d bytes of a refused 20 MiB body, want at most %d (--max-discard-bytes) and its headers' buffer", read, bound)
	}
	if got := e.hits(t, server.LimitDiscardBytes); got != 1 {
		t.Errorf("%s hits = %d, want 1", server.LimitDiscardBytes, got)
	}
}

// TestExhaustedStatus: a resource_exhausted answer is 413 when a request
// is over a size limit (sending it again fails again) and stays 429 when
// a limit on what is held at once refused it (long-polls: retry later).
func TestExhaustedStatus(t *testing.T) {
	t.Parallel()
	detail := func(d *tenurev1.ErrorDetail) string {
		raw, err := proto.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return `,"details":[{"type":"tenure.v1.ErrorDetail","value":"` + base64.RawStdEncoding.EncodeToString(raw) + `"}]`
	}
	tooLarge := tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"a payload over its limit", `{"code":"resource_exhausted","message":"m"` + detail(&tenurev1.ErrorDetail{Reason: tooLarge, Field: "payload", Size: 2, Limit: 1}) + `}`, 413},
		{"a body over its cap", `{"code":"resource_exhausted","message":"m"` + detail(&tenurev1.ErrorDetail{Reason: tooLarge, Size: 2, Limit: 1}) + `}`, 413},
		{"Connect's own cap of an inflated body", `{"code":"resource_exhausted","message":"m"}`, 413},
		{"too many long-polls", `{"code":"resource_exhausted","message":"m"` + detail(&tenurev1.ErrorDetail{Reason: tooLarge, Field: "wait", Size: 2, Limit: 1}) + `}`, 429},
		{"a full server", `{"code":"resource_exhausted","message":"m"` + detail(&tenurev1.ErrorDetail{Reason: tenurev1.ErrorReason_ERROR_REASON_FULL, Size: 2, Limit: 1}) + `}`, 429},
		{"another code", `{"code":"unavailable","message":"m"}`, 429},
		{"not JSON", `<html>`, 429},
	} {
		if got := server.ExhaustedStatus([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFullAnswer: a server at its memory budget (256 KiB here) answers a
// Submit over plain HTTP 429 with a Retry-After header (in whole seconds,
// rounded up) and the Connect error resource_exhausted with an
// ErrorDetail FULL that carries what it holds, its budget and the retry
// hint; it counts the refusal, and still serves a Lease.
func TestFullAnswer(t *testing.T) {
	t.Parallel()
	const limit = 256 << 10
	e := newLimitEnvOf(t, server.LoadLimits{}, apitest.OpenNodeConfig(t, coordinator.Config{Memory: coordinator.NewMemoryBudget(limit, 90500*time.Millisecond)}))
	body := `{"queue":"q","payload":"` + base64.StdEncoding.EncodeToString(make([]byte, 1<<10)) + `"}`
	var resp *http.Response
	var got []byte
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatalf("1000 submits of 1 KiB were all accepted under a budget of %d bytes", limit)
		}
		var err error
		resp, got, err = sendFirst(e.addr, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", submitProc, len(body)), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			break
		}
	}
	code, d, err := wireError(got)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "91" || code != "resource_exhausted" ||
		d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_FULL || d.GetLimit() != limit || d.GetSize() <= 0 || d.GetRetryAfter().AsDuration() != 90500*time.Millisecond {
		t.Fatalf("a Submit past the budget was answered %d (Retry-After %q) %s %v, want 429, Retry-After 91, resource_exhausted FULL with size, limit %d and retry_after 90.5s",
			resp.StatusCode, resp.Header.Get("Retry-After"), code, d, limit)
	}
	if got := e.hits(t, server.LimitMemory); got != 1 {
		t.Errorf("%s hits = %d, want 1", server.LimitMemory, got)
	}
	if _, err := e.worker.Lease(t.Context(), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "q"})); err != nil {
		t.Errorf("a Lease from a full server: %v", err)
	}
}
