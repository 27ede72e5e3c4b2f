package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ackTransport counts the completions acknowledged in the answers to
// Complete and CompleteBatch calls: onAck(1) for a successful Complete,
// onAck(n) for the n successful items of a CompleteBatch. It counts an
// answer when its body has been read to the end (for gRPC, the status is
// in the trailers, known only then). A CompleteBatch answer is decoded for
// its items; an answer that does not decode is reported to onErr.
type ackTransport struct {
	base  http.RoundTripper
	onAck func(n int)
	onErr func(error)
}

func (t *ackTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	switch p := req.URL.Path; {
	case strings.HasSuffix(p, tenurev1connect.WorkerServiceCompleteProcedure):
		resp.Body = &ackBody{ReadCloser: resp.Body, resp: resp, t: t}
	case strings.HasSuffix(p, tenurev1connect.WorkerServiceCompleteBatchProcedure):
		resp.Body = &ackBody{ReadCloser: resp.Body, resp: resp, t: t, batch: true}
	}
	return resp, nil
}

type ackBody struct {
	io.ReadCloser
	resp  *http.Response
	t     *ackTransport
	batch bool
	buf   []byte // a CompleteBatch answer's body, as read
	once  sync.Once
}

func (b *ackBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.batch {
		b.buf = append(b.buf, p[:n]...)
	}
	if errors.Is(err, io.EOF) {
		b.once.Do(func() {
			if b.resp.StatusCode != http.StatusOK || !grpcOK(b.resp.Header) || !grpcOK(b.resp.Trailer) {
				return
			}
			if !b.batch {
				b.t.onAck(1)
				return
			}
			n, err := batchAcks(b.resp.Header, b.buf)
			if err != nil {
				b.t.onErr(fmt.Errorf("decoding a CompleteBatch answer: %w", err))
				return
			}
			b.t.onAck(n)
		})
	}
	return n, err
}

// grpcOK reports whether h carries no gRPC status or status 0.
func grpcOK(h http.Header) bool {
	s := h.Get("Grpc-Status")
	return s == "" || s == "0"
}

// batchAcks decodes the body of a successful CompleteBatch answer (Connect
// with protobuf or JSON, or gRPC; gzip or not) and counts its successful
// items.
func batchAcks(h http.Header, body []byte) (int, error) {
	ct := h.Get("Content-Type")
	grpc := strings.HasPrefix(ct, "application/grpc")
	gz := h.Get("Content-Encoding") == "gzip"
	if grpc {
		// One length-prefixed message: a flags byte (bit 0: compressed with
		// the Grpc-Encoding), a big-endian length, the message.
		if len(body) < 5 || uint64(len(body)-5) < uint64(binary.BigEndian.Uint32(body[1:5])) {
			return 0, fmt.Errorf("a gRPC message of %d bytes is cut short", len(body))
		}
		gz = body[0]&1 != 0
		if gz && h.Get("Grpc-Encoding") != "gzip" {
			return 0, fmt.Errorf("gRPC encoding %q is not gzip", h.Get("Grpc-Encoding"))
		}
		body = body[5 : 5+binary.BigEndian.Uint32(body[1:5])]
	}
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		if body, err = io.ReadAll(zr); err != nil {
			return 0, err
		}
	}
	var msg tenurev1.CompleteBatchResponse
	var err error
	if strings.HasPrefix(ct, "application/json") {
		err = protojson.Unmarshal(body, &msg)
	} else {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range msg.GetResults() {
		if r.GetCode() == "" {
			n++
		}
	}
	return n, nil
}
