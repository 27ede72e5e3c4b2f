package client

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// EncodedSubmit is one submit encoded for a transactional outbox: what a
// row of the outbox table holds (package outbox writes it).
type EncodedSubmit struct {
	// RequestID is the submit's request id: the request's, or a random one
	// when it had none. The task the relay creates has it.
	RequestID string
	// JSON is the API's SubmitRequest (tenure.v1.SubmitRequest) in the
	// API's JSON form, without its request id, which the row holds apart.
	JSON []byte
}

// EncodeSubmit encodes req as Submit would send it, for a transactional
// outbox: a typed task's kind, its arguments encoded by codec (nil: JSON)
// and its type's defaults, a random request id when req has none, and the
// W3C trace context of the span current in ctx, so that the workers'
// spans continue the trace of the transaction that wrote the row. An
// invalid request is refused with ErrInvalidArgument naming its field;
// the server checks the rest when the relay submits it.
func EncodeSubmit(ctx context.Context, req SubmitRequest, codec Codec) (EncodedSubmit, error) {
	if codec == nil {
		codec = JSON
	}
	msg := new(tenurev1.SubmitRequest)
	if err := fillSubmit(codec, "EncodeSubmit", "", &req, msg); err != nil {
		return EncodedSubmit{}, err
	}
	if msg.Queue == "" {
		return EncodedSubmit{}, invalid("EncodeSubmit", "Queue", "Queue is empty: name the queue the task is to run in")
	}
	msg.TraceContext = traceContextOf(ctx)
	id := msg.RequestId
	msg.RequestId = ""
	b, err := protojson.Marshal(msg)
	if err != nil {
		return EncodedSubmit{}, fmt.Errorf("client: EncodeSubmit: %w", err)
	}
	return EncodedSubmit{RequestID: id, JSON: b}, nil
}
