package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
)

// limitBodies bounds every request body before the API reads it
// (docs/guides/limits.md):
//
//   - its size, by the cap of its procedure (bodyCaps): a Content-Length
//     over the cap is refused before a byte is read, and a body without
//     one is cut off one byte past it — resource_exhausted with the limit;
//   - the time to receive it, LoadLimits.BodyReadTimeout from its headers
//     (a read deadline on the connection, or on the stream in HTTP/2),
//     lifted once the body has arrived so that a long-poll may wait;
//   - the bytes of all bodies being read at once (byteBudget): a body takes
//     its Content-Length, or its cap when it has none or is compressed
//     (what it may grow to), before its first byte is read, and gives it
//     back when its request ends (an uncompressed body keeps only what it
//     read once it has arrived).
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &limitedBody{
			s: s, src: r.Body, ctx: r.Context(), rc: http.NewResponseController(w),
			path: r.URL.Path, cap: s.bodyCap(r.URL.Path), length: r.ContentLength, compressed: compressed(r.Header),
		}
		// Socket deadlines are real time, whatever clock the server runs
		// on. A writer without deadlines (a test's recorder) reads without.
		_ = b.rc.SetReadDeadline(clock.Real.Now().Add(s.opts.Load.BodyReadTimeout))
		defer b.release()
		// A shallow copy, as http.MaxBytesHandler does: the http.Server
		// must still see its own body in its request, to close a
		// connection whose body was left unread instead of parsing the
		// rest as the next request.
		r2 := *r
		r2.Body = b
		next.ServeHTTP(w, &r2)
	})
}

// compressed reports whether a request body is compressed, in any of the
// protocols (Connect unary and streaming, gRPC and gRPC-Web).
func compressed(h http.Header) bool {
	for _, k := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		if v := h.Get(k); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// limitedBody is a request body under limitBodies.
type limitedBody struct {
	s          *Server
	src        io.ReadCloser
	ctx        context.Context
	rc         *http.ResponseController
	path       string
	cap        bodyCap
	length     int64 // Content-Length, or -1
	compressed bool

	started bool
	held    int64 // bytes taken from the byte budget
	read    int64
	err     error // the *connect.Error every Read answers once a limit is hit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.started {
		if err := b.start(); err != nil {
			return 0, err
		}
	}
	if room := b.cap.limit + 1 - b.read; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.src.Read(p)
	b.read += int64(n)
	switch {
	case b.read > b.cap.limit:
		return n, b.fail(LimitRequestBytes, b.tooLarge("over"))
	case errors.Is(err, io.EOF):
		// The body has arrived: lift its deadline (a long-poll waits
		// longer), and keep of the budget only what it holds.
		_ = b.rc.SetReadDeadline(time.Time{})
		if !b.compressed && b.held > b.read {
			b.s.budget.give(b.held - b.read)
			b.held = b.read
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, b.fail(LimitBodyReadTimeout, fmt.Errorf("%w: the request body did not arrive within %v of its headers (%d bytes came; --body-read-timeout): send it at once",
			context.DeadlineExceeded, b.s.opts.Load.BodyReadTimeout, b.read))
	}
	return n, err
}

// start checks the body's declared size against its cap and takes its
// share of the byte budget, before its first byte is read.
func (b *limitedBody) start() error {
	b.started = true
	if b.length > b.cap.limit {
		return b.fail(LimitRequestBytes, b.tooLarge(fmt.Sprintf("%d bytes,", b.length)))
	}
	n := b.cap.limit
	if b.length >= 0 && !b.compressed {
		n = b.length
	}
	n, err := b.s.budget.take(b.ctx, n, b.s.opts.Clock, budgetWait)
	if err != nil {
		if _, ok := isLimit(err); ok {
			return b.fail(LimitInflightBytes, err)
		}
		b.err = b.s.apiError(err)
		return b.err
	}
	b.held = n
	return nil
}

// tooLarge is the refusal of a body of size (as said: "N bytes," or
// "over") over its cap.
func (b *limitedBody) tooLarge(size string) error {
	return &limitError{kind: coordinator.ErrTooLarge, size: max(b.length, b.read), limit: b.cap.limit,
		msg: fmt.Sprintf("%v: the request body of %s is %s over its limit of %d bytes (%s); send less: store large data elsewhere and pass a reference",
			coordinator.ErrTooLarge, b.path, size, b.cap.limit, b.cap.why)}
}

// fail counts a hit of limit and makes every further Read answer err, as
// the *connect.Error the API answers (Connect hands it to the client). It
// closes the body at once: net/http then answers with "Connection: close"
// and closes the connection (having read at most 256 KiB more of a body
// without a length) instead of parsing what is left as a next request;
// the connection's lingering close reads and discards what the client
// still sends, so that it gets the answer, not a reset (conns.go).
func (b *limitedBody) fail(limit string, err error) error {
	b.s.hit(limit)
	b.err = b.s.apiError(err)
	b.src.Close()
	return b.err
}

func (b *limitedBody) Close() error { return b.src.Close() }

// release gives the body's share of the byte budget back.
func (b *limitedBody) release() {
	b.s.budget.give(b.held)
	b.held = 0
}
