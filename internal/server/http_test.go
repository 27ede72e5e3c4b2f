package server_test

// The HTTP server every node runs, as Server.Serve assembles it: the
// protocols, the limits of LoadLimits on the connections, TLS, and how it
// stops. The hostile tests (limits_test.go, bodies_test.go,
// refusals_test.go) run against it too, in plain HTTP; here each limit
// that lives on the connection is checked once more over TLS. Nothing
// asserts how fast anything happens.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// eachMode runs fn as a subtest over plain HTTP (HTTP/1.1 and h2c) and
// over TLS (client certificates required).
func eachMode(t *testing.T, fn func(t *testing.T, tlsOn bool)) {
	for _, tlsOn := range []bool{false, true} {
		name := "h2c"
		if tlsOn {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, tlsOn)
		})
	}
}

// clientOf returns a client of e's server that speaks only HTTP/1.1 (h2
// false) or only HTTP/2 (unencrypted, or over TLS), with the client
// certificate if e serves TLS.
func clientOf(t *testing.T, e *limitEnv, h2 bool) *http.Client {
	var p http.Protocols
	switch {
	case !h2:
		p.SetHTTP1(true)
	case e.tls != nil:
		p.SetHTTP2(true)
	default:
		p.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{Protocols: &p}
	if e.tls != nil {
		tr.TLSClientConfig = e.tls.Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestServeProtocols: the server speaks HTTP/1.1 and HTTP/2 (h2c in
// plain HTTP, as ALPN chooses over TLS) and answers gRPC over HTTP/2.
// Over TLS it answers nothing in plain HTTP, and a client without a
// certificate reaches the probes only.
func TestServeProtocols(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, tlsOn bool) {
		e := newServedEnv(t, server.LoadLimits{}, apitest.OpenNode(t), tlsOn)
		for _, h2 := range []bool{false, true} {
			resp, err := clientOf(t, e, h2).Get(e.url + server.ReadyPath)
			if err != nil {
				t.Fatalf("GET %s (HTTP/2: %v): %v", server.ReadyPath, h2, err)
			}
			resp.Body.Close()
			if want := map[bool]int{false: 1, true: 2}[h2]; resp.StatusCode != http.StatusOK || resp.ProtoMajor != want {
				t.Errorf("GET %s: %d over %s, want 200 over HTTP/%d", server.ReadyPath, resp.StatusCode, resp.Proto, want)
			}
		}
		grpc := tenurev1connect.NewTaskServiceClient(clientOf(t, e, true), e.url, connect.WithGRPC())
		if _, err := grpc.Submit(t.Context(), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "grpc"})); err != nil {
			t.Errorf("a gRPC Submit: %v", err)
		}
		if !tlsOn {
			return
		}
		plain := strings.Replace(e.url, "https://", "http://", 1)
		if resp, err := http.Get(plain + server.ReadyPath); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("GET %s in plain HTTP of a TLS server: 200, want it refused", server.ReadyPath)
			}
		}
		anonymous := e.tls.Clone()
		anonymous.Certificates = nil
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: anonymous}}
		defer hc.CloseIdleConnections()
		for _, path := range []string{server.HealthPath, server.ReadyPath} {
			resp, err := hc.Get(e.url + path)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s without a client certificate: %v %v, want 200 (the probes are open)", path, resp, err)
			}
			if err == nil {
				resp.Body.Close()
			}
		}
		_, err := tenurev1connect.NewTaskServiceClient(hc, e.url).Submit(t.Context(), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "anonymous"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("a Submit without a client certificate: %v, want unauthenticated", err)
		}
	})
}

// TestServeConnectionLimits: the limits that live on connections hold,
// and are counted, in plain HTTP and over TLS alike — connections past
// --max-connections are closed at once; a client that stops sending its
// headers is cut off (--read-header-timeout); an answer that cannot be
// written in time (--write-timeout, shorter than a long-poll here) ends
// the connection; headers over --max-header-bytes are answered 431 (as
// the API's error in plain HTTP: over TLS net/http's own answer is what
// the client gets, docs/guides/limits.md).
func TestServeConnectionLimits(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, tlsOn bool) {
		e := newServedEnv(t, server.LoadLimits{MaxConnections: 3}, apitest.OpenNode(t), tlsOn)
		held := []net.Conn{e.conn(t), e.conn(t), e.conn(t)}
		past, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer past.Close()
		if got, closed := closedByServer(past, hostileTimeout); !closed || len(got) > 0 {
			t.Errorf("a connection past --max-connections 3: closed %v, read %q; want it closed at once", closed, got)
		}
		if got := e.hits(t, server.LimitConnections); got != 1 {
			t.Errorf("%s hits = %d, want 1", server.LimitConnections, got)
		}
		for _, c := range held {
			c.Close()
		}

		e = newServedEnv(t, server.LoadLimits{ReadHeaderTimeout: time.Second}, apitest.OpenNode(t), tlsOn)
		c := e.conn(t)
		io.WriteString(c, "POST "+submitProc+" HTTP/1.1\r\nHost: tenure\r\n")
		if _, closed := closedByServer(c, hostileTimeout); !closed {
			t.Errorf("a connection that stopped sending its headers was not closed (--read-header-timeout 1s)")
		}
		if got := e.hits(t, server.LimitHeaderReadTimeout); got != 1 {
			t.Errorf("%s hits = %d, want 1", server.LimitHeaderReadTimeout, got)
		}

		e = newServedEnv(t, server.LoadLimits{WriteTimeout: time.Second}, apitest.OpenNode(t), tlsOn)
		c = e.conn(t)
		lease := `{"workerId":"w","queue":"empty","wait":"3s"}`
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", leaseProc, len(lease), lease)
		if got, closed := closedByServer(c, hostileTimeout); !closed || bytes.Contains(got, []byte("HTTP/1.1 200")) {
			t.Errorf("a long-poll of 3s past --write-timeout 1s: closed %v, read %q; want the connection closed without an answer", closed, got)
		}
		if got := e.hits(t, server.LimitWriteTimeout); got != 1 {
			t.Errorf("%s hits = %d, want 1", server.LimitWriteTimeout, got)
		}

		const maxHeader = 4 << 10
		e = newServedEnv(t, server.LoadLimits{MaxHeaderBytes: maxHeader}, apitest.OpenNode(t), tlsOn)
		head := "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
			strings.Repeat("t", 64<<10) + "\r\nContent-Length: 2\r\n\r\n"
		resp, body, err := sendFirstOn(e.conn(t), head, strings.NewReader("{}"))
		switch {
		case tlsOn && err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge:
			t.Errorf("64 KiB of headers over TLS: %d %q, want 431", resp.StatusCode, body)
		case tlsOn && err != nil:
			t.Errorf("64 KiB of headers over TLS: %v, want 431", err)
		case !tlsOn:
			if err := checkRefusal(resp, body, err, http.StatusRequestHeaderFieldsTooLarge, "headers", maxHeader); err != nil {
				t.Errorf("64 KiB of headers: %v", err)
			}
			if got := e.hits(t, server.LimitHeaderBytes); got != 1 {
				t.Errorf("%s hits = %d, want 1", server.LimitHeaderBytes, got)
			}
		}
	})
}

// TestServeOversizedBodyAnswered: a client that sends a whole Submit over
// its cap before it reads — with a Content-Length, and chunked — gets the
// 413 refusal, not a reset, in plain HTTP and over TLS: the server reads
// and throws away the rest of the body before it closes (conns.go).
func TestServeOversizedBodyAnswered(t *testing.T) {
	t.Parallel()
	eachMode(t, func(t *testing.T, tlsOn bool) {
		e := newServedEnv(t, server.LoadLimits{}, apitest.OpenNode(t), tlsOn)
		const size = 4 << 20
		for _, chunk := range []bool{false, true} {
			head := "POST " + submitProc + " HTTP/1.1\r\nHost: tenure\r\nContent-Type: application/json\r\n"
			var body io.Reader = &patternBody{size}
			if chunk {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = chunked(body)
			} else {
				head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
			}
			resp, got, err := sendFirstOn(e.conn(t), head, body)
			if err := checkRefusal(resp, got, err, http.StatusRequestEntityTooLarge, "", capSubmit); err != nil {
				t.Errorf("a 4 MiB Submit sent whole (chunked: %v): %v", chunk, err)
			}
		}
		if got := e.hits(t, server.LimitRequestBytes); got != 2 {
			t.Errorf("%s hits = %d, want 2", server.LimitRequestBytes, got)
		}
		e.served(t, "after")
	})
}

// TestServeShutdown: Shutdown ends a long-poll at once (it answers no
// task), lets a request in flight finish and be answered, and leaves Done
// closed and Err nil.
func TestServeShutdown(t *testing.T) {
	t.Parallel()
	started, release, leasing := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := serveWrapped(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case leaseProc:
				close(leasing)
			case "/slow":
				close(started)
				<-release
				io.WriteString(w, "finished")
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithTimeout(t.Context(), hostileTimeout)
	defer cancel()
	worker := tenurev1connect.NewWorkerServiceClient(http.DefaultClient, h.URL())
	polled := make(chan error, 1)
	go func() {
		resp, err := worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "empty", Wait: durationpb.New(20 * time.Second)}))
		if err == nil && len(resp.Msg.GetTasks()) > 0 {
			err = fmt.Errorf("leased %v from an empty queue", resp.Msg.GetTasks())
		}
		polled <- err
	}()
	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get(h.URL() + "/slow")
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- string(b)
	}()
	<-started
	<-leasing
	shut := make(chan error, 1)
	go func() { shut <- h.Shutdown(ctx) }()
	// The long-poll is answered while the slow request still runs.
	if err := <-polled; err != nil {
		t.Errorf("a long-poll at Shutdown: %v, want an answer without a task", err)
	}
	close(release)
	if got := <-answered; got != "finished" {
		t.Errorf("a request in flight at Shutdown got %q, want its answer", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	select {
	case <-h.Done():
	default:
		t.Errorf("Done is open after Shutdown returned")
	}
	if err := h.Err(); err != nil {
		t.Errorf("Err after Shutdown: %v, want nil", err)
	}
}

// serveWrapped serves a node's API on a loopback port with its handler
// wrapped by wrap, until the test ends.
func serveWrapped(t *testing.T, wrap func(http.Handler) http.Handler) *server.HTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := server.New(apitest.OpenNode(t).Router(), server.Options{}).Serve(ln, server.HTTPConfig{Wrap: wrap})
	t.Cleanup(h.Close)
	return h
}

// TestServeClose: Close cuts a request in flight, and returns only once
// its handler has returned.
func TestServeClose(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []string
	event := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	started, cut, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := serveWrapped(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			close(cut)
			<-release
			event("handler returned")
		})
	})
	go http.Get(h.URL() + "/cut")
	<-started
	closed := make(chan struct{})
	go func() {
		h.Close()
		event("Close returned")
		close(closed)
	}()
	<-cut
	close(release)
	<-closed
	if want := []string{"handler returned", "Close returned"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v: Close must wait for the handlers it cut", events, want)
	}
}

// TestServeListenerFails: serving on a listener that fails stops, and
// Err says why.
func TestServeListenerFails(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	h := server.New(apitest.OpenNode(t).Router(), server.Options{}).Serve(ln, server.HTTPConfig{})
	defer h.Close()
	<-h.Done()
	if err := h.Err(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Err of a server on a closed listener: %v, want the listener's error", err)
	}
}
