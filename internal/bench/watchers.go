package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/sdk/client"
)

// MaxWatchers bounds Config.Watchers.
const MaxWatchers = 100

// watchers are the event streams of a run (Config.Watchers): each follows
// every event of the embedded server's log from the run's start, with a
// client and connection of its own, decoding and counting each as an
// application would (docs/guides/events.md).
type watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// pos is each watcher's position in the log (the LSN of the last
	// record its stream passed); events the events it read.
	pos    []atomic.Uint64
	events []atomic.Int64
}

// startWatchers opens r.cfg.Watchers streams from now on.
func (r *runner) startWatchers(ctx context.Context) (*watchers, error) {
	n := r.cfg.Watchers
	ctx, cancel := context.WithCancel(ctx)
	w := &watchers{cancel: cancel, pos: make([]atomic.Uint64, n), events: make([]atomic.Int64, n)}
	for i := range n {
		c, err := r.newClient(nil)
		if err != nil {
			w.stop()
			return nil, err
		}
		opened := make(chan struct{})
		w.wg.Go(func() {
			first := true
			for ans, err := range c.WatchAnswers(ctx, client.EventFilter{}, client.CursorNow) {
				if err != nil {
					r.fail(fmt.Errorf("event stream %d: %w", i, err))
					return
				}
				w.events[i].Add(int64(len(ans.GetEvents())))
				if cur, err := events.ParseCursor(ans.GetCursor()); err == nil {
					w.pos[i].Store(cur.Of(0))
				}
				if first {
					first = false
					close(opened)
				}
			}
		})
		select {
		case <-opened: // the stream starts before the run's first record
		case <-ctx.Done():
		}
	}
	return w, nil
}

// caughtUp waits until every watcher has passed lsn and returns how long
// that took, or ctx's error.
func (w *watchers) caughtUp(ctx context.Context, lsn uint64) (time.Duration, error) {
	start := now()
	for i := range w.pos {
		for w.pos[i].Load() < lsn {
			if err := clock.Sleep(ctx, clock.Real, time.Millisecond); err != nil {
				return 0, err
			}
		}
	}
	return since(start), nil
}

// stop ends the streams.
func (w *watchers) stop() {
	w.cancel()
	w.wg.Wait()
}
