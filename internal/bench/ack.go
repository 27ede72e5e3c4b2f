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

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ackTransport counts the completions acknowledged in the answers to
// Complete and CompleteBatch calls: onAck(1) for a successful Complete,
// onAck(n) for the n successful items of a CompleteBatch. It counts an
// answer when its body has been read to the end (for gRPC, the status is
// in the trailers, known only then). A CompleteBatch answer is decoded for
// the items that failed, which it names, and its request for the number
// of its items; an answer that does not decode is reported to onErr.
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
		resp.Body = &ackBody{ReadCloser: resp.Body, resp: resp, t: t, batch: true, items: requestItems(req)}
	}
	return resp, nil
}

// requestItems returns the number of items of a CompleteBatch request, read
// again through GetBody, or -1 if it cannot be read.
func requestItems(req *http.Request) int {
	if req.GetBody == nil {
		return -1
	}
	rc, err := req.GetBody()
	if err != nil {
		return -1
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	var msg tenurev1.CompleteBatchRequest
	if err != nil || decodeMessage(req.Header, body, &msg) != nil {
		return -1
	}
	return len(msg.GetItems())
}

type ackBody struct {
	io.ReadCloser
	resp  *http.Response
	t     *ackTransport
	batch bool
	items int    // a CompleteBatch's items, -1 if unknown
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
			n, err := batchAcks(b.resp.Header, b.buf, b.items)
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

// batchAcks decodes the body of a successful CompleteBatch answer to a
// request of items items (-1: unknown) and counts its successful items.
func batchAcks(h http.Header, body []byte, items int) (int, error) {
	var msg tenurev1.CompleteBatchResponse
	if err := decodeMessage(h, body, &msg); err != nil {
		return 0, err
	}
	// The items not named in failed succeeded.
	if items < 0 || len(msg.GetFailed()) > items {
		return 0, fmt.Errorf("%d items failed of a request of %d items (the request could not be read)", len(msg.GetFailed()), items)
	}
	return items - len(msg.GetFailed()), nil
}

// decodeMessage decodes the body of a request or an answer with headers h
// (Connect with protobuf or JSON, or gRPC; gzip or not) into msg.
func decodeMessage(h http.Header, body []byte, msg proto.Message) error {
	ct := h.Get("Content-Type")
	grpc := strings.HasPrefix(ct, "application/grpc")
	gz := h.Get("Content-Encoding") == "gzip"
	if grpc {
		// One length-prefixed message: a flags byte (bit 0: compressed with
		// the Grpc-Encoding), a big-endian length, the message.
		if len(body) < 5 || uint64(len(body)-5) < uint64(binary.BigEndian.Uint32(body[1:5])) {
			return fmt.Errorf("a gRPC message of %d bytes is cut short", len(body))
		}
		gz = body[0]&1 != 0
		if gz && h.Get("Grpc-Encoding") != "gzip" {
			return fmt.Errorf("gRPC encoding %q is not gzip", h.Get("Grpc-Encoding"))
		}
		body = body[5 : 5+binary.BigEndian.Uint32(body[1:5])]
	}
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return err
		}
		if body, err = io.ReadAll(zr); err != nil {
			return err
		}
	}
	if strings.HasPrefix(ct, "application/json") {
		return protojson.Unmarshal(body, msg)
	}
	return proto.Unmarshal(body, msg)
}
