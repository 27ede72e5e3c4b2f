//go:build go1.25

package client_test

import (
	"errors"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestEncodeSubmit: what EncodeSubmit encodes for an outbox row is the
// message Submit sends for the same request, within the same span: typed
// arguments encoded by the codec, the type's defaults, the trace context,
// the request id (the row's, apart from the JSON, which has none). A
// request without an id gets a random one; an invalid one is refused as
// Submit refuses it, or for want of a queue.
func TestEncodeSubmit(t *testing.T) {
	s := &submits{}
	_, h := tenurev1connect.NewTaskServiceHandler(s)
	c := inMemory(t, h, client.Options{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(t.Context(), sc)
	reqs := []client.SubmitRequest{
		{Args: invoice{Number: 7}, RequestID: "invoice-7", NotBefore: time.Unix(1900000000, 0)},
		{Args: sendEmail{To: "ada@example.com"}, Queue: "emails", RequestID: "welcome-ada", Deadline: time.Unix(1900000000, 0)},
		{Queue: "raw", Kind: "blob", Payload: []byte{0, 1, 2}, RequestID: "raw-1", Retry: &client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 3}},
	}
	for i, req := range reqs {
		if _, err := c.Submit(ctx, req); err != nil {
			t.Fatal(err)
		}
		enc, err := client.EncodeSubmit(ctx, req, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var got tenurev1.SubmitRequest
		if err := protojson.Unmarshal(enc.JSON, &got); err != nil {
			t.Fatalf("request %d: the JSON %s does not decode: %v", i, enc.JSON, err)
		}
		if got.RequestId != "" || enc.RequestID != req.RequestID {
			t.Errorf("request %d: request id %q in the JSON and %q apart; want none and %q", i, got.RequestId, enc.RequestID, req.RequestID)
		}
		got.RequestId = enc.RequestID
		s.mu.Lock()
		sent := s.got[len(s.got)-1]
		s.mu.Unlock()
		if !proto.Equal(&got, sent) {
			t.Errorf("request %d: encoded\n%v\nSubmit sent\n%v", i, &got, sent)
		}
		if got.GetTraceContext().GetTraceparent() == "" {
			t.Errorf("request %d: no trace context in %s", i, enc.JSON)
		}
	}

	a, err := client.EncodeSubmit(t.Context(), client.SubmitRequest{Queue: "q"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.EncodeSubmit(t.Context(), client.SubmitRequest{Queue: "q"}, nil)
	var only tenurev1.SubmitRequest
	if err != nil || len(a.RequestID) != 32 || a.RequestID == b.RequestID || protojson.Unmarshal(a.JSON, &only) != nil ||
		!proto.Equal(&only, &tenurev1.SubmitRequest{Queue: "q"}) {
		t.Errorf("two requests without ids: %q and %q (%s), %v; want two random ids, and the JSON of the queue alone", a.RequestID, b.RequestID, a.JSON, err)
	}
	for _, bad := range []client.SubmitRequest{{}, {Args: sendEmail{}}, {Args: noKind{}, Queue: "q"}} {
		if _, err := client.EncodeSubmit(t.Context(), bad, nil); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("EncodeSubmit(%+v): %v; want invalid argument", bad, err)
		}
	}
}
