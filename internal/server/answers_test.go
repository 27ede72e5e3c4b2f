package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestUnaryAnswersHaveALength: a Connect unary answer (a POST of
// application/proto or application/json) comes with its Content-Length,
// whatever its size up to maxHeldAnswer, and with its status; a larger
// one, a streaming call's and any other request's go out as written
// (chunked, past net/http's own 2 KiB buffer). Every body arrives whole.
func TestUnaryAnswersHaveALength(t *testing.T) {
	var size, status int
	srv := httptest.NewServer(unaryAnswers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status != 0 {
			w.WriteHeader(status)
		}
		body := bytes.Repeat([]byte("t"), size)
		// In two writes, to check they are joined.
		w.Write(body[:size/2])
		w.Write(body[size/2:])
	})))
	defer srv.Close()
	for _, c := range []struct {
		name, method, contentType string
		size, status              int
		wantLength                bool
	}{
		{"proto", http.MethodPost, "application/proto", 3000, 0, true},
		{"json error", http.MethodPost, "application/json", 3000, http.StatusNotFound, true},
		{"empty", http.MethodPost, "application/proto", 0, 0, true},
		{"over the limit", http.MethodPost, "application/proto", maxHeldAnswer + 1, 0, false},
		{"streaming", http.MethodPost, "application/connect+proto", 3000, 0, false},
		{"grpc", http.MethodPost, "application/grpc", 3000, 0, false},
		{"get", http.MethodGet, "", 3000, 0, false},
	} {
		size, status = c.size, c.status
		req, err := http.NewRequest(c.method, srv.URL, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(body) != c.size || strings.Trim(string(body), "t") != "" {
			t.Errorf("%s: a body of %d bytes (%v), want the %d written", c.name, len(body), err, c.size)
		}
		if want := max(c.status, http.StatusOK); resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, want)
		}
		if got := resp.ContentLength == int64(c.size) && len(resp.TransferEncoding) == 0; got != c.wantLength {
			t.Errorf("%s: Content-Length %d, Transfer-Encoding %q; want a length: %v", c.name, resp.ContentLength, resp.TransferEncoding, c.wantLength)
		}
	}
}

// TestUnaryAnswersReleaseAfterSending: what a handler adds to the held
// answer's after runs once the answer is sent, not before: a Lease answer's
// pooled messages are reused only then.
func TestUnaryAnswersReleaseAfterSending(t *testing.T) {
	rec := httptest.NewRecorder()
	sentAtRelease := -1
	h := unaryAnswers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := heldAnswerOf(r.Context())
		if held == nil {
			t.Fatal("a unary call's answer is not held")
		}
		held.after = append(held.after, func() { sentAtRelease = rec.Body.Len() })
		w.Write([]byte("answer"))
	}))
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/proto")
	h.ServeHTTP(rec, req)
	if sentAtRelease != len("answer") {
		t.Fatalf("the release ran with %d bytes of the answer sent, want all %d", sentAtRelease, len("answer"))
	}
}
