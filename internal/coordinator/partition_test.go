package coordinator

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/wal"
)

// openPartition opens a coordinator as cluster mode does for one
// partition: a task id suffix and a fence at open.
func openPartition(t *testing.T, dir string, f *Fence) (*Coordinator, *wal.Log, error) {
	t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Sync: wal.SyncNone})
	if err != nil {
		t.Fatalf("open wal: %v", err)
	}
	c, err := Open(context.Background(), l, Config{Clock: clock.NewFake(epoch), TaskIDSuffix: "-p7", Fence: f})
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return c, l, nil
}

func TestPartitionOpenFencesFirstAndSuffixesIDs(t *testing.T) {
	dir := t.TempDir()
	c, l, err := openPartition(t, dir, &Fence{Epoch: 3, NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Submit(ctx, SubmitRequest{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if id := res.Task.ID; !strings.HasSuffix(id, "-p7") || len(id) != 26+3 {
		t.Fatalf("task id %q: want a 26-character id then -p7", id)
	}
	if got := c.Export().Epoch; got != 3 {
		t.Fatalf("epoch after open = %d, want 3", got)
	}
	c.Close()
	l.Close()

	// The same epoch may fence again (a restarted owner), and the fence is
	// the first record after the replayed ones.
	c, l, err = openPartition(t, dir, &Fence{Epoch: 3, NodeID: "n1"})
	if err != nil {
		t.Fatalf("reopening at the same epoch: %v", err)
	}
	var types []record.Type
	if err := l.Replay(1, func(_ uint64, e wal.Entry) error {
		types = append(types, record.Type(e.Type))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []record.Type{record.TypeFence, record.TypeTaskCreated, record.TypeFence}
	if len(types) != len(want) {
		t.Fatalf("records %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("records %v, want %v", types, want)
		}
	}
	c.Close()
	l.Close()

	// A lower epoch is a deposed owner: it must not serve.
	if _, _, err := openPartition(t, dir, &Fence{Epoch: 2, NodeID: "old"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("opening at a lower epoch: %v, want ErrUnavailable", err)
	}
}

func TestTaskIDSuffixChecked(t *testing.T) {
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Open(ctx, l, Config{TaskIDSuffix: "p7"}); err == nil || !strings.Contains(err.Error(), "TaskIDSuffix") {
		t.Fatalf("suffix without '-': %v", err)
	}
}

func TestCheckBatchMatchesSubmitBatch(t *testing.T) {
	e := newEnv(t, 1)
	now := e.clock.Now()
	cases := [][]SubmitRequest{
		nil,
		{{Queue: "q"}, {Queue: ""}},
		{{Queue: "q", ExecutionWindow: -time.Second}},
		{{Queue: "q", Payload: make([]byte, 2<<20)}},
		{{Queue: "q", NotBefore: now.Add(400 * 24 * time.Hour)}},
		make([]SubmitRequest, 10_001),
	}
	for i, reqs := range cases {
		want := Limits{}.CheckBatch(reqs, now)
		if want == nil {
			t.Fatalf("case %d: CheckBatch accepted a bad batch", i)
		}
		_, got := e.c.SubmitBatch(ctx, reqs)
		if got == nil || got.Error() != want.Error() {
			t.Fatalf("case %d: SubmitBatch says %v, CheckBatch says %v", i, got, want)
		}
	}
	for i, req := range []SubmitRequest{{Queue: ""}, {Queue: "q", ExecutionWindow: -time.Second}, {Queue: "q", Payload: make([]byte, 2<<20)}} {
		want := Limits{}.CheckSubmit(req, now)
		if want == nil {
			t.Fatalf("single %d: CheckSubmit accepted a bad request", i)
		}
		if _, got := e.c.Submit(ctx, req); got == nil || got.Error() != want.Error() {
			t.Fatalf("single %d: Submit says %v, CheckSubmit says %v", i, got, want)
		}
	}
	ok := []SubmitRequest{{Queue: "q"}, {Namespace: "n", Queue: "r", RequestID: "x"}}
	if err := (Limits{}).CheckBatch(ok, now); err != nil {
		t.Fatalf("good batch: %v", err)
	}
	if ok[0].Namespace != "" {
		t.Fatalf("CheckBatch changed its input")
	}
}
