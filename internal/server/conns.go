package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// listener returns ln capped at LoadLimits.MaxConnections open
// connections: a connection accepted past the cap is closed at once (and
// counted), so that the connections served stay within the cap while the
// excess learns so at once instead of waiting in a queue. Serve serves
// the API's http.Server on it, with connState as its ConnState hook and
// LoadLimits.MaxHeaderBytes as its MaxHeaderBytes, so that its header and
// write timeouts are counted too and its refusal of oversized headers is
// answered as the API's error. Under TLS, its result is wrapped
// (tls.NewListener(s.listener(ln))): net/http must see the *tls.Conn.
//
// A connection the server closes while its client may still be sending
// (a request refused before its body or its headers were read in full)
// is closed gracefully, by a lingering close (lingerClose).
func (s *Server) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, s: s, lingering: make(map[*limitedConn]struct{})}
}

type limitListener struct {
	net.Listener
	s    *Server
	open atomic.Int64

	mu        sync.Mutex
	closed    bool                      // the listener is closed: the server stops, nothing lingers
	lingering map[*limitedConn]struct{} // connections in a lingering close
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

// Close closes the listener and ends every lingering close at once: the
// server is stopping (http.Server.Close and Shutdown close their listeners
// first).
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.lingering {
		c.Conn.Close() // its linger's read fails, and it ends
	}
	l.mu.Unlock()
	return err
}

// limitedConn is one connection of a limitListener. It tells a read that
// timed out waiting for a request's headers from one that timed out on an
// idle connection by the state the http.Server last reported (connState):
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
	wrote    atomic.Bool  // bytes went out since the connection was new or idle
	hdrHit   atomic.Bool  // a header timeout was counted
	writeHit atomic.Bool  // a write timeout was counted
	eof      atomic.Bool  // the client closed its side: nothing more comes
	deadline atomic.Int64 // the read deadline in force, in Unix nanoseconds; 0 for none
}

func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.partial.Store(true)
	}
	if err == io.EOF {
		c.eof.Store(true)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		st := http.ConnState(c.state.Load())
		if (st == http.StateNew || st == http.StateIdle && c.partial.Load()) && c.hdrHit.CompareAndSwap(false, true) {
			c.l.s.hit(LimitHeaderReadTimeout)
		}
	}
	return n, err
}

// http431 is net/http's own answer to a request whose headers are over
// http.Server.MaxHeaderBytes, which it writes straight to the connection,
// in one write, as plain text; Write sends the API's error in its place
// (TestOversizedHeaders fails if net/http changes it).
var http431 = []byte("HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large")

func (c *limitedConn) Write(p []byte) (int, error) {
	// Only the first write of a request's answer can be net/http's 431:
	// every other answer's starts with a status line net/http writes, not
	// with bytes of a payload. Over TLS, the bytes here are encrypted and
	// never match: the client gets net/http's plain-text 431
	// (docs/guides/limits.md).
	if !c.wrote.Swap(true) && bytes.Equal(p, http431) {
		c.l.s.hit(LimitHeaderBytes)
		if _, err := c.Conn.Write(c.l.s.headersTooLarge); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.writeHit.CompareAndSwap(false, true) {
		c.l.s.hit(LimitWriteTimeout)
	}
	return n, err
}

func (c *limitedConn) SetDeadline(t time.Time) error {
	c.setDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *limitedConn) SetReadDeadline(t time.Time) error {
	c.setDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *limitedConn) setDeadline(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(0)
		return
	}
	c.deadline.Store(t.UnixNano())
}

// CloseWrite sends the client the end of the answer (FIN) while it may
// still send: net/http calls it before it closes a connection whose
// request it did not read in full.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection, by a lingering close (lingerClose) when
// its client may still be sending. The connection counts against
// LoadLimits.MaxConnections until it is closed for good.
func (c *limitedConn) Close() error {
	var err error
	c.close.Do(func() {
		if until, ok := c.lingerUntil(); ok && c.l.startLinger(c) {
			go c.lingerClose(until)
			return
		}
		err = c.Conn.Close()
		c.l.open.Add(-1)
	})
	return err
}

// lingerIdle ends a lingering close when nothing came for this long: the
// client has sent what it had and is reading the answer, or is gone.
const lingerIdle = 5 * time.Second

// lingerUntil reports whether the server closing c may cut off a client
// that is still sending, and until when a lingering close may read from
// it: a request was being read or answered (net/http refused its headers,
// or its body was left unread), no timeout of the connection passed (a
// client too slow for one is not waited for again), and the client has
// not closed its side. It reads until the read deadline in force (the
// body's, from --body-read-timeout; the headers', from
// --read-header-timeout), or for LoadLimits.BodyReadTimeout if none is.
func (c *limitedConn) lingerUntil() (time.Time, bool) {
	if http.ConnState(c.state.Load()) != http.StateActive || c.hdrHit.Load() || c.writeHit.Load() || c.eof.Load() {
		return time.Time{}, false
	}
	// Socket deadlines are real time, whatever clock the server runs on.
	now := clock.Real.Now()
	until := now.Add(c.l.s.opts.Load.BodyReadTimeout)
	if d := c.deadline.Load(); d != 0 {
		until = time.Unix(0, min(d, until.UnixNano()))
	}
	return until, until.After(now)
}

// startLinger registers c's lingering close, unless the server is
// stopping.
func (l *limitListener) startLinger(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.lingering[c] = struct{}{}
	return true
}

// discardBufs are the buffers lingering closes read into; one is held
// only while its read waits.
var discardBufs = sync.Pool{New: func() any { return new([8 << 10]byte) }}

// lingerClose closes c gracefully, as RFC 9112 §9.6 asks of a server that
// closes a connection while its client may still be sending: it ends its
// own side (FIN, after the answer), then reads and discards what the
// client still sends — the rest of a refused body or of oversized headers
// — until the client closes its side, nothing comes for lingerIdle,
// until passes or LoadLimits.MaxDiscardBytes are read, and only then
// closes. Closing at once, with the client's bytes unread, would make the
// kernel reset the connection: a client that sends its whole request
// before it reads the answer (Python's urllib, curl without Expect) would
// see the reset instead of the answer. What it costs is bounded: a
// goroutine and one connection of LoadLimits.MaxConnections each, no more
// than MaxDiscardBytes and until, and 8 KiB while a read waits.
func (c *limitedConn) lingerClose(until time.Time) {
	defer func() {
		c.Conn.Close()
		c.l.mu.Lock()
		delete(c.l.lingering, c)
		c.l.mu.Unlock()
		c.l.open.Add(-1)
	}()
	_ = c.CloseWrite()
	buf := discardBufs.Get().(*[8 << 10]byte)
	defer discardBufs.Put(buf)
	left := c.l.s.opts.Load.MaxDiscardBytes
	for left > 0 {
		d := clock.Real.Now().Add(lingerIdle)
		if until.Before(d) {
			d = until
		}
		_ = c.Conn.SetReadDeadline(d)
		n, err := c.Conn.Read(buf[:min(int64(len(buf)), left)])
		left -= int64(n)
		if err != nil {
			return
		}
	}
	c.l.s.hit(LimitDiscardBytes)
}

// connState is the http.Server's ConnState hook for connections from
// listener (also under TLS, which wraps them).
func (s *Server) connState(nc net.Conn, st http.ConnState) {
	for {
		if c, ok := nc.(*limitedConn); ok {
			c.state.Store(int32(st))
			if st == http.StateNew || st == http.StateIdle {
				c.partial.Store(false)
				c.wrote.Store(false)
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
