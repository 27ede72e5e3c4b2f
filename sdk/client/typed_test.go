//go:build go1.25

package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// submits is a TaskService that records the submits it is sent.
type submits struct {
	tenurev1connect.UnimplementedTaskServiceHandler
	mu  sync.Mutex
	got []*tenurev1.SubmitRequest
}

func (s *submits) Submit(_ context.Context, req *connect.Request[tenurev1.SubmitRequest]) (*connect.Response[tenurev1.SubmitResponse], error) {
	s.mu.Lock()
	s.got = append(s.got, req.Msg)
	s.mu.Unlock()
	return connect.NewResponse(&tenurev1.SubmitResponse{Task: &tenurev1.Task{TaskId: "t", Kind: req.Msg.GetKind()}}), nil
}

func (s *submits) SubmitBatch(_ context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	s.mu.Lock()
	s.got = append(s.got, req.Msg.GetRequests()...)
	s.mu.Unlock()
	n := len(req.Msg.GetRequests())
	return connect.NewResponse(&tenurev1.SubmitBatchResponse{TaskIds: make([]string, n), Duplicates: make([]bool, n)}), nil
}

type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

// invoice has defaults for its submits.
type invoice struct {
	Number int `json:"number"`
}

func (invoice) Kind() string { return "billing.invoice" }
func (invoice) SubmitOptions() client.SubmitOptions {
	return client.SubmitOptions{Namespace: "billing", Queue: "invoices", ExecutionWindow: time.Minute,
		Retry: &client.RetryPolicy{MaxAttempts: 7}, Priority: 3, Timeout: time.Hour}
}

type noKind struct{}

func (noKind) Kind() string { return "" }

type unencodable struct{ C chan int }

func (unencodable) Kind() string { return "bad" }

// TestTypedSubmit: a typed task goes out with its kind and its arguments
// encoded (JSON by default), and takes its type's defaults where the
// request leaves them unset; the caller's request is not changed; a typed
// request that also sets a kind or payload, whose kind is empty, that
// names no queue, or that does not encode is refused before it is sent,
// naming the field.
func TestTypedSubmit(t *testing.T) {
	s := &submits{}
	_, h := tenurev1connect.NewTaskServiceHandler(s)
	c := inMemory(t, h, client.Options{})
	ctx := t.Context()
	if _, err := c.Submit(ctx, client.SubmitRequest{Args: sendEmail{To: "ada@example.com"}, Queue: "emails"}); err != nil {
		t.Fatal(err)
	}
	reqs := []client.SubmitRequest{{Args: invoice{Number: 1}}, {Args: invoice{Number: 2}, Queue: "urgent", Priority: 9, Deadline: time.Now().Add(time.Minute)}, {Queue: "raw", Payload: []byte("x")}}
	if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	if reqs[0].Kind != "" || reqs[0].Payload != nil || reqs[0].Queue != "" {
		t.Errorf("SubmitBatch changed the caller's request: %+v", reqs[0])
	}
	s.mu.Lock()
	got := s.got
	s.mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("the server got %d submits, want 4", len(got))
	}
	check := func(i int, kind, payload, ns, queue string, window time.Duration, attempts uint32, prio int32, timeout time.Duration) {
		t.Helper()
		m := got[i]
		if m.GetKind() != kind || string(m.GetPayload()) != payload || m.GetNamespace() != ns || m.GetQueue() != queue ||
			m.GetExecutionWindow().AsDuration() != window || m.GetRetryPolicy().GetMaxAttempts() != attempts || m.GetPriority() != prio ||
			m.GetTimeout().AsDuration() != timeout || m.GetRequestId() == "" {
			t.Errorf("submit %d: %v\nwant kind %q, payload %s, %s/%s, window %v, %d attempts, priority %d, timeout %v and a request id",
				i, m, kind, payload, ns, queue, window, attempts, prio, timeout)
		}
	}
	check(0, "send_email", `{"to":"ada@example.com"}`, "", "emails", 0, 0, 0, 0)
	check(1, "billing.invoice", `{"number":1}`, "billing", "invoices", time.Minute, 7, 3, time.Hour)
	check(2, "billing.invoice", `{"number":2}`, "billing", "urgent", time.Minute, 7, 9, 0) // its deadline, not the type's timeout
	check(3, "", "x", "", "raw", 0, 0, 0, 0)

	for _, tc := range []struct {
		name  string
		batch bool
		req   client.SubmitRequest
		field string
		want  string
	}{
		{"with a payload", false, client.SubmitRequest{Args: sendEmail{}, Queue: "q", Payload: []byte("x")}, "Args", "set one or the other"},
		{"with a kind", true, client.SubmitRequest{Args: sendEmail{}, Queue: "q", Kind: "other"}, "Requests[1].Args", "set one or the other"},
		{"of an empty kind", false, client.SubmitRequest{Args: noKind{}, Queue: "q"}, "Args", "Kind() is empty"},
		{"without a queue", false, client.SubmitRequest{Args: sendEmail{}}, "Queue", "give client_test.sendEmail a SubmitOptions method"},
		{"that does not encode", true, client.SubmitRequest{Args: unencodable{}, Queue: "q"}, "Requests[1].Args", "json: unsupported type"},
	} {
		var err error
		if tc.batch {
			_, err = c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: "q"}, tc.req}})
		} else {
			_, err = c.Submit(ctx, tc.req)
		}
		var e *client.Error
		if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a typed submit %s: %v; want invalid argument naming %s, saying %q", tc.name, err, tc.field, tc.want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) != 4 {
		t.Errorf("the server got %d submits; the refused ones must not be sent", len(s.got))
	}
}

// TestCodecs: JSON is the default codec; Protobuf encodes messages, and
// decodes into one or into a pointer to a pointer to one, which it
// allocates; it refuses what is not a message.
func TestCodecs(t *testing.T) {
	c, err := client.New("http://h:1", client.Options{})
	if err != nil || c.Codec() != client.JSON {
		t.Fatalf("the default codec: %v, %v; want JSON", c.Codec(), err)
	}
	b, err := client.JSON.Marshal(sendEmail{To: "x"})
	var back sendEmail
	if err != nil || client.JSON.Unmarshal(b, &back) != nil || back.To != "x" {
		t.Errorf("JSON round trip: %s, %v, %+v", b, err, back)
	}
	m := &tenurev1.RetryPolicy{MaxAttempts: 4, InitialBackoff: durationpb.New(time.Second)}
	b, err = client.Protobuf.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var into tenurev1.RetryPolicy
	if err := client.Protobuf.Unmarshal(b, &into); err != nil || !proto.Equal(&into, m) {
		t.Errorf("Protobuf into a message: %v, %v", &into, err)
	}
	var ptr *tenurev1.RetryPolicy // what a worker of *RetryPolicy tasks decodes into
	if err := client.Protobuf.Unmarshal(b, &ptr); err != nil || !proto.Equal(ptr, m) {
		t.Errorf("Protobuf into a nil pointer: %v, %v", ptr, err)
	}
	if _, err := client.Protobuf.Marshal(sendEmail{}); err == nil || !strings.Contains(err.Error(), "not client_test.sendEmail") {
		t.Errorf("Protobuf of a struct: %v; want it refused, naming the type", err)
	}
	if err := client.Protobuf.Unmarshal(b, new(sendEmail)); err == nil || !strings.Contains(err.Error(), "not *client_test.sendEmail") {
		t.Errorf("Protobuf into a struct: %v; want it refused, naming the type", err)
	}
}

// schedules is a ScheduleService that records the schedules it is sent.
type schedules struct {
	tenurev1connect.UnimplementedScheduleServiceHandler
	got []*tenurev1.CreateScheduleRequest
}

func (s *schedules) CreateSchedule(_ context.Context, req *connect.Request[tenurev1.CreateScheduleRequest]) (*connect.Response[tenurev1.CreateScheduleResponse], error) {
	s.got = append(s.got, req.Msg)
	return connect.NewResponse(&tenurev1.CreateScheduleResponse{Schedule: &tenurev1.Schedule{Name: req.Msg.GetName(), Kind: req.Msg.GetKind()}, Created: true}), nil
}

// TestTypedSchedule: a schedule of a typed task sends its kind, its
// encoded arguments as the payload, and its type's defaults where the
// request leaves them unset; a typed schedule with a payload of its own
// is refused before it is sent.
func TestTypedSchedule(t *testing.T) {
	s := &schedules{}
	_, h := tenurev1connect.NewScheduleServiceHandler(s)
	c := inMemory(t, h, client.Options{})
	res, err := c.CreateSchedule(t.Context(), client.ScheduleRequest{Name: "monthly", Cron: "@monthly", Args: invoice{Number: 7}, Priority: 1})
	if err != nil || !res.Created || res.Schedule.Kind != "billing.invoice" || len(s.got) != 1 {
		t.Fatalf("CreateSchedule: %+v, %v", res, err)
	}
	m := s.got[0]
	if m.GetKind() != "billing.invoice" || string(m.GetPayload()) != `{"number":7}` || m.GetNamespace() != "billing" || m.GetQueue() != "invoices" ||
		m.GetExecutionWindow().AsDuration() != time.Minute || m.GetRetryPolicy().GetMaxAttempts() != 7 || m.GetPriority() != 1 {
		t.Errorf("the schedule sent: %v; want kind, payload and the type's defaults but the priority given", m)
	}
	_, err = c.CreateSchedule(t.Context(), client.ScheduleRequest{Name: "x", Cron: "@daily", Args: invoice{}, Payload: []byte("raw")})
	var e *client.Error
	if !errors.As(err, &e) || e.Field != "Args" || len(s.got) != 1 {
		t.Errorf("a typed schedule with a payload: %v; want it refused naming Args, nothing sent", err)
	}
}
