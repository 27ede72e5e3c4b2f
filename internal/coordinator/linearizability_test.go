package coordinator

// Linearizability: concurrent clients and workers, each a
// goroutine, call one coordinator on the WAL over the fault-injecting disk
// while the power is cut under them and the coordinator is reopened from
// what survived; every call is recorded with its invoke and return times
// and answer, and porcupine checks the history against the task model of
// internal/lincheck. Calls in flight at a power cut get no answer and are
// recorded as pending (see resolvePending).
//
// TestLinearizabilityCatchesAckBeforeFsync shows that the checker catches a
// broken build: the same workload on a log that acknowledges before fsync
// (brokenLog) is reported not linearizable.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/lincheck"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

var defaultLinRuns = 4

// linSeed is TENURE_LIN_SEED if set (to rerun a failure), else fresh.
func linSeed(t *testing.T) uint64 {
	if s := os.Getenv("TENURE_LIN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_LIN_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func TestLinearizability(t *testing.T) {
	base := linSeed(t)
	for i := range uint64(defaultLinRuns) {
		seed := base + i
		w := runLinWorkload(t, seed, false)
		res, err := checkHistory(w.ops, time.Minute, true)
		if res != porcupine.Ok {
			t.Fatalf("seed %d (rerun with TENURE_LIN_SEED=%d): %v", seed, seed, err)
		}
		t.Logf("seed %d: %s", seed, w.summary)
	}
}

// TestLinearizabilityCatchesAckBeforeFsync runs the same workload, and the
// simulation, on a coordinator whose log acknowledges before fsync, and
// asserts that porcupine reports the histories not linearizable, while the
// same workload on the real log is linearizable. If the checker ever stops
// catching this bug, this test fails.
func TestLinearizabilityCatchesAckBeforeFsync(t *testing.T) {
	seed := linSeed(t)
	good := runLinWorkload(t, seed, false)
	if res, err := checkHistory(good.ops, time.Minute, true); res != porcupine.Ok {
		t.Fatalf("seed %d (TENURE_LIN_SEED=%d), correct log: %v", seed, seed, err)
	}
	t.Logf("correct log: linearizable (%s)", good.summary)

	bad := runLinWorkload(t, seed, true)
	res, err := checkHistory(bad.ops, time.Minute, false)
	if res != porcupine.Illegal {
		t.Fatalf("seed %d (TENURE_LIN_SEED=%d): the log that acknowledges before fsync gave a history porcupine finds %s (%s); the checker no longer catches lost acknowledgements", seed, seed, res, bad.summary)
	}
	t.Logf("seed %d, log acknowledging before fsync: %s\n%v", seed, bad.summary, err)

	// The simulation's history on the broken log: every seed whose
	// durability check saw an acknowledged submit lost must be illegal to
	// porcupine too (the task's final read says it does not exist).
	caught := 0
	for seed := uint64(1); seed <= 30; seed++ {
		r := runSim(seed, simOptions{steps: 300, ackBeforeFsync: true})
		lostSubmit := false
		for _, n := range r.notes {
			lostSubmit = lostSubmit || strings.Contains(n, "acknowledged submit")
		}
		if lostSubmit && r.lin != porcupine.Illegal {
			t.Fatalf("simulation seed %d on the broken log lost an acknowledged submit, but porcupine finds its history %s", seed, r.lin)
		}
		if r.lin == porcupine.Illegal {
			if caught == 0 {
				t.Logf("simulation seed %d on the broken log: %d failed checks, first: %s\n%v", seed, len(r.notes), r.notes[0], r.linErr)
			}
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("no simulation seed on the broken log gave a history porcupine rejects")
	}
	t.Logf("simulation on the broken log: porcupine rejected %d of 30 seeds' histories", caught)
}

// linWorkload is one run's history.
type linWorkload struct {
	ops     []porcupine.Operation
	summary string
}

// linNode is the node the clients call: one coordinator at a time, replaced
// after each power cut.
type linNode struct {
	mu   sync.Mutex
	c    *Coordinator
	log  *wal.Log
	gen  int
	up   chan struct{} // closed when a new coordinator serves
	down chan struct{} // a client saw it stop (buffered, 1)
}

func (n *linNode) current() (*Coordinator, int, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.c, n.gen, n.up
}

// runLinWorkload runs concurrent clients and workers against a coordinator
// that loses its power twice, and returns the recorded history with the
// pending calls resolved. With broken, the coordinator runs on brokenLog.
func runLinWorkload(t *testing.T, seed uint64, broken bool) linWorkload {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x11))
	clk := clock.NewFake(epoch)
	ids := newSeededRand(seed)
	disk := faultfs.NewWithDir("/data")
	var idsMu sync.Mutex // the coordinator draws ids under its mutex; Open after a crash too
	lockedIDs := readerFunc(func(p []byte) (int, error) {
		idsMu.Lock()
		defer idsMu.Unlock()
		return ids.Read(p)
	})
	node := &linNode{up: make(chan struct{}), down: make(chan struct{}, 1)}
	open := func(d *faultfs.FS) {
		sync := wal.SyncAlways
		if broken {
			sync = wal.SyncNone
		}
		l, err := wal.Open(wal.Options{Dir: simWALDir, FS: d, Sync: sync, SegmentBytes: 1 << 20})
		if err != nil {
			t.Fatalf("open wal: %v", err)
		}
		var lg Log = l
		if broken {
			lg = brokenLog{l}
		}
		c, err := Open(ctx, lg, Config{Clock: clk, Rand: lockedIDs})
		if err != nil {
			t.Fatalf("open coordinator: %v", err)
		}
		node.mu.Lock()
		node.c, node.log = c, l
		node.gen++
		close(node.up)
		node.up = make(chan struct{})
		node.mu.Unlock()
	}
	open(disk)

	rec := &lincheck.Recorder{}
	var known sync.Map // task id → true: tasks some client heard of
	const (
		clients       = 3
		workers       = 4
		opsPerClient  = 300
		opsPerWorker  = 200
		crashes       = 4
		crashEveryOps = 250
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	// milestone is signalled when the history passes nextCrash calls.
	milestone := make(chan struct{}, 1)
	var nextCrash atomic.Int64
	nextCrash.Store(crashEveryOps)

	// call runs one request on the current coordinator; on an answer that
	// leaves the outcome unknown it tells the supervisor and waits for the
	// next coordinator.
	call := func(fn func(c *Coordinator) error) error {
		c, _, up := node.current()
		err := fn(c)
		if _, known := errKind(err); !known && !errors.Is(err, ErrUnavailable) {
			t.Errorf("unexpected error: %v", err)
		}
		if rec.Now() >= 2*nextCrash.Load() {
			select {
			case milestone <- struct{}{}:
			default:
			}
		}
		if errors.Is(err, ErrUnavailable) {
			select {
			case node.down <- struct{}{}:
			default:
			}
			select {
			case <-up:
			case <-stop:
			}
		}
		return err
	}

	for i := range clients {
		r := rand.New(rand.NewPCG(seed, uint64(100+i)))
		wg.Go(func() {
			var mine []string
			var retry *SubmitRequest
			for n := range opsPerClient {
				switch p := r.IntN(100); {
				case p < 45 || retry != nil && p < 55:
					req := SubmitRequest{Queue: "q", Payload: fmt.Appendf(nil, "c%d-%d", i, n), ExecutionWindow: time.Duration(1+r.IntN(5)) * time.Second,
						Retry: state.RetryPolicy{MaxAttempts: uint32(1 + r.IntN(3)), InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
					if r.IntN(2) == 0 {
						req.RequestID = fmt.Sprintf("c%d-rq%d", i, n)
					}
					if retry != nil {
						req, retry = *retry, nil
					}
					in := lincheck.In{Op: lincheck.OpSubmit, RequestID: req.RequestID, Payload: string(req.Payload), MaxAttempts: req.Retry.MaxAttempts}
					at := rec.Call()
					var res SubmitResult
					err := call(func(c *Coordinator) (err error) { res, err = c.Submit(ctx, req); return err })
					out := outcome(err)
					if err == nil {
						in.Task, out.Duplicate = res.Task.ID, res.Duplicate
						mine = append(mine, res.Task.ID)
						known.Store(res.Task.ID, true)
					} else if !out.Pending {
						t.Errorf("submit: %v", err)
					}
					rec.Done(i, in, at, out)
					if (out.Pending || r.IntN(5) == 0) && req.RequestID != "" {
						retry = &req // its answer was lost: send it again
					}
				case p < 80 && len(mine) > 0:
					id := mine[r.IntN(len(mine))]
					at := rec.Call()
					var got *state.Task
					err := call(func(c *Coordinator) (err error) { got, err = c.Get(ctx, id); return err })
					out := outcome(err)
					if err == nil {
						out = getOutput(got)
					}
					rec.Done(i, lincheck.In{Op: lincheck.OpGet, Task: id}, at, out)
				case p < 84 && len(mine) > 0:
					id := mine[r.IntN(len(mine))]
					reason := fmt.Sprintf("kill-c%d-%d", i, n)
					at := rec.Call()
					err := call(func(c *Coordinator) error { return c.Kill(ctx, id, Actor{Reason: reason}) })
					rec.Done(i, lincheck.In{Op: lincheck.OpKill, Task: id, Reason: reason}, at, outcome(err))
				case p < 87 && len(mine) > 0:
					id := mine[r.IntN(len(mine))]
					reason := fmt.Sprintf("retry-c%d-%d", i, n)
					at := rec.Call()
					err := call(func(c *Coordinator) error { return c.Retry(ctx, id, Actor{Reason: reason}) })
					rec.Done(i, lincheck.In{Op: lincheck.OpRetry, Task: id, Reason: reason}, at, outcome(err))
				case p < 89:
					in := lincheck.In{Op: lincheck.OpPause}
					op := func(c *Coordinator) (bool, error) { return c.Pause(ctx, PauseRequest{Queue: "q"}) }
					if r.IntN(2) == 0 {
						in.Op = lincheck.OpResume
						op = func(c *Coordinator) (bool, error) { return c.Resume(ctx, PauseRequest{Queue: "q"}) }
					}
					at := rec.Call()
					err := call(func(c *Coordinator) error { _, err := op(c); return err })
					rec.Done(i, in, at, outcome(err))
				case p < 97:
					clk.Advance(time.Duration(r.IntN(1500)) * time.Millisecond)
				default:
					clk.Advance(-time.Duration(r.IntN(2000)) * time.Millisecond)
				}
			}
		})
	}
	for i := range workers {
		r := rand.New(rand.NewPCG(seed, uint64(200+i)))
		id := clients + i
		wg.Go(func() {
			for n := range opsPerWorker {
				worker := fmt.Sprintf("w%d.%d", i, n) // one id per call: see resolvePending
				at := rec.Call()
				var ls []Lease
				err := call(func(c *Coordinator) (err error) {
					ls, err = c.Lease(ctx, LeaseRequest{WorkerID: worker, Queue: "q", MaxTasks: 1 + r.IntN(2)})
					return err
				})
				if err != nil {
					rec.Done(id, lincheck.In{Op: lincheck.OpLease, Worker: worker}, at, outcome(err))
					continue
				}
				ret := rec.Call()
				for _, l := range ls {
					rec.Add(porcupine.Operation{ClientId: id, Call: at, Return: ret,
						Input:  lincheck.In{Op: lincheck.OpLease, Task: l.TaskID, Worker: worker},
						Output: lincheck.Out{LeaseID: l.LeaseID, Attempt: l.Attempt, Committed: l.Committed, CommittedResult: string(l.CommittedResult)}})
				}
				for _, l := range ls {
					known.Store(l.TaskID, true)
					linWork(r, rec, id, l, clk, call)
				}
				if len(ls) == 0 {
					clk.Advance(time.Duration(r.IntN(500)) * time.Millisecond)
				}
			}
		})
	}

	// The supervisor: after every crashEveryOps calls, cut the power a few
	// disk operations later; when a client sees the coordinator stop,
	// reboot from what the disk kept and reopen. At the end, one more
	// power loss, so that the final reads see only what was durable.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	powerLosses := 0
	reboot := func() {
		node.mu.Lock()
		c, l := node.c, node.log
		node.mu.Unlock()
		// The power goes now, if it has not yet: the old coordinator may
		// still be answering calls, but nothing more reaches its disk.
		disk.CutPowerAfter(disk.Ops())
		rebooted := disk.PowerLoss()
		if !broken && rng.IntN(2) == 0 {
			rebooted = disk.PowerLossKeep(rng)
		}
		c.Close()
		l.Close()
		disk = rebooted
		open(disk)
		powerLosses++
		select { // a client may have seen the old one stop after the first signal
		case <-node.down:
		default:
		}
	}
	for range crashes {
		select {
		case <-milestone:
		case <-done:
		}
		disk.CutPowerAfter(disk.Ops() + 1 + rng.IntN(3))
		select {
		case <-node.down:
		case <-done:
		}
		nextCrash.Add(crashEveryOps)
		reboot()
		select { // a signal sent before the threshold moved is stale
		case <-milestone:
		default:
		}
	}
	<-done
	close(stop)
	reboot()

	// Read every task once more, then resolve the calls that got no answer
	// from the final state.
	c, _, _ := node.current()
	live := c.Export()
	for _, t := range live.Tasks {
		known.Store(t.ID, true)
	}
	known.Range(func(k, _ any) bool {
		id := k.(string)
		at := rec.Call()
		got, err := c.Get(ctx, id)
		out := outcome(err)
		if err == nil {
			out = getOutput(got)
		}
		rec.Done(99, lincheck.In{Op: lincheck.OpGet, Task: id}, at, out)
		return true
	})
	c.Close()
	node.log.Close()
	answered, pending := rec.Ops(), rec.Pending()
	resolved := resolvePending(pending, live.Tasks)
	return linWorkload{
		ops: append(answered, resolved...),
		summary: fmt.Sprintf("%d operations (%d answered, %d without an answer, %d of those left a trace), %d power losses, %d tasks",
			len(answered)+len(resolved), len(answered), len(pending), len(resolved), powerLosses, len(live.Tasks)),
	}
}

// linWork finishes one leased task as a worker might, recording each call.
func linWork(r *rand.Rand, rec *lincheck.Recorder, client int, l Lease, clk *clock.Fake, call func(func(*Coordinator) error) error) {
	do := func(in lincheck.In, fn func(c *Coordinator) (lincheck.Out, error)) lincheck.Out {
		at := rec.Call()
		var out lincheck.Out
		err := call(func(c *Coordinator) (err error) { out, err = fn(c); return err })
		if err != nil {
			out = outcome(err)
		}
		rec.Done(client, in, at, out)
		return out
	}
	commit := func() lincheck.Out {
		in := lincheck.In{Op: lincheck.OpCommit, Task: l.TaskID, Lease: l.LeaseID, Result: "r:" + l.LeaseID}
		return do(in, func(c *Coordinator) (lincheck.Out, error) {
			tok, err := c.Commit(ctx, in.Task, in.Lease, []byte(in.Result))
			return lincheck.Out{Attempt: tok.Attempt}, err
		})
	}
	complete := func(result string) lincheck.Out {
		in := lincheck.In{Op: lincheck.OpComplete, Task: l.TaskID, Lease: l.LeaseID, Result: result}
		return do(in, func(c *Coordinator) (lincheck.Out, error) {
			return lincheck.Out{}, c.Complete(ctx, in.Task, in.Lease, []byte(in.Result))
		})
	}
	if l.Committed {
		complete("")
		return
	}
	switch p := r.IntN(100); {
	case p < 30:
		if out := commit(); out.Err == "" && !out.Pending && r.IntN(4) > 0 {
			complete("x:" + l.LeaseID)
		}
	case p < 55:
		complete("r:" + l.LeaseID)
	case p < 65:
		in := lincheck.In{Op: lincheck.OpHeartbeat, Task: l.TaskID, Lease: l.LeaseID}
		do(in, func(c *Coordinator) (lincheck.Out, error) {
			_, err := c.Heartbeat(ctx, in.Task, in.Lease)
			return lincheck.Out{}, err
		})
		clk.Advance(time.Duration(r.IntN(3000)) * time.Millisecond) // maybe past the lease
		complete("r:" + l.LeaseID)
	case p < 80:
		in := lincheck.In{Op: lincheck.OpFail, Task: l.TaskID, Lease: l.LeaseID, Permanent: r.IntN(3) == 0, Reason: "fail-" + l.LeaseID}
		do(in, func(c *Coordinator) (lincheck.Out, error) {
			fr, err := c.Fail(ctx, in.Task, in.Lease, in.Reason, in.Permanent)
			return lincheck.Out{Retry: fr.State == state.Waiting}, err
		})
	case p < 90:
		clk.Advance(l.Window) // stalls past its lease, then tries
		commit()
	default:
		// Crashes before doing anything; the lease expires.
	}
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
