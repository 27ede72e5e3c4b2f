package client

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// countingConn counts the writes to a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// opaqueReader is a body net/http cannot tell is in memory, as Connect's
// is.
type opaqueReader struct{ r io.Reader }

func (o *opaqueReader) Read(p []byte) (int, error) { return o.r.Read(p) }
func (o *opaqueReader) Close() error               { return nil }

// TestInMemoryBodiesOneWrite checks that a request of known length goes
// out in one write, headers and body together, and arrives whole; without
// inMemoryBodies the transport writes the headers first.
func TestInMemoryBodiesOneWrite(t *testing.T) {
	got := make(chan []byte, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer srv.Close()
	body := []byte(strings.Repeat("tenure ", 1000)) // 7000 bytes: more than the default 4 KiB buffer
	for _, tc := range []struct {
		name   string
		wrap   bool
		writes int64
	}{{"in memory", true, 1}, {"as given", false, 2}} {
		var writes atomic.Int64
		hc := DefaultHTTPClient(ProtocolConnect)
		hc.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingConn{c, &writes}, err
		}
		var d interface {
			Do(*http.Request) (*http.Response, error)
		} = hc
		if tc.wrap {
			d = inMemoryBodies{hc}
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL, &opaqueReader{bytes.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		resp, err := d.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if b := <-got; !bytes.Equal(b, body) {
			t.Fatalf("%s: the server got %d bytes, want the %d sent", tc.name, len(b), len(body))
		}
		if n := writes.Load(); n != tc.writes {
			t.Errorf("%s: %d writes for one request, want %d", tc.name, n, tc.writes)
		}
		hc.CloseIdleConnections()
	}
}

// countingReadsConn counts the reads of a connection that returned data.
type countingReadsConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingReadsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// TestDefaultHTTPClientReadsAnAnswerInOneRead checks that an answer of
// about 10 KiB (a lease of 64 small tasks) that arrives at once is read
// with one read, not three through the transport's default 4 KiB buffer.
func TestDefaultHTTPClientReadsAnAnswerInOneRead(t *testing.T) {
	body := strings.Repeat("tenure ", 1500) // 10,500 bytes
	answer := "HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The whole answer in one write, so that it arrives at once.
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		if buf.Reader.Buffered() > 0 {
			t.Error("the request came with more than its headers")
		}
		if _, err := conn.Write([]byte(answer)); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name       string
		bufferSize int // 0: DefaultHTTPClient's
		reads      int64
	}{{"DefaultHTTPClient", 0, 1}, {"the transport's default buffer", 4 << 10, 3}} {
		var reads atomic.Int64
		hc := DefaultHTTPClient(ProtocolConnect)
		tr := hc.Transport.(*http.Transport)
		if tc.bufferSize != 0 {
			tr.ReadBufferSize = tc.bufferSize
		}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingReadsConn{c, &reads}, err
		}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != body {
			t.Fatalf("%s: read %d bytes (%v), want the %d sent", tc.name, len(b), err, len(body))
		}
		if n := reads.Load(); n != tc.reads {
			t.Errorf("%s: %d reads for one answer, want %d", tc.name, n, tc.reads)
		}
		hc.CloseIdleConnections()
	}
}
