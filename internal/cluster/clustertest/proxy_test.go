package clustertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// hangTimeout only fails a test that would otherwise hang; no assertion
// depends on it.
const hangTimeout = 30 * time.Second

// testServer is a loopback TCP server running handle on every connection.
type testServer struct {
	ln       net.Listener
	accepted atomic.Int32
	ended    chan error // the error each handler ends with, in order
	wg       sync.WaitGroup
}

func newTestServer(t *testing.T, handle func(net.Conn) error) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{ln: ln, ended: make(chan error, 100)}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.wg.Go(func() {
				defer c.Close()
				s.ended <- handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *testServer) addr() string { return s.ln.Addr().String() }

// echo writes back what it reads until the client closes.
func echo(c net.Conn) error {
	_, err := io.Copy(c, c)
	return err
}

// within runs f and fails the test if it does not return in hangTimeout.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s: still blocked after %v", what, hangTimeout)
		panic("unreachable")
	}
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// noDataThrough dials addr, which is expected to close or refuse the
// connection at once, and checks that nothing comes back. A failed dial also
// passes: the connection can be reset before the dial has finished.
func noDataThrough(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Logf("dial refused: %v", err)
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte("anyone?")) // may fail already
	if n, err := readOne(t, c); err == nil || n != 0 {
		t.Fatalf("Read = %d, %v; want 0 bytes and an error or EOF", n, err)
	}
}

// roundTrip sends msg through c and checks it comes back unchanged.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	err := within(t, "echo round trip", func() error {
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(msg)
			errc <- err
		}()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if err := <-errc; err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return errors.New("echoed bytes differ from those sent")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("round trip through proxy: %v", err)
	}
}

// readOne reads from c and returns what a single Read got.
func readOne(t *testing.T, c net.Conn) (int, error) {
	t.Helper()
	r := within(t, "Read", func() readResult {
		b := make([]byte, 64)
		n, err := c.Read(b)
		return readResult{b[:n], err}
	})
	return len(r.b), r.err
}

type readResult struct {
	b   []byte
	err error
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestProxyForwardsBothWays(t *testing.T) {
	srv := newTestServer(t, echo)
	p := NewProxy(t, srv.addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr = %q, want 127.0.0.1:port", p.Addr())
	}

	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("hello"))
	// More than the socket buffers hold, so both directions must flow at
	// the same time.
	roundTrip(t, c, randomBytes(4<<20))
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns = %d with one connection open, want 1", n)
	}

	c2 := dial(t, p.Addr())
	roundTrip(t, c2, []byte("second"))
	if n := p.Conns(); n != 2 {
		t.Errorf("Conns = %d with two connections open, want 2", n)
	}
}

func TestProxyHalfClose(t *testing.T) {
	// The server answers only after the client has finished sending, so
	// the answer must come through after the client's half-close.
	srv := newTestServer(t, func(c net.Conn) error {
		req, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if _, err := c.Write(append([]byte("got:"), req...)); err != nil {
			return err
		}
		return c.(*net.TCPConn).CloseWrite()
	})
	p := NewProxy(t, srv.addr())

	c := dial(t, p.Addr())
	r := within(t, "half-closed exchange", func() readResult {
		if _, err := c.Write([]byte("request")); err != nil {
			return readResult{err: err}
		}
		if err := c.CloseWrite(); err != nil {
			return readResult{err: err}
		}
		b, err := io.ReadAll(c)
		return readResult{b: b, err: err}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	got := r.b
	if string(got) != "got:request" {
		t.Fatalf("answer after half-close = %q, want %q", got, "got:request")
	}
	if err := within(t, "server handler", func() error { return <-srv.ended }); err != nil {
		t.Fatalf("server: %v", err)
	}
}

func TestProxyCutAndRestore(t *testing.T) {
	srv := newTestServer(t, echo)
	p := NewProxy(t, srv.addr())

	c := dial(t, p.Addr())
	roundTrip(t, c, []byte("before cut"))
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}

	p.Cut()
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns = %d after Cut, want 0", n)
	}

	// No deadline is set: Read can only return because the proxy closed the
	// connection.
	n, err := readOne(t, c)
	if err == nil || n != 0 {
		t.Fatalf("Read on a cut connection = %d, %v; want 0 bytes and an error or EOF", n, err)
	}
	// The target's side is closed as well: the echo handler ends.
	within(t, "target side of the cut connection", func() error { return <-srv.ended })

	// New connections while cut reach the listener but never the target.
	accepted := srv.accepted.Load()
	for range 3 {
		noDataThrough(t, p.Addr())
	}
	if got := srv.accepted.Load(); got != accepted {
		t.Errorf("target accepted %d connections while cut, want 0", got-accepted)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns = %d while cut, want 0", n)
	}

	p.Restore()
	c2 := dial(t, p.Addr())
	roundTrip(t, c2, []byte("after restore"))
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns = %d after Restore and one new connection, want 1", n)
	}
	// The connection cut before stays dead.
	if _, err := c.Write([]byte("x")); err == nil {
		if n, err := readOne(t, c); err == nil {
			t.Errorf("connection cut before Restore read %d bytes", n)
		}
	}
}

func TestProxyCloseEndsEverything(t *testing.T) {
	srv := newTestServer(t, echo)
	p := NewProxy(t, srv.addr())

	var conns []net.Conn
	for range 3 {
		c := dial(t, p.Addr())
		roundTrip(t, c, []byte("open"))
		conns = append(conns, c)
	}
	// One connection half-closed by the client, so one direction is done
	// and the other still running.
	if err := conns[0].(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}

	if err := within(t, "Close", p.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns = %d after Close, want 0", n)
	}
	for i, c := range conns {
		if n, err := readOne(t, c); err == nil {
			t.Errorf("conn %d: Read after Close got %d bytes and no error", i, n)
		}
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Errorf("dialing a closed proxy succeeded")
	}

	// Close waits for its goroutines, so none may be left by now.
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "clustertest.(*Proxy)") || strings.Contains(g, "clustertest.pipe") {
			t.Errorf("goroutine left after Close:\n%s", g)
		}
	}
}

func TestProxyUnreachableTarget(t *testing.T) {
	// A target nobody listens on: the client is closed, the proxy goes on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()

	p := NewProxy(t, target)
	noDataThrough(t, p.Addr())
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns = %d, want 0", n)
	}
}

func TestDSNVia(t *testing.T) {
	for _, tc := range []struct{ dsn, addr, want string }{
		{"root@tcp(127.0.0.1:3306)/", "127.0.0.1:4000", "root@tcp(127.0.0.1:4000)/"},
		{"u:p@tcp(db.example:3306)/x?readTimeout=2s", "127.0.0.1:5", "u:p@tcp(127.0.0.1:5)/x?readTimeout=2s"},
		{"root@unix(/run/mysqld/mysqld.sock)/x", "127.0.0.1:6", "root@tcp(127.0.0.1:6)/x"},
	} {
		if got := DSNVia(tc.dsn, tc.addr); got != tc.want {
			t.Errorf("DSNVia(%q, %q) = %q, want %q", tc.dsn, tc.addr, got, tc.want)
		}
	}
}

func TestProxyMySQL(t *testing.T) {
	dsn := NewDatabase(t) // skips, or fails under CI, without a server
	server, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(t, server.Addr)

	cfg, err := mysql.ParseDSN(DSNVia(dsn, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	// Only a safety net: a cut connection fails by being closed.
	cfg.ReadTimeout = 5 * time.Second
	cfg.WriteTimeout = 5 * time.Second
	cfg.Timeout = 5 * time.Second
	db := Open(t, cfg.FormatDSN())
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)

	ctx, cancel := context.WithTimeout(context.Background(), hangTimeout)
	defer cancel()
	query := func() error {
		var got string
		if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&got); err != nil {
			return err
		}
		if got != cfg.DBName {
			return errors.New("SELECT DATABASE() = " + got + ", want " + cfg.DBName)
		}
		return nil
	}

	if err := query(); err != nil {
		t.Fatalf("query through the proxy: %v", err)
	}
	if n := p.Conns(); n < 1 {
		t.Fatalf("Conns = %d after a query, want at least 1", n)
	}
	// A connection held open across the cut.
	held, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := held.PingContext(ctx); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	if err := query(); err == nil {
		t.Fatal("query through a cut proxy succeeded")
	} else {
		t.Logf("query while cut: %v", err)
	}
	if err := held.PingContext(ctx); err == nil {
		t.Fatal("ping on a connection held across the cut succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("query while cut only ended by the test's timeout")
	}

	p.Restore()
	if err := query(); err != nil {
		t.Fatalf("query after Restore: %v", err)
	}
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 after Restore = %d, %v", one, err)
	}
}
