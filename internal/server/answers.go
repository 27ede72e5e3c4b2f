package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// maxHeldAnswer is the largest answer unaryAnswers holds back to send with
// its length; a larger one goes out as the handler writes it.
const maxHeldAnswer = 64 << 10

// unaryAnswers sends the answer of each Connect unary call (a POST of
// application/proto or application/json) with its Content-Length, in one
// write. Connect writes a unary answer's body in one Write but sets no
// length, so net/http chunks every answer over 2 KiB: over HTTP/1.1 that
// is a write for the headers and the first bytes, one for the rest and one
// for the last chunk, each a syscall here and a wake-up and a read at the
// client. Holding the body back until the handler returns costs one copy
// of it into a pooled buffer.
func unaryAnswers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		switch r.Header.Get("Content-Type") {
		case "application/proto", "application/json":
		default:
			next.ServeHTTP(w, r)
			return
		}
		h := heldAnswers.Get().(*heldAnswer)
		h.w = w
		next.ServeHTTP(h, r.WithContext(context.WithValue(r.Context(), heldAnswerKey{}, h)))
		h.finish()
		for _, f := range h.after {
			f()
		}
		clear(h.after)
		*h = heldAnswer{buf: h.buf[:0], after: h.after[:0]}
		heldAnswers.Put(h)
	})
}

type heldAnswerKey struct{}

// heldAnswerOf returns the held answer of ctx's call, or nil if its answer
// is not held. A handler adds to its after what may be reused once the
// answer is sent.
func heldAnswerOf(ctx context.Context) *heldAnswer {
	h, _ := ctx.Value(heldAnswerKey{}).(*heldAnswer)
	return h
}

var heldAnswers = sync.Pool{New: func() any { return new(heldAnswer) }}

// heldAnswer is the http.ResponseWriter of a unary call that holds the
// status and body back until finish, or until the body outgrows
// maxHeldAnswer or the handler flushes: then it sends what it holds and
// lets the rest through.
type heldAnswer struct {
	w      http.ResponseWriter
	buf    []byte
	code   int  // the status the handler set; 0 for none yet
	passed bool // the status is sent: writes go through
	// after runs once the answer is sent: the handler's releases of what
	// the answer was made of.
	after []func()
}

func (h *heldAnswer) Header() http.Header { return h.w.Header() }

func (h *heldAnswer) WriteHeader(code int) {
	switch {
	case h.passed || code < 200: // an informational status goes out at once
		h.w.WriteHeader(code)
	case h.code == 0:
		h.code = code
	}
}

func (h *heldAnswer) Write(p []byte) (int, error) {
	if !h.passed && len(h.buf)+len(p) > maxHeldAnswer {
		h.pass()
	}
	if h.passed {
		return h.w.Write(p)
	}
	h.buf = append(h.buf, p...)
	return len(p), nil
}

// Flush sends what is held and flushes.
func (h *heldAnswer) Flush() {
	h.pass()
	http.NewResponseController(h.w).Flush()
}

// Unwrap is for http.ResponseController.
func (h *heldAnswer) Unwrap() http.ResponseWriter { return h.w }

// pass sends the status and the body held, and lets later writes through.
func (h *heldAnswer) pass() {
	if h.passed {
		return
	}
	h.passed = true
	if h.code == http.StatusTooManyRequests {
		h.code = exhaustedStatus(h.buf)
	}
	if h.code != 0 {
		h.w.WriteHeader(h.code)
	}
	if len(h.buf) > 0 {
		// An error shows again on the handler's next write, or at the
		// client.
		_, _ = h.w.Write(h.buf)
	}
}

// finish sends what is still held, with its length.
func (h *heldAnswer) finish() {
	if h.passed {
		return
	}
	if code := h.code; (code == 0 || code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified) && h.w.Header().Get("Content-Length") == "" {
		h.w.Header().Set("Content-Length", strconv.Itoa(len(h.buf)))
	}
	h.pass()
}

// exhaustedStatus is the HTTP status of a Connect unary error answer of
// code resource_exhausted, whose JSON body is body. Connect answers every
// such error 429 Too Many Requests, which generic HTTP clients and retry
// middleware take for "retry later"; that is right for a limit on what is
// held at once (long-polls, with field "wait") but not for a request over
// a size limit, which fails again however often it is sent: that is 413
// Content Too Large (docs/guides/limits.md). A size limit is a tenure
// ErrorDetail of reason TOO_LARGE, or no tenure detail at all (Connect's
// own refusal of a compressed body that inflates past its cap).
func exhaustedStatus(body []byte) int {
	var wire struct {
		Code    string `json:"code"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &wire) != nil || wire.Code != "resource_exhausted" {
		return http.StatusTooManyRequests
	}
	for _, d := range wire.Details {
		if d.Type != "tenure.v1.ErrorDetail" {
			continue
		}
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		var td tenurev1.ErrorDetail
		if err != nil || proto.Unmarshal(raw, &td) != nil {
			return http.StatusTooManyRequests
		}
		if td.GetReason() == tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE && td.GetField() != "wait" {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusTooManyRequests
	}
	return http.StatusRequestEntityTooLarge
}
