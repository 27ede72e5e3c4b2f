// Package inproc connects an http.Client to an http.Handler in memory, for
// the SDK's tests: no socket and no goroutine of its own. A test can then
// run a client or a worker and a fake server inside one testing/synctest
// bubble, whose clock moves only while every goroutine in it waits on a
// channel or a timer; a goroutine reading from a socket would hold it still.
//
// It serves unary calls of the Connect protocol (and its JSON form): each
// request's body is read whole, the handler writes its answer in memory,
// and the answer is returned once the handler returns. The request's
// context is the handler's, so a long-poll ends when the caller gives up.
package inproc

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
)

// Client returns an HTTP client whose requests h serves, each in the
// goroutine that sends it.
func Client(h http.Handler) *http.Client {
	return &http.Client{Transport: transport{h}}
}

type transport struct{ h http.Handler }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	in := req.Clone(req.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	in.ContentLength = int64(len(body))
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "192.0.2.1:1"
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/1.1", 1, 1
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
