package coordinator

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

var defaultPropSeeds = 2000

var (
	propSeeds = flag.Int("prop.seeds", 0, "random operation sequences the property test runs (default 2000, 300 under -race, 200 under -short)")
	propOps   = flag.Int("prop.ops", 150, "operations per sequence")
	propSeed  = flag.Uint64("prop.seed", 0, "run only this seed (to reproduce a failure)")
)

// TestPropertyRandomOperations drives the coordinator with seeded random
// sequences of every operation (submits with and without deadlines and
// trace contexts, heartbeats with progress, snoozes, flow-control changes)
// and of
// clock moves (forward and, rarely, backward) and restarts. After every applied record the state invariants
// hold; at the end, replaying the WAL files from disk gives a state equal to
// the live one, twice over; and from the clients' side no task ever has two
// winning commits. A failure prints its seed; -prop.seed=N reruns it.
func TestPropertyRandomOperations(t *testing.T) {
	first, seeds := seedRange(*propSeed, *propSeeds, defaultPropSeeds, 200)
	var total seqCounts
	for seed := first; seed < first+uint64(seeds); seed++ {
		ok, n := runSequence(t, seed, *propOps)
		if !ok {
			t.Fatalf("seed %d failed; rerun with: go test ./internal/coordinator -run TestPropertyRandomOperations -prop.seed=%d -v", seed, seed)
		}
		total.deadlineLeases += n.deadlineLeases
		total.snoozed += n.snoozed
		total.reports += n.reports
	}
	switch {
	case seeds < 100:
	case total.deadlineLeases == 0:
		t.Fatal("no sequence failed a leased task at its deadline; the test needs some")
	case total.snoozed == 0:
		t.Fatal("no sequence snoozed a task; the test needs some")
	case total.reports == 0:
		t.Fatal("no sequence ended with a progress report kept; the test needs some")
	}
}

type heldLease struct {
	Lease
	worker string
}

// seqCounts counts what a sequence ended with: leases ended at their
// task's deadline, snoozed executions, progress reports kept.
type seqCounts struct{ deadlineLeases, snoozed, reports int }

// runSequence runs one sequence and says whether it passed, and what it
// ended with.
func runSequence(t *testing.T, seed uint64, ops int) (ok bool, n seqCounts) {
	var failed bool
	t.Run(fmt.Sprint(seed), func(t *testing.T) {
		defer func() { failed = t.Failed() }()
		e := newEnv(t, seed)
		rng := rand.New(rand.NewPCG(seed, 0x7e4e))
		queues := []string{"a", "b"}
		var tasks []string
		var held []heldLease
		acked := map[string]bool{}
		winners := map[string]map[string]bool{} // task → leases whose commit won
		win := func(task, lease string) {
			if winners[task] == nil {
				winners[task] = map[string]bool{}
			}
			winners[task][lease] = true
			if len(winners[task]) > 1 {
				t.Fatalf("task %s has winning commits from leases %v", task, winners[task])
			}
		}
		expected := func(op string, err error, allowed ...error) {
			if err == nil {
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					return
				}
			}
			t.Fatalf("%s: unexpected error %v", op, err)
		}
		pick := func() (heldLease, int) {
			i := rng.IntN(len(held))
			return held[i], i
		}
		submitReq := func() SubmitRequest {
			r := SubmitRequest{
				Queue:           queues[rng.IntN(len(queues))],
				Payload:         []byte(fmt.Sprintf("p%d", rng.IntN(1000))),
				ExecutionWindow: time.Duration(1+rng.IntN(10)) * time.Second,
				Retry: state.RetryPolicy{MaxAttempts: uint32(1 + rng.IntN(3)),
					InitialBackoff: time.Duration(rng.IntN(3)) * time.Second, MaxBackoff: 5 * time.Second},
				Priority: int32(rng.IntN(3) - 1),
			}
			if rng.IntN(3) == 0 {
				// A request id always comes with the same queue and payload:
				// a retry (another queue or payload is refused).
				k := rng.IntN(20)
				r.RequestID, r.Queue, r.Payload = fmt.Sprintf("req-%d", k), queues[k%len(queues)], fmt.Appendf(nil, "req-%d", k)
			}
			if rng.IntN(5) == 0 {
				r.NotBefore = e.clock.Now().Add(time.Duration(rng.IntN(5)) * time.Second)
			}
			switch rng.IntN(6) {
			case 0:
				// At least 5 s: past a not_before up to 4 s ahead, by more
				// than the minimum window.
				r.Timeout = time.Duration(5000+rng.IntN(15000)) * time.Millisecond
			case 1:
				r.Deadline = e.clock.Now().Add(time.Duration(5000+rng.IntN(15000)) * time.Millisecond)
			}
			if rng.IntN(3) == 0 && r.RequestID == "" {
				r.Trace.Parent = fmt.Sprintf("00-%032x-%016x-01", rng.Uint64()|1, rng.Uint64()|1)
				if rng.IntN(2) == 0 {
					r.Trace.State = "vendor=v1"
				}
			}
			return r
		}
		traces := map[string]state.TraceContext{} // by task, as submitted
		for range ops {
			switch op := rng.IntN(100); {
			case op < 15:
				req := submitReq()
				res, err := e.c.Submit(ctx, req)
				expected("submit", err)
				if !res.Duplicate {
					tasks = append(tasks, res.Task.ID)
					traces[res.Task.ID] = req.Trace
				}
				acked[res.Task.ID] = true
			case op < 20:
				reqs := make([]SubmitRequest, 1+rng.IntN(4))
				for i := range reqs {
					reqs[i] = submitReq()
				}
				res, err := e.c.SubmitBatch(ctx, reqs)
				expected("submit batch", err)
				for i, r := range res {
					if !acked[r.Task.ID] {
						tasks = append(tasks, r.Task.ID)
						traces[r.Task.ID] = reqs[i].Trace
					}
					acked[r.Task.ID] = true
				}
			case op < 35:
				w := fmt.Sprintf("w%d", rng.IntN(4))
				q := queues[rng.IntN(len(queues))]
				ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: w, Queue: q, MaxTasks: 1 + rng.IntN(3)})
				expected("lease", err)
				for _, l := range ls {
					held = append(held, heldLease{l, w})
					if l.Trace != traces[l.TaskID] {
						t.Fatalf("lease of %s carries trace context %+v, it was submitted with %+v", l.TaskID, l.Trace, traces[l.TaskID])
					}
				}
				if qs, _ := e.c.Queues(ctx, DefaultNamespace, q); len(ls) > 0 && len(qs) == 1 && qs[0].Limits != nil &&
					qs[0].Limits.MaxConcurrency > 0 && qs[0].Leases > int(qs[0].Limits.MaxConcurrency) {
					t.Fatalf("a lease left queue %s with %d live leases, above its max concurrency %d", q, qs[0].Leases, qs[0].Limits.MaxConcurrency)
				}
			case op < 42 && len(held) > 0:
				h, _ := pick()
				var report *state.Report
				if rng.IntN(2) == 0 {
					report = &state.Report{Message: fmt.Sprintf("step %d", rng.IntN(3)), Percent: uint32(rng.IntN(101)), HasPercent: rng.IntN(2) == 0}
					if !report.HasPercent {
						report.Percent = 0
					}
				}
				_, err := e.c.HeartbeatReport(ctx, h.TaskID, h.LeaseID, report)
				expected("heartbeat", err, ErrLeaseLost, ErrAlreadyCommitted)
				if v, gerr := e.c.View(ctx, h.TaskID); err == nil && report != nil && gerr == nil && v.Report.Report != *report {
					t.Fatalf("after a heartbeat with progress %+v, task %s shows %+v", *report, h.TaskID, v.Report)
				}
			case op < 46 && len(held) > 0:
				h, _ := pick()
				err := e.c.Start(ctx, h.TaskID, h.LeaseID)
				expected("start", err, ErrLeaseLost, ErrAlreadyCommitted, ErrWrongState)
			case op < 56 && len(held) > 0:
				h, _ := pick()
				_, err := e.c.Commit(ctx, h.TaskID, h.LeaseID, []byte("c-"+h.LeaseID))
				expected("commit", err, ErrLeaseLost, ErrAlreadyCommitted)
				if err == nil {
					win(h.TaskID, h.LeaseID)
				}
			case op < 64 && len(held) > 0:
				h, i := pick()
				err := e.c.Complete(ctx, h.TaskID, h.LeaseID, []byte("d-"+h.LeaseID))
				expected("complete", err, ErrLeaseLost, ErrAlreadyCommitted)
				if err == nil {
					if !h.Committed {
						win(h.TaskID, h.LeaseID)
					}
					held = append(held[:i], held[i+1:]...)
				}
			case op < 68 && len(held) > 0:
				// A batch may name a lease twice, as a worker's retry would.
				items := make([]CompleteItem, 1+rng.IntN(4))
				from := make([]heldLease, len(items))
				for j := range items {
					from[j], _ = pick()
					items[j] = CompleteItem{TaskID: from[j].TaskID, LeaseID: from[j].LeaseID, Result: []byte("d-" + from[j].LeaseID)}
				}
				errs, err := e.c.CompleteBatch(ctx, items)
				expected("complete batch", err)
				done := map[string]bool{}
				for j, err := range errs {
					expected("complete batch item", err, ErrLeaseLost, ErrAlreadyCommitted)
					if err == nil {
						if !from[j].Committed {
							win(from[j].TaskID, from[j].LeaseID)
						}
						done[from[j].LeaseID] = true
					}
				}
				kept := held[:0]
				for _, h := range held {
					if !done[h.LeaseID] {
						kept = append(kept, h)
					}
				}
				held = kept
			case op < 73 && len(held) > 0:
				h, i := pick()
				_, err := e.c.Fail(ctx, h.TaskID, h.LeaseID, "failed", rng.IntN(4) == 0)
				expected("fail", err, ErrLeaseLost, ErrAlreadyCommitted, ErrWrongState)
				if err == nil {
					held = append(held[:i], held[i+1:]...)
				}
			case op < 76 && len(held) > 0:
				// A snooze gives the attempt back: the task waits with the
				// attempt count it had before the lease.
				h, i := pick()
				_, err := e.c.Snooze(ctx, h.TaskID, h.LeaseID, time.Duration(rng.IntN(3000))*time.Millisecond, "later")
				expected("snooze", err, ErrLeaseLost, ErrAlreadyCommitted, ErrWrongState)
				if err == nil {
					held = append(held[:i], held[i+1:]...)
					got, err := e.c.Get(ctx, h.TaskID)
					expected("get", err)
					if got.State != state.Waiting || got.Attempt != h.Attempt-1 {
						t.Fatalf("snoozed attempt %d of %s: task %s at attempt %d, want WAITING at %d", h.Attempt, h.TaskID, got.State, got.Attempt, h.Attempt-1)
					}
				}
			case op < 79 && len(tasks) > 0:
				err := e.c.Kill(ctx, tasks[rng.IntN(len(tasks))], Actor{Reason: "kill"})
				expected("kill", err, ErrWrongState)
			case op < 90:
				e.clock.Advance(time.Duration(rng.IntN(6000)) * time.Millisecond)
			case op < 91:
				e.clock.Advance(-time.Duration(rng.IntN(3000)) * time.Millisecond) // a clock jump back
			case op < 95:
				_, err := e.c.ExpireDue(ctx)
				expected("expire", err)
			case op < 97 && len(tasks) > 0:
				id := tasks[rng.IntN(len(tasks))]
				got, err := e.c.Get(ctx, id)
				expected("get", err)
				h, err := e.c.History(ctx, id)
				expected("history", err)
				if len(h) != len(got.LSNs()) {
					t.Fatalf("history of %s has %d records, the task lists %d", id, len(h), len(got.LSNs()))
				}
			case op == 98:
				// Flow control: random limits, or none. A grant beyond them
				// would not apply (the coordinator would stop), and the
				// replay below must rebuild the token buckets exactly.
				var l state.Limits
				if rng.IntN(3) > 0 {
					l.MaxConcurrency = uint32(1 + rng.IntN(3))
				}
				if rng.IntN(3) > 0 {
					l.RateMilli, l.Burst = uint64(100+rng.IntN(3000)), uint32(1+rng.IntN(3))
				}
				_, err := e.c.SetLimits(ctx, LimitsRequest{Queue: queues[rng.IntN(len(queues))], Limits: l, Partitions: 1})
				expected("set limits", err)
			case op < 98:
				// Live state equals the replay of the files on disk.
				if live, disk := e.c.Export(), e.replayFromDisk(); !reflect.DeepEqual(live, disk) {
					t.Fatalf("live state differs from its replay at lsn %d", live.LastLSN)
				}
				e.close()
				e.open()
			}
			if t.Failed() {
				return
			}
		}
		live := e.c.Export()
		for id := range acked {
			if !hasTask(live, id) {
				t.Fatalf("acknowledged task %s is missing", id)
			}
		}
		first, second := e.replayFromDisk(), e.replayFromDisk()
		if !reflect.DeepEqual(live, first) {
			t.Fatalf("live state differs from its replay from disk")
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("two replays of the same log differ")
		}
		for _, task := range live.Tasks {
			for _, ex := range task.Executions {
				if ex.Reason == state.ReasonLeaseDeadline {
					n.deadlineLeases++
				}
				if ex.Status == state.ExecSnoozed {
					n.snoozed++
				}
			}
		}
		n.reports = len(live.Reports)
	})
	return !failed, n
}

func hasTask(x state.Export, id string) bool {
	for _, t := range x.Tasks {
		if t.ID == id {
			return true
		}
	}
	return false
}
