package client

import (
	"bytes"
	"io"
	"net/http"

	"connectrpc.com/connect"
)

// maxInMemoryBody is the largest request body inMemoryBodies reads ahead.
const maxInMemoryBody = 64 << 10

// writeBufferSize is the HTTP/1.1 write buffer of DefaultHTTPClient's
// transport: a request's headers and a body of up to about this size go
// out in one write (the transport's default, 4 KiB, splits a SubmitBatch
// of 100 small tasks in two and copies the rest through a 32 KiB buffer
// allocated per request).
const writeBufferSize = 16 << 10

// readBufferSize is the HTTP/1.1 read buffer of DefaultHTTPClient's
// transport: an answer of up to about this size (a lease of 64 small
// tasks is about 10 KiB) comes in with one read, where the transport's
// default, 4 KiB, takes three.
const readBufferSize = 16 << 10

// inMemoryBodies hands the transport the body of each request of known
// length (every unary call) as an in-memory reader. Connect gives it a
// reader of its own type, which net/http cannot tell is in memory: it then
// writes the headers in a write of their own before the body, a second
// syscall on each side for every call. Reading the body first costs one
// copy of it.
type inMemoryBodies struct{ hc connect.HTTPClient }

func (d inMemoryBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > maxInMemoryBody {
		return d.hc.Do(req)
	}
	b := make([]byte, req.ContentLength)
	if _, err := io.ReadFull(req.Body, b); err != nil {
		req.Body.Close()
		return nil, err
	}
	if err := req.Body.Close(); err != nil {
		return nil, err
	}
	r := *req // a shallow copy, as Request.WithContext makes
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return d.hc.Do(&r)
}
