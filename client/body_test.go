package client

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
