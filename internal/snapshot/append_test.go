package snapshot

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/state"
)

// protoTask is what appendTask must write: the task field of a TaskChunk
// holding proto.Marshal(TaskMessage(t, b)).
func protoTask(t *testing.T, task *state.Task, b state.Beside) []byte {
	t.Helper()
	m, err := proto.Marshal(TaskMessage(task, b))
	if err != nil {
		t.Fatal(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), m)
}

// sameAsProto checks appendTask against protoTask for every task of s.
func sameAsProto(t *testing.T, what string, s *state.State) {
	t.Helper()
	img := s.Image()
	var enc taskEncoder
	for i, task := range img.Tasks {
		got, err := enc.appendTask([]byte("prefix"), task, img.Beside(i))
		if err != nil {
			t.Fatalf("%s: task %q: %v", what, task.ID, err)
		}
		if want := protoTask(t, task, img.Beside(i)); !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
			t.Fatalf("%s: task %q (%v, %d executions) encodes to\n%x\nproto.Marshal writes\n%x", what, task.ID, task.State, len(task.Executions), got, want)
		}
	}
}

// TestAppendTaskMatchesProto: the snapshot's own task encoder writes the
// bytes proto.Marshal writes, for tasks in every state the generator
// reaches and for the edges of each field's encoding.
func TestAppendTaskMatchesProto(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		sameAsProto(t, "random state", randomState(t, seed, 30+int(seed)*30))
	}

	s := state.New()
	at := state.Time(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	for i, r := range []*state.TaskCreated{
		{TaskID: "bare", Namespace: "n", Queue: "q", CreatedAt: at, ExecutionWindow: 1, Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}},
		{TaskID: "negative", Namespace: "n", Queue: "q", CreatedAt: at, Priority: -7, ExecutionWindow: time.Second,
			NotBefore: at + 5, Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1, MaxBackoff: 3}},
		{TaskID: "largest", Namespace: "n", Queue: "q", CreatedAt: at, Priority: math.MaxInt32, ExecutionWindow: math.MaxInt64,
			Payload: bytes.Repeat([]byte{0}, 300), RequestID: "ключ-ü", Deadline: at + state.Time(time.Hour),
			Retry: state.RetryPolicy{MaxAttempts: math.MaxUint32, InitialBackoff: 1, MaxBackoff: math.MaxInt64, Multiplier: 1.5}},
		{TaskID: "smallest", Namespace: "n", Queue: "q", CreatedAt: at, Priority: math.MinInt32, ExecutionWindow: time.Hour,
			Retry: state.RetryPolicy{MaxAttempts: 2, Multiplier: 2}},
	} {
		if err := s.Apply(uint64(i+1), r); err != nil {
			t.Fatal(err)
		}
	}
	sameAsProto(t, "edge values", s)
}

// TestAppendTaskRefusesWhatProtoRefuses: a string that is not valid UTF-8
// fails the snapshot as proto.Marshal fails it, rather than writing what
// the reader would refuse.
func TestAppendTaskRefusesWhatProtoRefuses(t *testing.T) {
	t.Parallel()
	s := state.New()
	if err := s.Apply(1, &state.TaskCreated{TaskID: "bad", Namespace: "n", Queue: "q", RequestID: "\xff\xfe", ExecutionWindow: time.Second, Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	img := s.Image()
	_, protoErr := proto.Marshal(TaskMessage(img.Tasks[0], state.Beside{}))
	if protoErr == nil {
		t.Fatal("proto.Marshal took a request id that is not UTF-8; this test assumes it refuses it")
	}
	var enc taskEncoder
	if _, err := enc.appendTask(nil, img.Tasks[0], state.Beside{}); err == nil || err.Error() != protoErr.Error() {
		t.Fatalf("appendTask: %v, want proto's %v", err, protoErr)
	}
	var buf bytes.Buffer
	if _, err := Encode(&buf, img); err == nil || !strings.Contains(err.Error(), `task "bad"`) {
		t.Fatalf("Encode: %v, want an error naming the task", err)
	}
}
