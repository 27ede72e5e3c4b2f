package coordinator

// Fault-injection acceptance tests: the coordinator over a WAL on
// the in-memory disk of package faultfs, with a fake clock and seeded ids.
// A write or fsync failure stops it (ErrUnavailable) without acknowledging
// anything more; ENOSPC is refused with a message about disk space; and a
// restart, after a plain restart or a power loss at any operation of a
// scripted run, holds every acknowledged operation.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

const faultWALDir = "/data/wal"

func walOptions(f fsys.FS) wal.Options {
	return wal.Options{Dir: faultWALDir, FS: f, Sync: wal.SyncAlways, SegmentBytes: 1024}
}

// openCoord opens a WAL on f and a coordinator over it.
func openCoord(f fsys.FS, clk clock.Clock, seed uint64) (*wal.Log, *Coordinator, error) {
	l, err := wal.Open(walOptions(f))
	if err != nil {
		return nil, nil, err
	}
	c, err := Open(context.Background(), l, Config{Clock: clk, Rand: newSeededRand(seed)})
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, c, nil
}

// ack is one acknowledged operation and what it promises about its task.
type ack struct {
	op     string // submit, lease, start, heartbeat, commit, complete, fail, kill
	task   string
	lease  string
	data   []byte     // submit: the payload; commit, complete: the task's result
	expiry state.Time // heartbeat: the new lease expiry
}

// checkAcks reports the first acknowledged operation that ex does not
// reflect. Later, unacknowledged records may have moved a task further on;
// the checks allow that.
func checkAcks(ex state.Export, acks []ack) error {
	tasks := map[string]*state.Task{}
	for _, t := range ex.Tasks {
		tasks[t.ID] = t
	}
	for i, a := range acks {
		t := tasks[a.task]
		if t == nil {
			return fmt.Errorf("ack %d (%s of task %s): the task is missing", i, a.op, a.task)
		}
		exec := t.ExecutionOf(a.lease)
		bad := ""
		switch a.op {
		case "submit":
			if !bytes.Equal(t.Payload, a.data) {
				bad = fmt.Sprintf("payload %q, want %q", t.Payload, a.data)
			}
		case "lease":
			if exec == nil {
				bad = "no execution under the lease"
			}
		case "start":
			if exec == nil || exec.StartedAt == 0 {
				bad = "execution not started"
			}
		case "heartbeat":
			if exec == nil || exec.LeaseExpiry < a.expiry {
				bad = fmt.Sprintf("lease not extended to %v", a.expiry)
			}
		case "commit":
			if t.CommittedBy != a.lease || !bytes.Equal(t.Result, a.data) {
				bad = fmt.Sprintf("committed by %q with %q", t.CommittedBy, t.Result)
			}
		case "complete":
			if t.State != state.Completed || exec == nil || exec.Status != state.ExecDone || !bytes.Equal(t.Result, a.data) {
				bad = fmt.Sprintf("task %s with %q", t.State, t.Result)
			}
		case "fail":
			if exec == nil || exec.Status != state.ExecAborted {
				bad = "execution not aborted"
			}
		case "kill":
			if t.State != state.Dead {
				bad = fmt.Sprintf("task %s", t.State)
			}
		default:
			panic("unknown ack " + a.op)
		}
		if bad != "" {
			return fmt.Errorf("ack %d (%s of task %s, lease %s) lost: %s", i, a.op, a.task, a.lease, bad)
		}
	}
	return nil
}

// runWorkload runs a fixed sequence of about 25 requests (submits, a batch,
// leases, start, heartbeat, commits, completions, failures, a kill, reads)
// and returns the acknowledged ones, stopping at the first error. On the
// same clock and ids it always makes the same requests.
// startWorkload opens a coordinator on f with a fake clock and runs the
// workload, failing t if either fails.
func startWorkload(t *testing.T, f fsys.FS) (*wal.Log, *Coordinator, *clock.Fake, []ack) {
	t.Helper()
	clk := clock.NewFake(epoch)
	l, c, err := openCoord(f, clk, 1)
	if err != nil {
		t.Fatal(err)
	}
	acks, err := runWorkload(c, clk)
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	return l, c, clk, acks
}

func runWorkload(c *Coordinator, clk *clock.Fake) ([]ack, error) {
	ctx := context.Background()
	var acks []ack
	ids := map[string]string{}
	submit := func(name string) error {
		p := []byte("payload-" + name)
		res, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: p, RequestID: "req-" + name})
		if err == nil {
			ids[name] = res.Task.ID
			acks = append(acks, ack{op: "submit", task: res.Task.ID, data: p})
		}
		return err
	}
	lease := func(worker string, n int) ([]Lease, error) {
		ls, err := c.Lease(ctx, LeaseRequest{WorkerID: worker, Queue: "q", MaxTasks: n})
		if err == nil && len(ls) != n {
			return nil, fmt.Errorf("leased %d tasks, want %d", len(ls), n)
		}
		for _, l := range ls {
			acks = append(acks, ack{op: "lease", task: l.TaskID, lease: l.LeaseID})
		}
		return ls, err
	}
	commit := func(l Lease, result string) error {
		_, err := c.Commit(ctx, l.TaskID, l.LeaseID, []byte(result))
		if err == nil {
			acks = append(acks, ack{op: "commit", task: l.TaskID, lease: l.LeaseID, data: []byte(result)})
		}
		return err
	}
	complete := func(l Lease, result, want string) error {
		err := c.Complete(ctx, l.TaskID, l.LeaseID, []byte(result))
		if err == nil {
			acks = append(acks, ack{op: "complete", task: l.TaskID, lease: l.LeaseID, data: []byte(want)})
		}
		return err
	}
	fail := func(l Lease, permanent bool) error {
		_, err := c.Fail(ctx, l.TaskID, l.LeaseID, "it broke", permanent)
		if err == nil {
			acks = append(acks, ack{op: "fail", task: l.TaskID, lease: l.LeaseID})
		}
		return err
	}

	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := submit(name); err != nil {
			return acks, err
		}
	}
	// Commit, then finalise.
	ls, err := lease("w1", 1)
	if err != nil {
		return acks, err
	}
	l1 := ls[0]
	if err := c.Start(ctx, l1.TaskID, l1.LeaseID); err != nil {
		return acks, err
	}
	acks = append(acks, ack{op: "start", task: l1.TaskID, lease: l1.LeaseID})
	if err := commit(l1, "result-1"); err != nil {
		return acks, err
	}
	if err := complete(l1, "ignored", "result-1"); err != nil {
		return acks, err
	}
	// Fail with a retry, and complete in one step.
	if ls, err = lease("w1", 1); err != nil {
		return acks, err
	}
	if err := fail(ls[0], false); err != nil {
		return acks, err
	}
	if ls, err = lease("w2", 1); err != nil {
		return acks, err
	}
	if err := complete(ls[0], "result-3", "result-3"); err != nil {
		return acks, err
	}
	// A batch.
	reqs := []SubmitRequest{
		{Queue: "q", Payload: []byte("payload-g"), RequestID: "req-g"},
		{Queue: "q", Payload: []byte("payload-h"), RequestID: "req-h"},
		{Queue: "q", Payload: []byte("payload-i"), RequestID: "req-i"},
	}
	res, err := c.SubmitBatch(ctx, reqs)
	if err != nil {
		return acks, err
	}
	for i, r := range res {
		ids[string(rune('g'+i))] = r.Task.ID
		acks = append(acks, ack{op: "submit", task: r.Task.ID, data: reqs[i].Payload})
	}
	// Past the retry's backoff: two leases at once, one heartbeat, a commit
	// and a permanent failure.
	clk.Advance(2 * time.Second)
	if ls, err = lease("w3", 2); err != nil {
		return acks, err
	}
	a, b := ls[0], ls[1]
	clk.Advance(time.Second)
	exp, err := c.Heartbeat(ctx, a.TaskID, a.LeaseID)
	if err != nil {
		return acks, err
	}
	acks = append(acks, ack{op: "heartbeat", task: a.TaskID, lease: a.LeaseID, expiry: state.TimeOf(exp)})
	if err := commit(a, "result-a"); err != nil {
		return acks, err
	}
	if err := fail(b, true); err != nil {
		return acks, err
	}
	if err := c.Kill(ctx, ids["i"], Actor{Reason: "not needed"}); err != nil {
		return acks, err
	}
	acks = append(acks, ack{op: "kill", task: ids["i"]})
	if err := complete(a, "", "result-a"); err != nil {
		return acks, err
	}
	// Reads and a duplicate submit write nothing but still wait.
	if _, err := c.Get(ctx, ids["a"]); err != nil {
		return acks, err
	}
	if r, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte("payload-b"), RequestID: "req-b"}); err != nil {
		return acks, err
	} else if !r.Duplicate || r.Task.ID != ids["b"] {
		return acks, fmt.Errorf("duplicate submit returned %+v", r)
	}
	if err := submit("j"); err != nil {
		return acks, err
	}
	return acks, nil
}

// replayExport replays the WAL on f into a fresh state without a
// coordinator, checking the invariants.
func replayExport(t testing.TB, f fsys.FS, what string) state.Export {
	t.Helper()
	l, err := wal.Open(walOptions(f))
	if err != nil {
		t.Fatalf("%s: reopen the WAL: %v", what, err)
	}
	defer l.Close()
	st := state.New()
	if err := Replay(l, st, 1); err != nil {
		t.Fatalf("%s: replay: %v", what, err)
	}
	if err := st.Invariants(); err != nil {
		t.Fatalf("%s: invariants of the replayed state: %v", what, err)
	}
	return st.Export()
}

// checkRestart replays the disk f twice (the results must be equal and hold
// every ack), then opens a coordinator on it, which must serve a new submit.
func checkRestart(t testing.TB, f fsys.FS, clk *clock.Fake, acks []ack, what string) state.Export {
	t.Helper()
	ex := replayExport(t, f, what)
	if again := replayExport(t, f, what+", second replay"); !reflect.DeepEqual(ex, again) {
		t.Fatalf("%s: two replays of the same disk differ", what)
	}
	if err := checkAcks(ex, acks); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	l, c, err := openCoord(f, clk, 99)
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer l.Close()
	defer c.Close()
	if got := c.Export(); !reflect.DeepEqual(got, ex) {
		t.Fatalf("%s: the reopened coordinator's state differs from the replay", what)
	}
	if _, err := c.Submit(context.Background(), SubmitRequest{Queue: "q", Payload: []byte("after restart")}); err != nil {
		t.Fatalf("%s: submit after the restart: %v", what, err)
	}
	if err := c.CheckInvariants(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return ex
}

func TestFaultStopsServing(t *testing.T) {
	for _, kind := range []faultfs.Kind{faultfs.OpSync, faultfs.OpWrite} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			f := faultfs.NewWithDir("/data")
			l, c, clk, acks := startWorkload(t, f)
			defer l.Close()
			defer c.Close()
			old := acks[0].task

			injected := errors.New("injected " + string(kind) + " failure")
			f.FailNext(kind, injected)
			start := f.Ops()
			// Concurrent requests in flight: none may be acknowledged.
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range 4 {
				wg.Go(func() {
					_, errs[i] = c.Submit(ctx, SubmitRequest{Queue: "q", Payload: fmt.Appendf(nil, "in flight %d", i)})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("in-flight submit %d = %v, want ErrUnavailable", i, err)
				}
			}
			if err := c.Err(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), injected.Error()) {
				t.Fatalf("Err = %v, want ErrUnavailable naming the cause", err)
			}
			// It stopped serving: every later request is refused, reads too.
			if _, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte("later")}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Submit = %v", err)
			}
			if _, err := c.Get(ctx, old); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Get = %v", err)
			}
			if _, err := c.Lease(ctx, LeaseRequest{WorkerID: "w9", Queue: "q"}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Lease = %v", err)
			}
			if err := c.Kill(ctx, old, Actor{Reason: "x"}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("later Kill = %v", err)
			}
			// Exactly one operation failed, and nothing was written or
			// synced after it: no retry.
			failed := 0
			for _, op := range f.Trace()[start:] {
				switch {
				case op.Err != nil && failed > 0:
					t.Fatalf("second failed operation %+v", op)
				case op.Err != nil:
					failed = op.N
				case failed > 0 && (op.Kind == faultfs.OpSync || op.Kind == faultfs.OpWrite || op.Kind == faultfs.OpSyncDir):
					t.Fatalf("%+v after the failed operation %d: retried", op, failed)
				}
			}
			if failed == 0 {
				t.Fatal("no operation failed")
			}

			c.Close()
			l.Close()
			lost := f.PowerLoss()
			ex := checkRestart(t, lost, clk, acks, "power loss")
			if n := len(ex.Tasks); n != 10 {
				t.Fatalf("after power loss: %d tasks, want the 10 acknowledged (nothing unsynced survives)", n)
			}
			checkRestart(t, f, clk, acks, "restart")
		})
	}
}

func TestFaultNoSpace(t *testing.T) {
	for _, tear := range []bool{false, true} {
		t.Run(fmt.Sprintf("tear=%v", tear), func(t *testing.T) {
			ctx := context.Background()
			f := faultfs.NewWithDir("/data")
			f.TearWrites(tear)
			l, c, clk, acks := startWorkload(t, f)
			old := acks[0].task

			f.SetFull(true)
			_, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte("no room")})
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "space") {
				t.Fatalf("Submit on a full disk = %v, want ErrUnavailable mentioning disk space", err)
			}
			t.Logf("refused with: %v", err)
			if _, err := c.Get(ctx, old); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Get after the failure = %v", err)
			}
			c.Close()
			l.Close()

			// Reopened while still full: the log recovers (that needs no
			// space) and reads are served, but writes are still refused.
			l, c, err = openCoord(f, clk, 2)
			if err != nil {
				t.Fatalf("reopen on a full disk: %v", err)
			}
			if err := checkAcks(c.Export(), acks); err != nil {
				t.Fatalf("reopened on a full disk: %v", err)
			}
			if _, err := c.Get(ctx, old); err != nil {
				t.Fatalf("Get on a full disk after reopening: %v", err)
			}
			if _, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte("no room")}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "space") {
				t.Fatalf("Submit on a full disk after reopening = %v", err)
			}
			c.Close()
			l.Close()
			if err := checkAcks(replayExport(t, f.PowerLoss(), "full, power loss"), acks); err != nil {
				t.Fatalf("full, power loss: %v", err)
			}

			// Space is back: reopen and serve; the old tasks are there.
			f.SetFull(false)
			l, c, err = openCoord(f, clk, 3)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			defer c.Close()
			res, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte("room again")})
			if err != nil {
				t.Fatalf("Submit once there is space: %v", err)
			}
			acks = append(acks, ack{op: "submit", task: res.Task.ID, data: []byte("room again")})
			if _, err := c.Get(ctx, old); err != nil {
				t.Fatal(err)
			}
			c.Close()
			l.Close()
			checkRestart(t, f.PowerLoss(), clk, acks, "space again, power loss")
		})
	}
}

// TestFaultPowerLossAtEveryOp cuts the power after each disk operation of
// the workload in turn and restarts from the rebooted disk: every
// acknowledged request is there, the state is valid, two replays agree, and
// the coordinator serves again. Each cut is tried with only the fsynced data
// surviving, and with a random prefix of the unsynced data too.
func TestFaultPowerLossAtEveryOp(t *testing.T) {
	f := faultfs.NewWithDir("/data")
	base := f.Ops()
	l, c, clk, full := startWorkload(t, f)
	work := f.Ops() - base // the rest is Close's: the WAL's tail file
	c.Close()
	l.Close()
	n := f.Ops() - base
	if n < 40 {
		t.Fatalf("the workload made only %d disk operations", n)
	}
	checkRestart(t, f.PowerLoss(), clk, full, "no cut")

	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := 1; i <= n; i++ {
		f := faultfs.NewWithDir("/data")
		f.CutPowerAfter(base + i)
		clk := clock.NewFake(epoch)
		var acks []ack
		l, c, err := openCoord(f, clk, 1)
		if err == nil {
			acks, err = runWorkload(c, clk)
			c.Close()
			l.Close()
		}
		what := fmt.Sprintf("power cut after op %d of %d", i, n)
		if i < work && err == nil {
			t.Fatalf("%s: the workload completed", what)
		}
		if err != nil && len(acks) > 0 && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: workload error %v, want ErrUnavailable", what, err)
		}
		checkRestart(t, f.PowerLoss(), clk, acks, what)
		checkRestart(t, f.PowerLossKeep(rng), clk, acks, fmt.Sprintf("%s, keeping unsynced pages (seed %#x)", what, seed))
	}
}
