package server

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
)

// Listener returns ln capped at LoadLimits.MaxConnections open
// connections: a connection accepted past the cap is closed at once (and
// counted), so that the connections served stay within the cap while the
// excess learns so at once instead of waiting in a queue. Serve the API's
// http.Server on it, with ConnState as its ConnState hook, so that its
// header and write timeouts are counted too. Under TLS, wrap its result
// (tls.NewListener(s.Listener(ln))): net/http must see the *tls.Conn.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, s: s}
}

type limitListener struct {
	net.Listener
	s    *Server
	open atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > int64(l.s.opts.Load.MaxConnections) {
			l.open.Add(-1)
			l.s.hit(LimitConnections)
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// limitedConn is one connection of a limitListener. It tells a read that
// timed out waiting for a request's headers from one that timed out on an
// idle connection by the state the http.Server last reported (ConnState):
// new, or idle with bytes of a next request already in, is a header
// timeout. Either timeout ends the connection, and so does a write
// timeout: each is counted once per connection, however many reads or
// writes fail with it.
type limitedConn struct {
	net.Conn
	l        *limitListener
	close    sync.Once
	state    atomic.Int32 // the http.ConnState last reported
	partial  atomic.Bool  // bytes came since the connection was new or idle
	hdrHit   atomic.Bool  // a header timeout was counted
	writeHit atomic.Bool  // a write timeout was counted
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.partial.Store(true)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		st := http.ConnState(c.state.Load())
		if (st == http.StateNew || st == http.StateIdle && c.partial.Load()) && c.hdrHit.CompareAndSwap(false, true) {
			c.l.s.hit(LimitHeaderReadTimeout)
		}
	}
	return n, err
}

func (c *limitedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.writeHit.CompareAndSwap(false, true) {
		c.l.s.hit(LimitWriteTimeout)
	}
	return n, err
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.close.Do(func() { c.l.open.Add(-1) })
	return err
}

// ConnState is the http.Server's ConnState hook for connections from
// Listener (also under TLS, which wraps them).
func (s *Server) ConnState(nc net.Conn, st http.ConnState) {
	for {
		if c, ok := nc.(*limitedConn); ok {
			c.state.Store(int32(st))
			if st == http.StateNew || st == http.StateIdle {
				c.partial.Store(false)
			}
			return
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		nc = w.NetConn()
	}
}
