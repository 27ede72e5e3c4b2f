// Package remoteedges resolves the remote edges of one partition in
// cluster mode (docs/design/workflows.md, "Cluster mode"): a BLOCKED task
// of the partition that depends on a task of another partition waits
// until this watcher, run by the partition's host node, learns that the
// dependency ended. It asks the dependency's partition with the long-poll
// clients use (WaitTask, through the router: the partition's coordinator
// when this node serves it, its owner's API otherwise), and when the
// dependency is final it has the partition's coordinator append a
// DependencyResolved for each edge still pending
// (coordinator.ResolveRemoteMany): the ends the workers learn are queued,
// and what is queued while one write is under way goes in the next, so
// that a join of many remote dependencies costs a few durable writes, not
// one per dependency.
//
// Nothing of it is durable: the pending edges are in the partition's
// state, so a new owner that replays the log finds them and asks again,
// and an end learned twice resolves each edge once (the coordinator
// appends only for an edge still pending). The dependency's partition only
// answers reads, confirmed durable before they are given.
package remoteedges

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// Config says whose edges to watch and how.
type Config struct {
	// Coordinator returns the partition's coordinator as it is now (a host
	// reopens it after a failure), or why there is none.
	Coordinator func() (*coordinator.Coordinator, error)
	// Router finds the dependencies' partitions.
	Router route.Router
	Clock  clock.Clock
	Logger *slog.Logger
	// Poll is how often the pending edges are read again (default 200ms):
	// a new remote edge is watched within it.
	Poll time.Duration
	// Wait is how long one ask waits for its dependency to end (default
	// 10s); when more dependencies are pending than Parallel, each waits
	// ShortWait (default 1s) so that all are asked in turn.
	Wait, ShortWait time.Duration
	// Parallel is how many dependencies are asked at once (default 32).
	Parallel int
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Poll <= 0 {
		c.Poll = 200 * time.Millisecond
	}
	if c.Wait <= 0 {
		c.Wait = 10 * time.Second
	}
	if c.ShortWait <= 0 {
		c.ShortWait = time.Second
	}
	if c.Parallel <= 0 {
		c.Parallel = 32
	}
}

// Run watches the partition's remote edges until ctx ends.
func Run(ctx context.Context, cfg Config) {
	cfg.defaults()
	newWatcher(cfg).run(ctx)
}

func newWatcher(cfg Config) *watcher {
	return &watcher{cfg: cfg, inflight: make(map[string]bool)}
}

// run is Run with w.
func (w *watcher) run(ctx context.Context) {
	cfg := w.cfg
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Go(func() { w.work(ctx) })
	}
	for {
		if c, err := cfg.Coordinator(); err == nil {
			if deps, err := c.RemoteDependencies(); err == nil {
				w.set(deps)
			}
		}
		if clock.Sleep(ctx, cfg.Clock, cfg.Poll) != nil {
			break
		}
	}
	w.mu.Lock()
	w.stopped = true
	w.cond().Broadcast()
	w.mu.Unlock()
	wg.Wait()
}

// watcher hands the pending dependencies to its workers in turn.
type watcher struct {
	cfg      Config
	mu       sync.Mutex
	c        *sync.Cond
	deps     []string // pending, sorted
	next     int      // the place in deps of the next to ask
	inflight map[string]bool
	stopped  bool
	// ended are the ends learned and not resolved yet (their ids still in
	// flight); flushing is set while a worker resolves them.
	ended    []coordinator.RemoteResolve
	flushing bool
}

func (w *watcher) cond() *sync.Cond {
	if w.c == nil {
		w.c = sync.NewCond(&w.mu)
	}
	return w.c
}

// set replaces the pending dependencies.
func (w *watcher) set(deps []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deps = deps
	if w.next >= len(deps) {
		w.next = 0
	}
	if len(deps) > 0 {
		w.cond().Broadcast()
	}
}

// take returns the next pending dependency that no worker asks now, and
// how long to wait for it; "" once stopped.
func (w *watcher) take() (string, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.stopped {
		for range len(w.deps) {
			id := w.deps[w.next]
			w.next = (w.next + 1) % len(w.deps)
			if !w.inflight[id] {
				w.inflight[id] = true
				wait := w.cfg.Wait
				if len(w.deps) > w.cfg.Parallel {
					wait = w.cfg.ShortWait
				}
				return id, wait
			}
		}
		w.cond().Wait()
	}
	return "", 0
}

// done ends the ask of id; a dependency that was resolved leaves the
// list at once, so that no worker asks it again before the next Poll.
func (w *watcher) done(id string, resolved bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inflight, id)
	if resolved {
		for i, d := range w.deps {
			if d == id {
				w.deps = append(w.deps[:i:i], w.deps[i+1:]...)
				if w.next > i {
					w.next--
				}
				if w.next >= len(w.deps) {
					w.next = 0
				}
				break
			}
		}
	}
	w.cond().Broadcast()
}

// work asks dependencies in turn until the watcher stops.
func (w *watcher) work(ctx context.Context) {
	for {
		id, wait := w.take()
		if id == "" {
			return
		}
		end, final := w.ask(ctx, id, wait)
		if !final {
			w.done(id, false)
			continue
		}
		w.mu.Lock()
		w.ended = append(w.ended, coordinator.RemoteResolve{Dependency: id, End: end})
		if w.flushing {
			// The worker resolving now takes it in its next write.
			w.mu.Unlock()
			continue
		}
		w.flushing = true
		w.mu.Unlock()
		w.flush(ctx)
	}
}

// maxFlush bounds the dependencies one write resolves.
const maxFlush = 1000

// flush resolves the ends queued, and those queued meanwhile, until none
// is left; the flushing worker runs it.
func (w *watcher) flush(ctx context.Context) {
	for {
		w.mu.Lock()
		n := min(len(w.ended), maxFlush)
		if n == 0 {
			w.flushing = false
			w.mu.Unlock()
			return
		}
		ends := slices.Clone(w.ended[:n])
		w.ended = append(w.ended[:0], w.ended[n:]...)
		w.mu.Unlock()
		resolved := w.resolve(ctx, ends)
		for _, e := range ends {
			w.done(e.Dependency, resolved)
		}
	}
}

// resolve has the partition's coordinator resolve the edges of ends and
// reports whether it did. A failure is logged and left to the next turn:
// the edges stay pending.
func (w *watcher) resolve(ctx context.Context, ends []coordinator.RemoteResolve) bool {
	start := w.cfg.Clock.Now()
	c, err := w.cfg.Coordinator()
	if err == nil {
		var n int
		if n, err = c.ResolveRemoteMany(ctx, ends); err == nil {
			w.cfg.Logger.Debug("remote dependencies resolved", slog.Int("dependencies", len(ends)), slog.Int("edges", n))
			return true
		}
	}
	if ctx.Err() != nil {
		return false
	}
	w.cfg.Logger.Info("resolving remote dependencies failed; asking again", slog.Int("dependencies", len(ends)), slog.Any("err", err))
	w.pause(ctx, start)
	return false
}

// pause waits what is left of a second from start after a failure: not at
// once, the partition may be moving.
func (w *watcher) pause(ctx context.Context, start time.Time) {
	_ = clock.Sleep(ctx, w.cfg.Clock, max(time.Second-w.cfg.Clock.Now().Sub(start), 0))
}

// ask waits up to wait for dependency id to end and returns how it ended
// if it has (final). A failure is logged and left to the next turn.
func (w *watcher) ask(ctx context.Context, id string, wait time.Duration) (coordinator.RemoteEnd, bool) {
	start := w.cfg.Clock.Now()
	end, final, err := Ask(ctx, w.cfg.Router, id, wait)
	if err == nil || ctx.Err() != nil {
		return end, err == nil && final
	}
	w.cfg.Logger.Info("asking for a remote dependency failed; asking again", slog.String("dependency", id), slog.Any("err", err))
	w.pause(ctx, start)
	return end, false
}

// Ask waits up to wait for task id, of any partition, to end, through r,
// and returns how it ended if it has (final): its state and result, or
// GONE when its partition does not have it.
func Ask(ctx context.Context, r route.Router, id string, wait time.Duration) (end coordinator.RemoteEnd, final bool, err error) {
	// Forwarded for no client: the node's own call.
	ctx = principal.With(ctx, route.NodeCaller)
	p, err := r.Task(ctx, id)
	if err == nil {
		err = p.Do(ctx, true, func(c *coordinator.Coordinator) error {
			v, done, err := c.WaitTask(ctx, id, wait)
			if err == nil && done {
				end, final = coordinator.RemoteEnd{Outcome: state.EndedOf(v.State), Result: v.Result}, true
			}
			return err
		}, func(peer route.Peer) error {
			resp, err := peer.WaitTask(ctx, connect.NewRequest(&tenurev1.WaitTaskRequest{TaskId: id, Wait: durationpb.New(wait)}))
			if connect.CodeOf(err) == connect.CodeNotFound {
				return coordinator.ErrNotFound
			}
			if err == nil && resp.Msg.GetDone() {
				end, final = coordinator.RemoteEnd{Outcome: endedOf(resp.Msg.GetTask().GetState()), Result: resp.Msg.GetTask().GetResult()}, true
			}
			return err
		})
	}
	if errors.Is(err, coordinator.ErrNotFound) {
		return coordinator.RemoteEnd{Outcome: state.EndedGone}, true, nil
	}
	if err == nil && final && end.Outcome == 0 {
		return end, false, errors.New("remoteedges: a task answered as ended is in no final state")
	}
	return end, final, err
}

// endedOf is how a task the API shows in state s ended (0: it has not).
func endedOf(s tenurev1.TaskState) state.Ended {
	switch s {
	case tenurev1.TaskState_TASK_STATE_COMPLETED:
		return state.EndedCompleted
	case tenurev1.TaskState_TASK_STATE_FAILED:
		return state.EndedFailed
	case tenurev1.TaskState_TASK_STATE_DEAD:
		return state.EndedDead
	}
	return 0
}
