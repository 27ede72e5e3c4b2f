package coordinator

// Deterministic simulation of workflows (docs/design/workflows.md): one
// coordinator on the fault-injecting disk of package faultfs, a fake clock
// and seeded ids. Clients submit random workflows — chains, diamonds,
// random graphs, and now and then a fan-out of up to 1,000 tasks with one
// join — each as one batch whose tasks name each other by request id, with
// either failure policy; some tasks fail for good, some fail once, so that
// failures cascade. A client that got no answer submits the same batch
// again after the restart. Workers lease from every queue and complete,
// fail, complete twice (a network retry), or stall past their lease and
// try again later (the clock moves past its expiry), several of them on
// the same queue. Some tasks spawn, at their commit or completion,
// children and a continuation that depends on them and on the parent;
// their workers commit twice now and then, and a stalled one tries to
// spawn once its lease has expired and another attempt may have won.
// Operators cancel workflows now and then (nothing of one may be left to
// lease) and retry them. Faults at random: kill -9 (the page cache survives),
// power loss (only fsynced data survives, or that plus a prefix of the
// rest), a power cut in the middle of a request, a torn write, a failed
// fsync or write (the partition stops and is reopened).
//
// Checks: the state invariants after every record; after every restart,
// every acknowledged workflow is there, and every workflow ever submitted
// has all of its tasks or none (a batch is one record). At the end, once
// the workers drained everything: nothing is left BLOCKED or unfinished;
// and the durable log, replayed record by record, shows that no task was
// leased before all its dependencies completed (ended, under RUN), that
// every task created BLOCKED was released at most once and, if it ever
// ran, exactly once, that a task whose dependency failed under DEAD ended
// DEAD with dependency_failed, that a task spawned in one record at most,
// the one of its winning commit, and that the replay equals the live
// state.
//
//	go test ./internal/coordinator -run 'TestWorkflowSimulation$' -wfsim.seeds 200 -v
//	go test ./internal/coordinator -run 'TestWorkflowSimulation$' -wfsim.seed 17 -v

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/state"
)

var (
	defaultWfSimSeeds = 10
	wfSimSeeds        = flag.Int("wfsim.seeds", 0, "seeds TestWorkflowSimulation runs (default 10, 4 under -race or -short)")
	wfSimSeed         = flag.Uint64("wfsim.seed", 0, "run only this seed")
	wfSimSteps        = flag.Int("wfsim.steps", 250, "steps per seed")
)

func TestWorkflowSimulation(t *testing.T) {
	from, seeds := seedRange(*wfSimSeed, *wfSimSeeds, defaultWfSimSeeds, 4)
	total := runSeeds(t, from, seeds, "-run 'TestWorkflowSimulation$' -wfsim.seed", func(seed uint64) (map[string]int, error) {
		return runWfSim(seed, *wfSimSteps)
	})
	t.Logf("%d seeds: %v", seeds, total)
}

// wfBatch is one workflow a client submits, as it submits it again.
type wfBatch struct {
	id    string
	reqs  []SubmitRequest
	acked bool
}

// wfStalled is a lease a stalled worker holds and will use late.
type wfStalled struct {
	task, lease string
}

type wfSim struct {
	*simDisk
	// batches are every workflow submitted, acknowledged or not.
	batches []*wfBatch
	stalled []wfStalled
	// cancelled are the workflows cancelled, which retry picks often.
	cancelled []*wfBatch
	// applyErr is the first invariant violation seen after a record.
	applyErr error
	// ends are how the tasks of another partition (remote dependencies,
	// cluster mode) ended, once their partition decided it: an end never
	// changes, as a task that ended answers the same until retention.
	ends    map[string]state.Ended
	remotes int
}

var wfQueues = []string{"wa", "wb", "wc"}

const wfWindow = 2 * time.Second

func runWfSim(seed uint64, steps int) (map[string]int, error) {
	s := &wfSim{ends: map[string]state.Ended{}}
	// A batch holds a fan-out of 1,000 with its root and its join.
	d, err := newSimDisk(seed, 0xf10f, Config{Limits: Limits{MaxBatch: 1002}}, s.opened)
	if err != nil {
		return nil, err
	}
	s.simDisk = d
	defer s.shutdown()
	for range steps {
		if err := s.step(); err != nil {
			return s.stats, err
		}
		if s.applyErr != nil {
			return s.stats, s.applyErr
		}
	}
	if err := s.drain(); err != nil {
		return s.stats, err
	}
	live := s.c.Export()
	s.shutdown()
	return s.stats, s.check(live)
}

// opened checks the invariants after every record applied from then on,
// and the batches as the disk left them. The workers' stalled leases went
// with the process.
func (s *wfSim) opened(c *Coordinator) error {
	n := 0
	c.onApply = func(st *state.State) {
		// Every record in a small state, every 50th once it is large.
		if n++; s.applyErr == nil && (st.Len() < 300 || n%50 == 0) {
			if err := st.Invariants(); err != nil {
				s.applyErr = fmt.Errorf("invariants after lsn %d: %w", st.LastLSN(), err)
			}
		}
	}
	s.stalled = nil
	return s.checkBatches(c)
}

// checkBatches checks, after an open, that every workflow submitted has all
// its tasks or none, and every acknowledged one all of them.
func (s *wfSim) checkBatches(c *Coordinator) error {
	for _, b := range s.batches {
		n := 0
		for i, r := range b.reqs {
			rid := r.RequestID
			if rid == "" {
				rid = WorkflowRequestID(b.id, i)
			}
			v, err := c.viewByRequest(r.Namespace, rid)
			if err != nil {
				return err
			}
			if v != nil {
				n++
			}
		}
		switch {
		case n != 0 && n != len(b.reqs):
			return fmt.Errorf("workflow %s has %d of its %d tasks after a restart: a batch is all or nothing", b.id, n, len(b.reqs))
		case b.acked && n == 0:
			return fmt.Errorf("acknowledged workflow %s is lost", b.id)
		}
	}
	return nil
}

// step moves the clock, perhaps injects a fault, and runs one client or
// worker action.
func (s *wfSim) step() error {
	s.clk.Advance(time.Duration(s.rng.IntN(800)) * time.Millisecond)
	cut := false
	switch r := s.rng.IntN(300); {
	case r < 3:
		return s.kill()
	case r < 6:
		return s.powerLoss()
	case r < 9:
		s.failNext(faultfs.OpSync)
	case r < 11:
		s.failNext(faultfs.OpWrite)
	case r < 14:
		s.stats["fault-tear"]++
		s.disk.TearAt(s.disk.Ops()+s.rng.IntN(3), s.rng.IntN(200))
	case r < 17:
		s.cutPower()
		cut = true
	case r < 23:
		// The power goes right after a new workflow's write, before its
		// fsync: some prefix of what it wrote may survive.
		s.stats["fault-power-cut-submit"]++
		if _, err := s.c.ExpireDue(ctx); err != nil {
			return err
		}
		s.disk.CutPowerAfter(s.disk.Ops() + 1)
		if err := s.submit(); err == nil || !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("a submit with the power cut after its write answered %v", err)
		}
		return s.restart("power-keep")
	}
	err := s.act()
	switch {
	case cut:
		// What was written and not fsynced is lost, or a prefix of it
		// survives: a torn write at the end of the log.
		if s.rng.IntN(2) == 0 {
			return s.restart("power-keep")
		}
		return s.restart("power")
	case err != nil:
		return s.stopped(err)
	}
	s.disk.ClearFaults()
	return nil
}

// act runs one client or worker action. An error that is not the
// partition stopping is a bug.
func (s *wfSim) act() error {
	if _, err := s.c.ExpireDue(ctx); err != nil {
		return err
	}
	switch r := s.rng.IntN(100); {
	case r < 15:
		return s.submit()
	case r < 20:
		return s.resubmit()
	case r < 27:
		return s.late()
	case r < 29:
		return s.cancel()
	case r < 31:
		return s.retry()
	case r < 36:
		return s.resolveRemote(false)
	default:
		return s.work(s.rng.IntN(4) == 0)
	}
}

// submit makes and submits a new random workflow.
func (s *wfSim) submit() error {
	k := len(s.batches)
	b := &wfBatch{id: fmt.Sprintf("wf%d", k)}
	task := func() int {
		i := len(b.reqs)
		r := SubmitRequest{Queue: wfQueues[s.rng.IntN(len(wfQueues))], ExecutionWindow: wfWindow,
			Retry: state.RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
		if s.rng.IntN(3) != 0 {
			r.RequestID = fmt.Sprintf("r%d-%d", k, i)
		}
		switch x := s.rng.IntN(40); {
		case x == 0:
			r.Payload = []byte("fail")
		case x < 3:
			r.Payload = []byte("flaky")
		case x < 6:
			r.Payload = []byte("spawn")
		default:
			r.Payload = []byte("ok")
		}
		if s.rng.IntN(5) == 0 {
			r.OnDependencyFailure = state.DepRun
		}
		b.reqs = append(b.reqs, r)
		return i
	}
	// Dependencies are kept as indexes until the requests have their ids.
	var edges [][]int
	add := func(deps ...int) int {
		edges = append(edges, deps)
		return task()
	}
	shape := s.rng.IntN(20)
	switch {
	case shape < 6: // a chain
		prev := add()
		for range 1 + s.rng.IntN(7) {
			prev = add(prev)
		}
	case shape < 11: // a diamond
		a := add()
		b1, b2 := add(a), add(a)
		add(b1, b2)
	case shape == 11: // a large fan-out with one join
		n := 50 + s.rng.IntN(950)
		if s.rng.IntN(4) != 0 {
			n = 1000
		}
		root := add()
		kids := make([]int, n)
		for j := range kids {
			kids[j] = add(root)
		}
		add(kids...)
		s.stats["fan-out"]++
	default: // a random graph
		n := 2 + s.rng.IntN(10)
		for j := range n {
			var deps []int
			for d := range j {
				if s.rng.IntN(4) == 0 {
					deps = append(deps, d)
				}
			}
			add(deps...)
		}
	}
	// Name the dependencies by request id: a dependency without one gets
	// one.
	for _, deps := range edges {
		for _, d := range deps {
			if b.reqs[d].RequestID == "" {
				b.reqs[d].RequestID = fmt.Sprintf("r%d-%d", k, d)
			}
		}
	}
	for i, deps := range edges {
		b.reqs[i].DependsOn = nil
		for _, d := range deps {
			b.reqs[i].DependsOn = append(b.reqs[i].DependsOn, b.reqs[d].RequestID)
		}
	}
	// Now and then a task depends on a task of another partition too.
	if s.rng.IntN(4) == 0 {
		i := s.rng.IntN(len(b.reqs))
		id := fmt.Sprintf("x%d-p9", s.remotes)
		s.remotes++
		b.reqs[i].DependsOn = append(b.reqs[i].DependsOn, id)
		b.reqs[i].Remote = []string{id}
		s.stats["remote-edges"]++
	}
	// Shuffle the batch: its order is not the graph's.
	perm := s.rng.Perm(len(b.reqs))
	shuffled := make([]SubmitRequest, len(b.reqs))
	for i, j := range perm {
		shuffled[j] = b.reqs[i]
	}
	b.reqs = shuffled
	s.batches = append(s.batches, b)
	s.stats["workflows"]++
	s.stats["tasks"] += len(b.reqs)
	return s.send(b)
}

// send submits b (a copy of its requests: the coordinator fills them in).
func (s *wfSim) send(b *wfBatch) error {
	reqs := slices.Clone(b.reqs)
	for i := range reqs {
		reqs[i].DependsOn = slices.Clone(reqs[i].DependsOn)
		reqs[i].Remote = slices.Clone(reqs[i].Remote)
	}
	res, err := s.c.SubmitWorkflow(ctx, b.id, reqs)
	if err != nil {
		return err
	}
	if len(res) != len(b.reqs) {
		return fmt.Errorf("workflow %s: %d answers for %d tasks", b.id, len(res), len(b.reqs))
	}
	b.acked = true
	return nil
}

// resolveRemote has the partition learn how some remote dependencies
// ended, as its host's watcher does: those another partition has decided
// (deciding some now, or all of them when the workers drain), now and then
// twice, and now and then one learned before again.
func (s *wfSim) resolveRemote(all bool) error {
	deps, err := s.c.RemoteDependencies()
	if err != nil {
		return err
	}
	if len(s.ends) > 0 && s.rng.IntN(4) == 0 {
		// An end learned before, asked again (a new owner, a retried
		// poll): it resolves only what is pending.
		deps = append(deps, fmt.Sprintf("x%d-p9", s.rng.IntN(s.remotes)))
	}
	for _, id := range deps {
		end, ok := s.ends[id]
		if !ok {
			if !all && s.rng.IntN(3) != 0 {
				continue // not ended there yet
			}
			end = state.EndedCompleted
			if x := s.rng.IntN(10); !all && x < 3 {
				end = []state.Ended{state.EndedFailed, state.EndedDead, state.EndedGone}[x]
			}
			s.ends[id] = end
		}
		var result []byte
		if end == state.EndedCompleted {
			result = []byte("from " + id)
		}
		for range 1 + s.rng.IntN(2) {
			n, err := s.c.ResolveRemote(ctx, id, RemoteEnd{Outcome: end, Result: result})
			if err != nil {
				return err
			}
			s.stats["remote-resolved"] += n
		}
	}
	return nil
}

// resubmit sends a workflow again, as a client whose answer was lost (or
// one that retries anyway): it must be answered with the same tasks.
func (s *wfSim) resubmit() error {
	if len(s.batches) == 0 {
		return nil
	}
	b := s.batches[s.rng.IntN(len(s.batches))]
	if b.acked && s.rng.IntN(4) != 0 {
		return nil
	}
	s.stats["resubmits"]++
	return s.send(b)
}

// work leases tasks of a random queue and finishes them as their payload
// says, or leaves some to stall; twice, a worker completes twice.
func (s *wfSim) work(many bool) error {
	n := 1 + s.rng.IntN(3)
	if many {
		n = 200
	}
	q := wfQueues[s.rng.IntN(len(wfQueues))]
	leases, err := s.c.Lease(ctx, LeaseRequest{WorkerID: fmt.Sprintf("w%d", s.rng.IntN(3)), Queue: q, MaxTasks: n})
	if err != nil {
		return err
	}
	var done []CompleteItem
	for _, l := range leases {
		s.stats["leases"]++
		switch p := string(l.Payload); {
		case s.rng.IntN(15) == 0:
			s.stats["stalls"]++
			s.stalled = append(s.stalled, wfStalled{l.TaskID, l.LeaseID})
		case p == "fail", p == "flaky" && l.Attempt == 1:
			if _, err := s.c.Fail(ctx, l.TaskID, l.LeaseID, "boom", p == "fail"); err != nil {
				return err
			}
		case p == "spawn" && !l.Committed:
			if err := s.spawn(l); err != nil {
				return err
			}
		default:
			done = append(done, CompleteItem{TaskID: l.TaskID, LeaseID: l.LeaseID, Result: []byte("r-" + l.TaskID)})
			if s.rng.IntN(10) == 0 {
				done = append(done, done[len(done)-1]) // a network retry in the same batch
			}
		}
	}
	if len(done) == 0 {
		return nil
	}
	errs, err := s.c.CompleteBatch(ctx, done)
	if err != nil {
		return err
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("completing %s with its current lease: %w", done[i].TaskID, e)
		}
	}
	return nil
}

// late moves the clock past the stalled leases and has their workers try
// to complete: refused, their tasks leased again or expired meanwhile.
func (s *wfSim) late() error {
	if len(s.stalled) == 0 {
		return nil
	}
	s.clk.Advance(wfWindow + time.Duration(s.rng.IntN(1000))*time.Millisecond)
	for _, st := range s.stalled {
		// A stalled parent tries to spawn: it must not.
		_, err := s.c.CompleteSpawn(ctx, st.task, st.lease, []byte("late"), spawnOf(st.task, s.rng))
		switch {
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrAlreadyCommitted):
			s.stats["late-refused"]++
		case err != nil:
			return err
		default:
			return fmt.Errorf("a stalled lease %s of %s completed after its expiry", st.lease, st.task)
		}
	}
	s.stalled = nil
	return nil
}

// cancel cancels a random workflow: no task of it may be left to lease.
func (s *wfSim) cancel() error {
	b := s.ackedBatch()
	if b == nil {
		return nil
	}
	v, _, err := s.c.CancelWorkflow(ctx, "", b.id, Actor{Reason: "sim"})
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	case !v.Done() || v.Cancelled == nil:
		return fmt.Errorf("workflow %s after its cancel: %v of %d tasks by state, cancel %v", b.id, v.Counts, v.Total, v.Cancelled)
	}
	s.stats["cancels"]++
	s.cancelled = append(s.cancelled, b)
	return nil
}

// retry retries a random workflow; refused when nothing of it can run
// again.
func (s *wfSim) retry() error {
	b := s.ackedBatch()
	if len(s.cancelled) > 0 && s.rng.IntN(2) == 0 {
		b = s.cancelled[s.rng.IntN(len(s.cancelled))]
	}
	if b == nil {
		return nil
	}
	_, n, err := s.c.RetryWorkflow(ctx, "", b.id, Actor{Reason: "sim"})
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrWrongState):
		return nil
	case err != nil:
		return err
	}
	s.stats["retries"]++
	s.stats["retried-tasks"] += n
	return nil
}

// ackedBatch is a random acknowledged workflow (nil: none).
func (s *wfSim) ackedBatch() *wfBatch {
	if len(s.batches) == 0 {
		return nil
	}
	if b := s.batches[s.rng.IntN(len(s.batches))]; b.acked {
		return b
	}
	return nil
}

// drain runs the workers without faults until every task has ended.
func (s *wfSim) drain() error {
	s.disk.ClearFaults()
	s.disk.SetFull(false)
	if s.c == nil || s.c.Err() != nil {
		if err := s.restart("crash"); err != nil {
			return err
		}
	}
	for _, b := range s.batches {
		if !b.acked {
			if err := s.send(b); err != nil {
				return fmt.Errorf("drain: %w", err)
			}
		}
	}
	for range 2000 {
		st := s.c.Stats()
		if st.ByState[state.Waiting]+st.ByState[state.Leased]+st.ByState[state.Blocked]+st.ByState[state.Committed] == 0 {
			return nil
		}
		s.clk.Advance(time.Second)
		if _, err := s.c.ExpireDue(ctx); err != nil {
			return err
		}
		if err := s.resolveRemote(true); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		for range wfQueues {
			if err := s.work(true); err != nil {
				return fmt.Errorf("drain: %w", err)
			}
		}
	}
	return fmt.Errorf("tasks are still unfinished after the drain: %v", s.c.Stats().ByState)
}

// check replays the durable log record by record and checks what the
// graph promises, then the replay against the live state.
func (s *wfSim) check(live state.Export) error {
	if s.stats["remote-edges"] > 0 && s.stats["remote-resolved"] == 0 {
		return errors.New("remote edges were made, and none was resolved")
	}
	released := map[string]int{}
	blocked := map[string]bool{}    // created BLOCKED
	spawns := map[string][]string{} // the leases whose record spawned, by parent
	// retried are the tasks an operator's retry put back after they
	// ended; ended those of them ended at the record being applied.
	retried := map[string]bool{}
	var ended []string
	before := func(lsn uint64, r state.Record, st *state.State) error {
		ended = ended[:0]
		switch r := r.(type) {
		case *state.LeaseGranted:
			if err := leasable(st, r.TaskID, retried); err != nil {
				return fmt.Errorf("lsn %d: %w", lsn, err)
			}
		case *state.TaskRetried:
			ended = append(ended, r.TaskID)
		case *state.WorkflowRetried:
			st.Workflow(state.WorkflowKey{Namespace: r.Namespace, ID: r.Workflow}).Members(func(t *state.Task) bool {
				if t.State.Terminal() {
					ended = append(ended, t.ID)
				}
				return true
			})
		}
		return nil
	}
	st, err := s.replayDisk(before, func(lsn uint64, r state.Record, st *state.State) error {
		for _, t := range st.Released() {
			released[t.ID]++
		}
		for _, id := range ended {
			switch st.Task(id).State {
			case state.Blocked:
				// Blocked again: it is released again.
				released[id] = 0
				retried[id] = true
			case state.Waiting:
				retried[id] = true
			}
		}
		made := state.Creates(r)
		if len(made) > 0 && r.Task() != "" {
			lease := ""
			switch r := r.(type) {
			case *state.TaskCommitted:
				lease = r.LeaseID
			case *state.TaskCompleted:
				lease = r.LeaseID
			}
			spawns[r.Task()] = append(spawns[r.Task()], lease)
		}
		for _, c := range made {
			if st.Task(c.TaskID).State == state.Blocked {
				blocked[c.TaskID] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	st.Scan(0, func(t *state.Task) bool {
		n := released[t.ID]
		switch {
		case n > 1:
			errs = append(errs, fmt.Errorf("task %s was released %d times", t.ID, n))
		case blocked[t.ID] && len(t.Executions) > 0 && n != 1:
			errs = append(errs, fmt.Errorf("task %s was created BLOCKED, ran, and was released %d times", t.ID, n))
		case !t.State.Terminal():
			errs = append(errs, fmt.Errorf("task %s is %s after the drain", t.ID, t.State))
		}
		if ls := spawns[t.ID]; len(ls) > 1 || len(ls) == 1 && ls[0] != t.CommittedBy {
			errs = append(errs, fmt.Errorf("task %s spawned by leases %v, its commit is %q: a task spawns once, at its winning commit", t.ID, ls, t.CommittedBy))
		} else if len(ls) == 1 {
			s.stats["checked-spawns"]++
		}
		g := st.Graph(t)
		for i, e := range g.Edges {
			if e.Remote {
				errs = append(errs, s.checkRemote(st, t, g, i)...)
				continue
			}
			d := st.Task(e.ID)
			if d.State != state.Completed && g.Policy == state.DepDead &&
				(t.State != state.Dead || !strings.HasPrefix(t.FailureReason, state.ReasonDependencyFailed) && !strings.HasPrefix(t.FailureReason, "workflow cancelled")) {
				errs = append(errs, fmt.Errorf("task %s is %s (%q) though its dependency %s is %s", t.ID, t.State, t.FailureReason, d.ID, d.State))
			}
		}
		if len(errs) == 0 && len(g.Edges) > 0 {
			s.stats["checked-dependents"]++
		}
		return len(errs) < 10
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if got := st.Export(); !reflect.DeepEqual(got, live) {
		return errors.New("replaying the log does not give the live state")
	}
	return nil
}

// leasable says why a lease of task id must not be granted in st: a
// dependency that has not completed (under RUN: not ended, unless it ended
// and was retried, which does not touch a dependent released).
func leasable(st *state.State, id string, retried map[string]bool) error {
	t := st.Task(id)
	if t == nil {
		return fmt.Errorf("a lease of task %s, which does not exist", id)
	}
	g := st.Graph(t)
	for _, e := range g.Edges {
		d := st.Task(e.ID)
		switch {
		case e.Remote && (g.Policy == state.DepDead && e.State != state.EdgeCompleted || e.State == state.EdgePending):
			return fmt.Errorf("task %s leased while its remote dependency %s is %s (%s)", id, e.ID, e.State, g.Policy)
		case e.Remote:
		case d == nil:
			return fmt.Errorf("task %s leased, its dependency %s does not exist", id, e.ID)
		case g.Policy == state.DepDead && d.State != state.Completed:
			return fmt.Errorf("task %s leased while its dependency %s is %s", id, d.ID, d.State)
		case !d.State.Terminal() && !(retried[d.ID] && e.State != state.EdgePending):
			return fmt.Errorf("task %s (RUN) leased while its dependency %s is %s", id, d.ID, d.State)
		}
	}
	return nil
}

// viewByRequest returns the task of a request id, once what it saw is
// durable (nil: none).
func (c *Coordinator) viewByRequest(namespace, requestID string) (*state.Task, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	var out *state.Task
	err := c.read(ctx, func() error {
		if t := c.st.ByRequest(namespace, requestID); t != nil {
			out = t.Clone()
		}
		return nil
	})
	return out, err
}

// spawnOf is what a commit of task id spawns: one to five children in
// random queues, and a continuation that depends on all of them (and on
// the parent), named by request ids of the spawn.
func spawnOf(id string, rng *rand.Rand) []SubmitRequest {
	n := 1 + rng.IntN(5)
	out := make([]SubmitRequest, 0, n+1)
	join := SubmitRequest{Queue: wfQueues[rng.IntN(len(wfQueues))], Payload: []byte("ok"), ExecutionWindow: wfWindow, DependsOn: []string{id}}
	for i := range n {
		rid := fmt.Sprintf("%s-child-%d", id, i)
		payload := []byte("ok")
		if rng.IntN(8) == 0 {
			payload = []byte("flaky")
		}
		out = append(out, SubmitRequest{Queue: wfQueues[rng.IntN(len(wfQueues))], RequestID: rid, Payload: payload, ExecutionWindow: wfWindow,
			Retry: state.RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}})
		join.DependsOn = append(join.DependsOn, rid)
	}
	return append(out, join)
}

// spawn has the worker of lease l commit its task with what it spawns:
// with a commit then a completion, or a completion alone, now and then
// sent twice (a network retry: the second spawns nothing).
func (s *wfSim) spawn(l Lease) error {
	spawn := spawnOf(l.TaskID, s.rng)
	s.stats["spawns"]++
	var ids []string
	var err error
	if s.rng.IntN(2) == 0 {
		if _, ids, err = s.c.CommitSpawn(ctx, l.TaskID, l.LeaseID, []byte("r-"+l.TaskID), spawn); err == nil && s.rng.IntN(4) == 0 {
			var again []string
			if _, again, err = s.c.CommitSpawn(ctx, l.TaskID, l.LeaseID, []byte("r-"+l.TaskID), spawn); err == nil && len(again) != 0 {
				return fmt.Errorf("a repeated commit of %s spawned %v", l.TaskID, again)
			}
		}
		if err == nil {
			err = s.c.Complete(ctx, l.TaskID, l.LeaseID, nil)
		}
	} else {
		ids, err = s.c.CompleteSpawn(ctx, l.TaskID, l.LeaseID, []byte("r-"+l.TaskID), spawn)
		if err == nil && s.rng.IntN(4) == 0 {
			var again []string
			if again, err = s.c.CompleteSpawn(ctx, l.TaskID, l.LeaseID, []byte("r-"+l.TaskID), spawn); err == nil && len(again) != 0 {
				return fmt.Errorf("a repeated completion of %s spawned %v", l.TaskID, again)
			}
		}
	}
	if err == nil && len(ids) != len(spawn) {
		return fmt.Errorf("a commit of %s spawning %d tasks answered %d ids", l.TaskID, len(spawn), len(ids))
	}
	return err
}

// checkRemote checks, after the drain, edge i of t, a remote one: it
// resolved as its dependency ended in its partition (the first end
// learned: an end never changes), its result kept if it completed, and t
// ended by its policy if it failed.
func (s *wfSim) checkRemote(st *state.State, t *state.Task, g state.GraphInfo, i int) []error {
	e := g.Edges[i]
	end, ok := s.ends[e.ID]
	want := state.EdgeFailed
	if end == state.EndedCompleted {
		want = state.EdgeCompleted
	}
	var errs []error
	switch {
	case e.State == state.EdgePending:
		if !t.State.Terminal() {
			errs = append(errs, fmt.Errorf("task %s is %s, its remote edge to %s pending after the drain", t.ID, t.State, e.ID))
		}
		return errs // it ended otherwise (cancelled, another edge failed)
	case !ok:
		errs = append(errs, fmt.Errorf("task %s: its remote edge to %s resolved %s, and no end was learned", t.ID, e.ID, e.State))
	case e.State != want:
		errs = append(errs, fmt.Errorf("task %s: its remote edge to %s resolved %s, the dependency ended %s", t.ID, e.ID, e.State, end))
	case want == state.EdgeCompleted && string(st.RemoteResult(t, i)) != "from "+e.ID:
		errs = append(errs, fmt.Errorf("task %s keeps %q as the result of %s", t.ID, st.RemoteResult(t, i), e.ID))
	case want == state.EdgeFailed && g.Policy == state.DepDead && (t.State != state.Dead ||
		!strings.HasPrefix(t.FailureReason, state.ReasonDependencyFailed) && !strings.HasPrefix(t.FailureReason, "workflow cancelled")):
		errs = append(errs, fmt.Errorf("task %s is %s (%q) though its remote dependency %s ended %s", t.ID, t.State, t.FailureReason, e.ID, end))
	}
	if len(errs) == 0 {
		s.stats["checked-remote-edges"]++
	}
	return errs
}
