package server_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/wal"
)

// gatedLog is a log whose records become durable only as the test says:
// Wait for an LSN past the gate blocks (and reports it on waiting) until
// open moves the gate past it.
type gatedLog struct {
	*wal.Log
	waiting chan uint64

	mu      sync.Mutex
	durable uint64 // every LSN up to it is durable; ^0: all
	moved   chan struct{}
}

func (g *gatedLog) Wait(ctx context.Context, lsn uint64) error {
	g.mu.Lock()
	for lsn > g.durable {
		moved := g.moved
		g.mu.Unlock()
		select {
		case g.waiting <- lsn:
		default:
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
	}
	g.mu.Unlock()
	return g.Log.Wait(ctx, lsn)
}

// set makes every LSN up to lsn durable, and no other.
func (g *gatedLog) set(lsn uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.durable = lsn
	close(g.moved)
	g.moved = make(chan struct{})
}

// oneCoordinator is a route.Host that serves one coordinator.
type oneCoordinator struct{ c *coordinator.Coordinator }

func (h oneCoordinator) Do(fn func(*coordinator.Coordinator) error) error { return fn(h.c) }
func (h oneCoordinator) Err() error                                       { return h.c.Err() }

// TestCompleteBatchWithLeaseAnswersOnlyDurableCompletions: a worker's
// CompleteBatch that also leases waits once, after its lease, for its
// writes; when the lease finds nothing to write, the completions are still
// durable before the answer says they are done.
func TestCompleteBatchWithLeaseAnswersOnlyDurableCompletions(t *testing.T) {
	t.Parallel()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(t.TempDir(), "wal"), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedLog{Log: l, waiting: make(chan uint64, 1), durable: ^uint64(0), moved: make(chan struct{})}
	c, err := coordinator.Open(t.Context(), g, coordinator.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		l.Close()
	})
	url := apitest.Serve(t, server.New(route.Local(oneCoordinator{c}), server.Options{}))
	tasks := tenurev1connect.NewTaskServiceClient(http.DefaultClient, url)
	workers := tenurev1connect.NewWorkerServiceClient(http.DefaultClient, url)
	ctx := t.Context()
	if _, err := tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", Payload: []byte("x")})); err != nil {
		t.Fatal(err)
	}
	leased, err := workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "q", MaxTasks: 1}))
	if err != nil || len(leased.Msg.GetTasks()) != 1 {
		t.Fatalf("lease: %v, %v", leased, err)
	}
	task := leased.Msg.GetTasks()[0]

	// From here on nothing written is durable until the test says so.
	before := l.LastLSN()
	g.set(before)
	answer := make(chan error, 1)
	var resp *connect.Response[tenurev1.CompleteBatchResponse]
	go func() {
		var err error
		resp, err = workers.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{
			Items: []*tenurev1.CompleteRequest{{TaskId: task.GetTaskId(), LeaseId: task.GetLeaseId()}},
			// The queue is empty: this lease writes nothing.
			Lease: &tenurev1.LeaseRequest{WorkerId: "w", Queue: "q", MaxTasks: 1},
		}))
		answer <- err
	}()
	select {
	case lsn := <-g.waiting:
		if lsn <= before {
			t.Fatalf("waited for lsn %d, which was durable already (last %d)", lsn, before)
		}
	case err := <-answer:
		t.Fatalf("CompleteBatch answered (err %v) without waiting for its completion to be durable", err)
	}
	select {
	case err := <-answer:
		t.Fatalf("CompleteBatch answered (err %v) before its completion was durable", err)
	default:
	}
	g.set(l.LastLSN())
	if err := <-answer; err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetFailed()) != 0 || len(resp.Msg.GetLeased()) != 0 {
		t.Fatalf("answer %v, want the completion done (no failure) and no lease", resp.Msg)
	}
}
