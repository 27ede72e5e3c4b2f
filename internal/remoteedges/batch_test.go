package remoteedges

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/wal"
)

// gatedLog counts the coordinator's appends and holds the first until
// open is closed.
type gatedLog struct {
	coordinator.Log
	appends atomic.Int32
	open    chan struct{}
}

func (l *gatedLog) Append(entries []wal.Entry) (uint64, error) {
	if l.appends.Add(1) == 1 {
		<-l.open
	}
	return l.Log.Append(entries)
}

// goneRouter answers every task as one its partition does not have.
type goneRouter struct {
	route.Router
	asks atomic.Int32
}

func (r *goneRouter) Task(context.Context, string) (route.Partition, error) { return goneParty{r}, nil }

type goneParty struct{ r *goneRouter }

func (goneParty) ID() uint64                      { return 2 }
func (goneParty) Peer(context.Context) route.Peer { return nil }
func (p goneParty) Do(context.Context, bool, func(*coordinator.Coordinator) error, func(route.Peer) error) error {
	p.r.asks.Add(1)
	return coordinator.ErrNotFound
}

// TestEndsResolvedTogether: 1,000 remote dependencies that have ended
// are resolved in two appends, not one each: the first end learned is
// written at once, and the 999 learned while that write is under way go
// together in the next; each edge is resolved once.
func TestEndsResolvedTogether(t *testing.T) {
	const deps = 1000
	wl, err := wal.Open(wal.Options{Dir: filepath.Join(t.TempDir(), "wal"), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	log := &gatedLog{Log: wl, open: make(chan struct{})}
	fake := clock.NewFake(clock.Real.Now())
	c, err := coordinator.Open(context.Background(), log, coordinator.Config{Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := make([]coordinator.SubmitRequest, deps)
	for i := range reqs {
		d := fmt.Sprintf("d%04d-p2", i)
		reqs[i] = coordinator.SubmitRequest{Queue: "q", DependsOn: []string{d}, Remote: []string{d}}
	}
	close(log.open) // the submit goes through
	if _, err := c.SubmitBatchIDs(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	log.appends.Store(0)
	log.open = make(chan struct{})
	before := c.Stats().LastLSN

	r := &goneRouter{}
	cfg := Config{Coordinator: func() (*coordinator.Coordinator, error) { return c, nil }, Router: r, Clock: fake}
	cfg.defaults()
	w := newWatcher(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	eventually.True(t, "every dependency asked, and all but the first queued behind its write", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.ended) == deps-1
	})
	close(log.open)
	eventually.True(t, "no remote dependency left", func() bool {
		d, err := c.RemoteDependencies()
		return err == nil && len(d) == 0
	})
	if n := log.appends.Load(); n != 2 {
		t.Errorf("%d ends resolved in %d appends, want 2", deps, n)
	}
	if n := c.Stats().LastLSN - before; n != deps {
		t.Errorf("%d records for %d edges", n, deps)
	}
	if n := r.asks.Load(); n != deps {
		t.Errorf("%d asks for %d dependencies", n, deps)
	}
}
