package clustertest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tenurehq/tenure/internal/clock"
)

// proxyDialTimeout bounds how long the proxy waits to reach its target.
const proxyDialTimeout = 10 * time.Second

// Proxy forwards TCP connections from a loopback listener to a target
// address. Tests put it between a node and the database to cut the node off.
//
// The zero value is not usable; create one with NewProxy. All methods are
// safe for concurrent use.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener
	dialer net.Dialer
	ctx    context.Context // canceled by Close; aborts pending dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine

	mu      sync.Mutex
	closed  bool
	cut     bool
	gen     uint64                  // bumped by every Cut and by Close
	dialed  int                     // connections forwarded so far
	pending map[net.Conn]struct{}   // accepted clients whose target dial is under way
	conns   map[*proxyConn]struct{} // forwarded connections
}

// proxyConn is one forwarded connection: the client that dialed the proxy
// and the proxy's own connection to the target.
type proxyConn struct {
	client, server net.Conn
}

// NewProxy starts a proxy listening on 127.0.0.1:0 that forwards to target
// (host:port). It is closed when t ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("clustertest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		t:       t,
		target:  target,
		ln:      ln,
		dialer:  net.Dialer{Timeout: proxyDialTimeout},
		ctx:     ctx,
		cancel:  cancel,
		pending: make(map[net.Conn]struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Go(p.acceptLoop)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("clustertest: closing proxy: %v", err)
		}
	})
	return p
}

// Addr is the address the proxy listens on, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open forwarded connection at once, both the client's and
// the target's side, with a reset rather than an orderly close. Until
// Restore, new connections are accepted and closed straight away, without
// reaching the target. Cut on a cut proxy closes nothing more.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.dropAllLocked()
}

// Restore makes the proxy forward new connections again after Cut.
// Connections closed by Cut stay closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits until all the
// proxy's goroutines have returned. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.cancel()
	p.dropAllLocked()
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// Conns is the number of connections the proxy forwards now: dialed through
// to the target and not yet closed on both sides or cut.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Dialed is the number of connections the proxy has forwarded so far
// (dialed through to the target), open or closed since.
func (p *Proxy) Dialed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dialed
}

// dropAllLocked aborts every connection, forwarded or still dialing. The
// goroutines serving them see their reads and writes fail and return.
func (p *Proxy) dropAllLocked() {
	p.gen++
	for c := range p.conns {
		abort(c.client)
		abort(c.server)
	}
	clear(p.conns)
	for c := range p.pending {
		abort(c)
	}
	clear(p.pending)
}

func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			// Out of file descriptors or the like: try again shortly.
			clock.Sleep(context.Background(), clock.Real, 5*time.Millisecond)
			continue
		}
		p.mu.Lock()
		if p.closed || p.cut {
			p.mu.Unlock()
			abort(client)
			continue
		}
		gen := p.gen
		p.pending[client] = struct{}{}
		// Added under mu while the accept loop itself is counted, so this
		// never races with the Wait in Close.
		p.wg.Go(func() { p.serve(client, gen) })
		p.mu.Unlock()
	}
}

// serve dials the target for client and forwards between them until both
// directions are done or the connection is cut.
func (p *Proxy) serve(client net.Conn, gen uint64) {
	server, err := p.dialer.DialContext(p.ctx, "tcp", p.target)

	p.mu.Lock()
	if _, ok := p.pending[client]; !ok || p.gen != gen {
		// Cut or closed while dialing; client is already aborted.
		p.mu.Unlock()
		if server != nil {
			abort(server)
		}
		return
	}
	delete(p.pending, client)
	if err != nil {
		p.mu.Unlock()
		abort(client)
		p.t.Logf("clustertest: proxy %s: dialing %s: %v", p.Addr(), p.target, err)
		return
	}
	c := &proxyConn{client: client, server: server}
	p.conns[c] = struct{}{}
	p.dialed++
	p.mu.Unlock()

	var dirs sync.WaitGroup
	dirs.Go(func() { pipe(server, client) })
	pipe(client, server)
	dirs.Wait()

	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	client.Close()
	server.Close()
}

// pipe copies src to dst. When src ends cleanly it passes the half-close on
// to dst and leaves the other direction running; on any error (including a
// Cut closing the connections under it) it aborts both sides so the other
// direction ends too.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	abort(src)
	abort(dst)
}

// abort closes c with a reset where it can, so that data not yet sent is
// discarded, as on a broken network, instead of being flushed.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// DSNVia returns the go-sql-driver/mysql dsn with its network address
// replaced by the TCP address addr, typically a Proxy's Addr. Everything
// else in dsn is kept. It panics if dsn does not parse.
func DSNVia(dsn, addr string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic("clustertest: DSNVia: " + err.Error())
	}
	cfg.Net = "tcp"
	cfg.Addr = addr
	return cfg.FormatDSN()
}
