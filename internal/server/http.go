package server

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/tenurehq/tenure/internal/tlsfiles"
)

// HTTPConfig is how Serve serves the API, besides the limits of
// Options.Load.
type HTTPConfig struct {
	// TLS, if set, serves HTTPS with its files: HTTP/2 and HTTP/1.1 as
	// ALPN chooses, nothing unencrypted, a client certificate required if
	// it has a client CA (but for HealthPath and ReadyPath). Nil serves
	// HTTP/1.1 and unencrypted HTTP/2 (h2c, for gRPC).
	TLS *tlsfiles.Reloader
	// Wrap, if set, wraps the API's handler: tests inject faults with it.
	Wrap func(http.Handler) http.Handler
}

// HTTP is the API served on a listener: what `tenure server`, a cluster
// node, `tenure bench` and the tests that stand for them all run.
type HTTP struct {
	api  *Server
	srv  *http.Server
	url  string
	done chan struct{}
	err  error // why serving stopped, if not Shutdown or Close; set before done closes

	// running holds a read lock per request being handled: Close and
	// Shutdown take the write lock to wait for them, and turn later ones
	// away, so that nothing a handler does outlives them.
	running sync.RWMutex
	stopped bool
	closing atomic.Bool // connections are being cut: what net/http logs of them is not news
}

// Serve serves the API on ln until Shutdown or Close, as every tenure
// node serves it (docs/guides/limits.md): at most
// LoadLimits.MaxConnections connections, the others closed at once; the
// header, idle and write timeouts of LoadLimits on the http.Server, and
// each one hit counted; headers over LoadLimits.MaxHeaderBytes answered
// 431 as the API's error; a request refused before it was read in full
// answered, then its connection closed by a bounded lingering close
// (conns.go), so that a client that sends everything before it reads
// gets the answer, not a reset; and what net/http logs at warning level
// on Options.Logger. The bodies' limits are the handler's (bodies.go).
func (s *Server) Serve(ln net.Listener, cfg HTTPConfig) *HTTP {
	h := &HTTP{api: s, url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	var handler http.Handler = s.Handler()
	if cfg.Wrap != nil {
		handler = cfg.Wrap(handler)
	}
	errLog := slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn).Writer()
	h.srv = &http.Server{
		Handler:           h.guard(handler),
		ReadHeaderTimeout: s.opts.Load.ReadHeaderTimeout,
		IdleTimeout:       s.opts.Load.IdleTimeout,
		WriteTimeout:      s.opts.Load.WriteTimeout,
		MaxHeaderBytes:    s.opts.Load.MaxHeaderBytes,
		ConnState:         s.connState,
		Protocols:         new(http.Protocols),
		ErrorLog: log.New(writerFunc(func(p []byte) (int, error) {
			if h.closing.Load() {
				return len(p), nil
			}
			return errLog.Write(p)
		}), "", 0),
	}
	h.srv.Protocols.SetHTTP1(true)
	h.srv.Protocols.SetUnencryptedHTTP2(true)
	if cfg.TLS != nil {
		cfg.TLS.ConfigureServer(h.srv, HealthPath, ReadyPath)
		h.url = "https://" + ln.Addr().String()
	}
	capped := s.listener(ln)
	go func() {
		var err error
		if cfg.TLS != nil {
			// ServeTLS wraps capped in tls.NewListener: net/http sees the
			// *tls.Conn, and the connections under it stay counted.
			err = h.srv.ServeTLS(capped, "", "")
		} else {
			err = h.srv.Serve(capped)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			h.err = err
		}
		close(h.done)
	}()
	return h
}

// guard holds a read lock of running while next handles a request, and
// turns requests away once the server stopped.
func (h *HTTP) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.running.RLock()
		defer h.running.RUnlock()
		if h.stopped {
			http.Error(w, "the server is stopping", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// URL is the base URL the API is served at: http:// or https:// and the
// listener's address.
func (h *HTTP) URL() string { return h.url }

// Done is closed when serving stopped: after Shutdown or Close, or when
// the listener failed (Err says why).
func (h *HTTP) Done() <-chan struct{} { return h.done }

// Err is why serving stopped, once Done is closed: nil after Shutdown or
// Close.
func (h *HTTP) Err() error {
	<-h.done
	return h.err
}

// Shutdown stops gracefully: it closes the listener, ends every
// long-poll at once (they answer with no task), and waits for the
// requests in flight to finish until ctx ends; then it cuts what is left,
// as Close does, and reports that the requests did not finish in time.
// It returns when no handler runs any more.
func (h *HTTP) Shutdown(ctx context.Context) error {
	h.api.Drain()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		h.closing.Store(true)
		h.srv.Close()
	}
	h.stop()
	return err
}

// Close stops at once: it closes the listener and every connection,
// without waiting for their requests to finish (long-polls end first),
// and returns when no handler runs any more.
func (h *HTTP) Close() {
	h.api.Drain()
	h.closing.Store(true)
	h.srv.Close()
	h.stop()
}

// stop waits for serving and every running handler to end, and turns
// later requests away.
func (h *HTTP) stop() {
	<-h.done
	h.running.Lock()
	h.stopped = true
	h.running.Unlock()
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
