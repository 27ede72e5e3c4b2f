package coordinator

// Deterministic simulation: one coordinator on the
// fault-injecting disk of package faultfs, a fake clock, seeded ids, and
// simulated clients and workers, all driven by one seed.
//
// Run the default 1000 seeds (150 under -race):
//
//	go test ./internal/coordinator -run 'TestSimulation$'
//
// Run many more (seeds 1..N, or from -sim.from on):
//
//	go test ./internal/coordinator -run 'TestSimulation$' -sim.seeds 100000 -timeout 2h
//	go test ./internal/coordinator -run 'TestSimulation$' -sim.from 100001 -sim.seeds 100000 -timeout 2h
//
// Replay one seed, printing its whole trace (a failure prints this command):
//
//	go test ./internal/coordinator -run 'TestSimulation$' -sim.seed 1234 -v
//
// What a run does. Clients submit tasks (some with request ids, some
// losing the answer and retrying with the same request id, some in
// batches), read and kill them. Workers lease tasks and, per task, follow a
// behaviour the seed picks: commit then complete; complete directly; pause
// past the lease (the clock jumps past its expiry) and then try; commit
// and crash; fail (retryable or permanent); send every commit and complete
// twice (a network retry); fail after committing; crash before doing
// anything; finalise a task whose earlier attempt committed. A worker may
// complete several tasks in one CompleteBatch, naming one twice. Requests that
// got no answer (the log failed) are retried after the restart or
// abandoned. Faults: the clock jumps forward and back, an fsync or a write
// fails, a write is torn, the disk is full for a while, the process is
// killed (the page cache survives), the power is lost between requests or
// in the middle of one (only fsynced data survives, or that plus a random
// prefix of the unsynced data).
//
// Checks, after every step: the state invariants after every applied
// record; no lease acts after its expiry, and none whose expiry the clock
// never reached is refused as lost (time only revokes); no task has two
// winning commits; an effect is applied only by the attempt whose commit
// won or by a finalisation carrying that commit's result (no duplicate
// effect: docs/design/state-machine.md). After
// every restart: every acknowledged operation is in the recovered state.
// At the end: replaying the disk gives the live state, and the whole
// history of client operations (invoke and return times, answers) is
// linearizable against the task model (internal/lincheck) by porcupine.
//
// Determinism: one goroutine issues the requests in an order the seed
// chooses, and the fake clock moves only when the simulation moves it, so
// a seed replays the same run; TestSimulationDeterministic runs seeds twice
// and compares a digest of the whole trace and final state. In seeds that
// run "concurrent batches" (half of them) a few lease-holder requests on
// distinct tasks run at once, so they share writes and fsyncs (group
// commit). Their answers do not depend on their order (each decision reads
// only its own task, and the clock stands still), but the LSNs they get and
// the number of disk operations do; so those seeds use segments too large
// to rotate, arm no fault whose effect depends on the grouping (a torn
// write, a power loss keeping part of the unsynced data), and the trace
// leaves LSNs out. A batch may run while a write or fsync fails; then an
// answer that needs no record of its own (a repeated commit, a read)
// depends on whether its request saw another's record appended, so those
// answers stay out of the trace, their workers give up without consulting
// the seed, and only the history (checked by porcupine) holds them; a read
// of the batch's tasks joins such a batch, since a read that reveals a
// record the failed fsync then loses is exactly what must not happen.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/lincheck"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

var defaultSimSeeds = 1000

var (
	simSeeds = flag.Int("sim.seeds", 0, "seeds TestSimulation runs (default 1000, 150 under -race, 100 under -short)")
	simFrom  = flag.Uint64("sim.from", 1, "first seed TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed, twice (checking the replay), with its trace under -v")
	simSteps = flag.Int("sim.steps", 300, "steps per seed")
)

// TestSimulation runs the deterministic simulation for many seeds.
func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		a := runSim(*simSeed, simOptions{steps: *simSteps, keepTrace: testing.Verbose()})
		for _, line := range a.trace {
			t.Log(line)
		}
		if a.failure != nil {
			t.Fatalf("seed %d: %v", *simSeed, a.failure)
		}
		if b := runSim(*simSeed, simOptions{steps: *simSteps}); b.digest != a.digest {
			t.Fatalf("seed %d is not deterministic: digests %s and %s", *simSeed, a.digest, b.digest)
		}
		t.Logf("seed %d passed: %s; digest %s", *simSeed, a.stats, a.digest)
		return
	}
	_, seeds := seedRange(0, *simSeeds, defaultSimSeeds, 100)
	total := simStats{}
	for seed := *simFrom; seed < *simFrom+uint64(seeds); seed++ {
		r := runSim(seed, simOptions{steps: *simSteps})
		if r.failure != nil {
			t.Fatalf("seed %d failed: %v\n\nreplay it with: go test ./internal/coordinator -run 'TestSimulation$' -sim.seed %d -v", seed, r.failure, seed)
		}
		total.add(r.stats)
	}
	t.Logf("%d seeds passed; totals: %s", seeds, total)
}

// TestSimulationDeterministic runs seeds twice and compares digests of the
// whole trace and final state: the same seed replays the same run.
func TestSimulationDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		a, b := runSim(seed, simOptions{steps: *simSteps}), runSim(seed, simOptions{steps: *simSteps})
		if a.failure != nil {
			t.Fatalf("seed %d: %v", seed, a.failure)
		}
		if a.digest != b.digest {
			t.Fatalf("seed %d is not deterministic: digests %s and %s", seed, a.digest, b.digest)
		}
	}
}

type simOptions struct {
	steps     int
	keepTrace bool
	// ackBeforeFsync runs the coordinator on a deliberately broken log
	// (see brokenLog); the simulation then records its checks' failures
	// as notes and runs to the end, so that the linearizability checker
	// can be asked about the history.
	ackBeforeFsync bool
}

type simResult struct {
	failure error // the first failed check, nil if the run passed
	digest  string
	trace   []string // with keepTrace
	stats   simStats
	// lin is porcupine's verdict on the history; linErr explains a
	// violation.
	lin    porcupine.CheckResult
	linErr error
	notes  []string // with ackBeforeFsync: the checks that failed
}

// simStats counts what a run did, to show what the seeds cover.
type simStats map[string]int

func (s simStats) add(o simStats) {
	for k, v := range o {
		s[k] += v
	}
}

func (s simStats) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, s[k])
	}
	return strings.Join(parts, " ")
}

// simFailure unwinds a run at its first failed check.
type simFailure struct{ msg string }

const simWALDir = "/data/wal"

// Worker behaviours: scripts of steps, chosen per leased task.
const (
	stepCommit         = "commit"
	stepCommitRetry    = "commit-retry" // the same commit again: its answer was lost
	stepComplete       = "complete"
	stepCompleteRetry  = "complete-retry"
	stepFail           = "fail"
	stepFailPermanent  = "fail-permanent"
	stepHeartbeat      = "heartbeat"
	stepSnooze         = "snooze"
	stepPause          = "pause"  // stall until the lease is past due
	stepEffect         = "effect" // apply the effect of this attempt's won commit
	stepEffectFinalise = "effect-committed"
	stepVanish         = "vanish" // the worker crashes
)

type simTask struct {
	id, payload, requestID string
	req                    SubmitRequest // to send again
	killed                 bool          // killed, or maybe (a kill got no answer)
}

type simHeld struct {
	l      Lease
	worker *simWorker
	script []string
	// expiry is the lease's expiry as the worker knows it; peak is the
	// latest clock reading since the grant or the last extension.
	expiry, peak time.Time
	won          bool   // this attempt's commit (or direct complete) was answered ok
	completed    bool   // this attempt's complete was answered ok
	last         string // kind of the previous answer, for a retry to compare
	// uncertain: a commit or complete of this lease got no answer, so the
	// next one may repeat its success whatever the clock says.
	uncertain bool
}

type simWorker struct {
	id   int // porcupine client id
	name string
	held []*simHeld
}

// simAck is an acknowledged operation and what it promises about its task.
type simAck struct {
	op, task, lease, data string
}

type sim struct {
	opts simOptions
	seed uint64
	rng  *rand.Rand
	clk  *clock.Fake
	ids  *seededRand
	disk *faultfs.FS
	log  *wal.Log
	c    *Coordinator // nil while down

	concurrent   bool
	segmentBytes int64
	fullFor      int // steps left with a full disk

	rec    lincheck.Recorder
	digest hash.Hash
	tail   []string // the last trace lines, for a failure message
	trace  []string
	stats  simStats
	notes  []string

	tasks    []*simTask
	byID     map[string]*simTask
	retries  []*simTask // submits with a request id whose answer was lost
	workers  []*simWorker
	acks     []simAck
	winners  map[string]string // task → lease whose commit won
	results  map[string]string // task → the winning commit's result
	effects  map[string]string // task → result whose effect was applied
	serial   int               // for unique payloads, request ids, reasons, worker ids
	applyMu  sync.Mutex
	applyErr error // from the per-record invariant hook
}

const (
	simClients = 3 // porcupine client ids 0..2; workers follow; 99 is the final reader
	simReader  = 99
)

func runSim(seed uint64, opts simOptions) (res simResult) {
	s := &sim{
		opts:    opts,
		seed:    seed,
		rng:     rand.New(rand.NewPCG(seed, 0x5eed)),
		clk:     clock.NewFake(epoch),
		ids:     newSeededRand(seed),
		digest:  sha256.New(),
		stats:   simStats{},
		byID:    map[string]*simTask{},
		winners: map[string]string{},
		results: map[string]string{},
		effects: map[string]string{},
	}
	s.concurrent = s.rng.IntN(2) == 0
	s.segmentBytes = 1 << 20
	if !s.concurrent {
		s.segmentBytes = []int64{512, 1024, 4096, 1 << 20}[s.rng.IntN(4)]
	}
	for i := range 2 + s.rng.IntN(4) {
		s.workers = append(s.workers, &simWorker{id: simClients + i, name: fmt.Sprintf("w%d", i)})
	}
	s.disk = faultfs.NewWithDir("/data")
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(simFailure)
			if !ok {
				panic(r)
			}
			res.failure = errors.New(f.msg)
		}
		s.shutdown()
		res.digest = hex.EncodeToString(s.digest.Sum(nil))[:16]
		res.trace, res.stats, res.notes = s.trace, s.stats, s.notes
	}()
	s.tracef("seed %d: %d workers, concurrent batches %v, segments of %d bytes", seed, len(s.workers), s.concurrent, s.segmentBytes)
	s.open()
	for step := range opts.steps {
		s.step(step)
		s.checkApply()
	}
	res.lin, res.linErr = s.finish()
	return res
}

// fail reports a failed check: it ends the run, or, on the broken log,
// is noted and the run goes on.
func (s *sim) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if s.opts.ackBeforeFsync {
		s.notes = append(s.notes, msg)
		s.tracef("CHECK FAILED: %s", msg)
		return
	}
	panic(simFailure{msg + "\n\nlast steps of the trace:\n  " + strings.Join(s.tail, "\n  ")})
}

func (s *sim) tracef(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.digest.Write([]byte(line))
	s.digest.Write([]byte{'\n'})
	if len(s.tail) == 60 {
		s.tail = s.tail[1:]
	}
	s.tail = append(s.tail, line)
	if s.opts.keepTrace {
		s.trace = append(s.trace, line)
	}
}

func (s *sim) next() int { s.serial++; return s.serial }

// open starts a log and a coordinator on the disk, as a restarted process
// would; with the disk full it may fail, and the node stays down.
func (s *sim) open() {
	sync := wal.SyncAlways
	if s.opts.ackBeforeFsync {
		sync = wal.SyncNone
	}
	l, err := wal.Open(wal.Options{Dir: simWALDir, FS: s.disk, Sync: sync, SegmentBytes: s.segmentBytes})
	if err != nil {
		s.tracef("  open wal: %v", err)
		s.stats["open-failed"]++
		if !strings.Contains(err.Error(), "space") {
			s.fail("the log does not open after a crash: %v", err)
		}
		return
	}
	var lg Log = l
	if s.opts.ackBeforeFsync {
		lg = brokenLog{l}
	}
	c, err := Open(ctx, lg, Config{Clock: s.clk, Rand: s.ids})
	if err != nil {
		l.Close()
		s.tracef("  open coordinator: %v", err)
		s.stats["open-failed"]++
		if !strings.Contains(err.Error(), "space") {
			s.fail("the coordinator does not open after a crash: %v", err)
		}
		return
	}
	if err := c.CheckInvariants(); err != nil {
		s.fail("invariants after opening: %v", err)
	}
	c.onApply = func(st *state.State) {
		if err := st.Invariants(); err != nil {
			s.applyMu.Lock()
			if s.applyErr == nil {
				s.applyErr = fmt.Errorf("invariants after lsn %d: %w", st.LastLSN(), err)
			}
			s.applyMu.Unlock()
		}
	}
	s.log, s.c = l, c
	s.tracef("  opened at lsn %d with %d tasks", c.Stats().LastLSN, c.Stats().Tasks)
	s.checkAcks("after opening")
}

func (s *sim) shutdown() {
	if s.c != nil {
		s.c.Close()
		s.log.Close()
		s.c, s.log = nil, nil
	}
}

func (s *sim) checkApply() {
	s.applyMu.Lock()
	err := s.applyErr
	s.applyMu.Unlock()
	if err != nil {
		s.fail("%v", err)
		s.applyErr = nil
	}
}

// restart ends the process and starts it again on the same disk (a crash:
// the page cache survives) or on the disk after a power loss.
func (s *sim) restart(how string) {
	var next *faultfs.FS
	switch how {
	case "crash":
	case "power":
		next = s.disk.PowerLoss()
	case "power-keep":
		next = s.disk.PowerLossKeep(s.rng)
	default:
		panic(how)
	}
	s.stats["restart-"+how]++
	s.tracef("  restart: %s", how)
	s.shutdown()
	if next != nil {
		s.disk = next
		s.disk.SetFull(s.fullFor > 0)
	}
	s.disk.ClearFaults()
	s.open()
}

// supervise restarts a coordinator that stopped serving, as the node's
// owner would, choosing how the process ended.
func (s *sim) supervise() {
	if s.c != nil && s.c.Err() == nil {
		return
	}
	switch {
	case s.c == nil:
		s.restart("crash") // retry an open that failed
	case s.rng.IntN(2) == 0:
		s.restart("crash")
	case s.rng.IntN(2) == 0 || s.concurrent || s.opts.ackBeforeFsync:
		s.restart("power")
	default:
		s.restart("power-keep")
	}
}

func (s *sim) now() time.Time { return s.clk.Now() }

// setClock moves the clock and the workers' view of the latest time.
func (s *sim) setClock(t time.Time, why string) {
	s.clk.Set(t)
	s.tracef("clock %s: %s", why, t.Sub(epoch))
	for _, w := range s.workers {
		for _, h := range w.held {
			if t.After(h.peak) {
				h.peak = t
			}
		}
	}
}

func (s *sim) step(n int) {
	if s.fullFor > 0 {
		if s.fullFor--; s.fullFor == 0 {
			s.disk.SetFull(false)
			s.tracef("%d: the disk has space again", n)
		}
	}
	s.supervise()
	if s.c == nil {
		// Down: clients get no connection; time passes.
		s.setClock(s.now().Add(time.Duration(s.rng.IntN(2000))*time.Millisecond), "while down")
		return
	}
	s.tracef("%d:", n)
	switch r := s.rng.IntN(1000); {
	case r < 130:
		s.submit()
	case r < 160 && len(s.retries) > 0:
		s.retrySubmit()
	case r < 190:
		s.submitBatch()
	case r < 360:
		s.lease(s.workers[s.rng.IntN(len(s.workers))])
	case r < 640:
		s.actOnce()
	case r < 660:
		s.completeBatch()
	case r < 700 && s.concurrent:
		s.concurrentBatch(s.fullFor > 0)
	case r < 750:
		s.get()
	case r < 765:
		s.kill()
	case r < 840:
		s.setClock(s.now().Add(time.Duration(s.rng.IntN(2000))*time.Millisecond), "forward")
	case r < 860:
		s.setClock(s.now().Add(time.Duration(5+s.rng.IntN(30))*time.Second), "jump forward")
	case r < 880:
		s.setClock(s.now().Add(-time.Duration(s.rng.IntN(3000))*time.Millisecond), "jump back")
	case r < 885:
		s.setClock(s.now().Add(-time.Duration(30+s.rng.IntN(90))*time.Second), "big jump back")
	case r < 920:
		n, err := s.c.ExpireDue(ctx)
		s.tracef("expire due: %d %s", n, s.kind(err))
		s.expect("expire", err)
	default:
		s.fault()
	}
}

// fault injects one storage fault.
func (s *sim) fault() {
	switch r := s.rng.IntN(100); {
	case r < 18:
		s.tracef("fault: the next fsync fails")
		s.stats["fault-fsync"]++
		s.disk.FailNext(faultfs.OpSync, nil)
		s.oneRequest()
	case r < 30:
		s.tracef("fault: the next write fails")
		s.stats["fault-write"]++
		s.disk.FailNext(faultfs.OpWrite, nil)
		s.oneRequest()
	case r < 38 && !s.concurrent:
		k := 1 + s.rng.IntN(2)
		s.tracef("fault: operation %d from now is a torn write", k)
		s.stats["fault-torn"]++
		s.disk.TearAt(s.disk.Ops()+k, s.rng.IntN(40))
		s.oneRequest()
	case r < 48 && s.concurrent:
		// A fault under a group commit: none of the batch may be
		// acknowledged. Write failures leave nothing; after an fsync
		// failure only a power loss makes the outcome independent of how
		// the requests were grouped.
		sync := s.rng.IntN(2) == 0
		s.tracef("fault: the next %s fails, under a concurrent batch", map[bool]string{true: "fsync", false: "write"}[sync])
		s.stats["fault-batch"]++
		if sync {
			s.disk.FailNext(faultfs.OpSync, nil)
		} else {
			s.disk.FailNext(faultfs.OpWrite, nil)
		}
		s.concurrentBatch(true)
		s.disk.ClearFaults()
		if s.c.Err() != nil {
			if sync {
				s.restart("power")
			} else {
				s.restart("crash")
			}
		}
		return
	case r < 58:
		s.fullFor = 3 + s.rng.IntN(12)
		s.tracef("fault: the disk is full for %d steps", s.fullFor)
		s.stats["fault-full"]++
		s.disk.SetFull(true)
		return
	case r < 72:
		s.tracef("fault: kill -9")
		s.restart("crash")
		return
	case r < 88:
		s.tracef("fault: power loss between requests")
		if s.concurrent || s.opts.ackBeforeFsync || s.rng.IntN(2) == 0 {
			s.restart("power")
		} else {
			s.restart("power-keep")
		}
		return
	default:
		k := 1 + s.rng.IntN(4)
		s.tracef("fault: power cut after %d more disk operations", k)
		s.stats["fault-power-cut"]++
		s.disk.CutPowerAfter(s.disk.Ops() + k)
		for i := 0; !s.disk.PowerCut() && s.c.Err() == nil; i++ {
			if i < 10 {
				s.oneRequest()
			} else {
				s.submit() // always writes
			}
		}
		if s.concurrent || s.opts.ackBeforeFsync || s.rng.IntN(2) == 0 {
			s.restart("power")
		} else {
			s.restart("power-keep")
		}
		return
	}
	s.disk.ClearFaults()
}

// oneRequest makes one sequential request of a random kind.
func (s *sim) oneRequest() {
	if s.c == nil {
		return
	}
	switch r := s.rng.IntN(5); r {
	case 0:
		s.submit()
	case 1:
		s.lease(s.workers[s.rng.IntN(len(s.workers))])
	case 2:
		if !s.actOnce() {
			s.submitBatch()
		}
	case 3:
		s.submitBatch()
	default:
		s.get()
	}
}

// kind names an error for the trace: its kind, not its message (a message
// may name an LSN, which concurrent batches make vary).
func (s *sim) kind(err error) string {
	if k, ok := errKind(err); ok {
		if k == "" {
			return "ok"
		}
		return k
	}
	if errors.Is(err, ErrUnavailable) {
		return "unavailable"
	}
	return "error: " + err.Error()
}

// expect fails the run on an error a request of op can never get here.
func (s *sim) expect(op string, err error, allowed ...string) {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return
	}
	k, _ := errKind(err)
	if k != "" && slices.Contains(allowed, k) {
		return
	}
	s.fail("%s: unexpected error %v", op, err)
}

// outcome is the output of an answered request, or a pending one.
func outcome(err error) lincheck.Out {
	k, ok := errKind(err)
	return lincheck.Out{Err: k, Pending: !ok}
}

func (s *sim) submitRequest() (SubmitRequest, *simTask) {
	n := s.next()
	req := SubmitRequest{
		Queue:           []string{"a", "b"}[s.rng.IntN(2)],
		Payload:         fmt.Appendf(nil, "p%d", n),
		ExecutionWindow: time.Duration(1+s.rng.IntN(10)) * time.Second,
		Retry: state.RetryPolicy{MaxAttempts: uint32(1 + s.rng.IntN(4)),
			InitialBackoff: time.Duration(s.rng.IntN(2000)) * time.Millisecond, MaxBackoff: 3 * time.Second},
		Priority: int32(s.rng.IntN(3) - 1),
	}
	if s.rng.IntN(2) == 0 {
		req.RequestID = fmt.Sprintf("rq%d", n)
	}
	if s.rng.IntN(8) == 0 {
		req.NotBefore = s.now().Add(time.Duration(s.rng.IntN(3000)) * time.Millisecond)
	}
	return req, &simTask{payload: string(req.Payload), requestID: req.RequestID, req: req}
}

func submitInput(req SubmitRequest) lincheck.In {
	return lincheck.In{Op: lincheck.OpSubmit, RequestID: req.RequestID, Payload: string(req.Payload), MaxAttempts: req.Retry.MaxAttempts}
}

// acked notes an acknowledged submit (a first one or a duplicate).
func (s *sim) acked(st *simTask, res SubmitResult) {
	if string(res.Task.Payload) != st.payload || res.Task.RequestID != st.requestID {
		s.fail("submit answered task %s with payload %q and request id %q, want %q and %q",
			res.Task.ID, res.Task.Payload, res.Task.RequestID, st.payload, st.requestID)
	}
	if st.id != "" && st.id != res.Task.ID {
		s.fail("request id %s answered task %s, then task %s", st.requestID, st.id, res.Task.ID)
	}
	st.id = res.Task.ID
	if s.byID[st.id] == nil {
		s.byID[st.id] = st
		s.tasks = append(s.tasks, st)
	}
	s.acks = append(s.acks, simAck{op: "submit", task: st.id, data: st.payload})
}

func (s *sim) submit() {
	req, st := s.submitRequest()
	call := s.rec.Call()
	res, err := s.c.Submit(ctx, req)
	in, out := submitInput(req), outcome(err)
	s.expect("submit", err)
	// The answer may be lost on its way back: a client with a request id
	// retries with it; one without gives up (the task runs anyway).
	lost := s.rng.IntN(6) == 0
	if err == nil {
		in.Task, out.Duplicate = res.Task.ID, res.Duplicate
		if res.Duplicate {
			s.fail("a new request id %q was answered as a duplicate", req.RequestID)
		}
		s.acked(st, res)
	}
	s.rec.Done(s.rng.IntN(simClients), in, call, out)
	s.tracef("submit %s rid=%q -> %s %s lost=%v", st.payload, st.requestID, in.Task, s.kind(err), lost)
	if (lost || err != nil) && req.RequestID != "" {
		s.retries = append(s.retries, st)
	}
}

// retrySubmit sends a submit again with its request id: it must find the
// task if the first was acknowledged.
func (s *sim) retrySubmit() {
	i := s.rng.IntN(len(s.retries))
	st := s.retries[i]
	s.retries = slices.Delete(s.retries, i, i+1)
	req := st.req // the same request again
	call := s.rec.Call()
	res, err := s.c.Submit(ctx, req)
	in, out := submitInput(req), outcome(err)
	s.expect("submit retry", err)
	if err == nil {
		in.Task, out.Duplicate = res.Task.ID, res.Duplicate
		if st.id != "" && !res.Duplicate {
			s.fail("retry of acknowledged request id %s created task %s", st.requestID, res.Task.ID)
		}
		s.acked(st, res)
	} else {
		s.retries = append(s.retries, st)
	}
	s.rec.Done(s.rng.IntN(simClients), in, call, out)
	s.tracef("submit retry rid=%q -> %s dup=%v %s", st.requestID, in.Task, out.Duplicate, s.kind(err))
}

func (s *sim) submitBatch() {
	n := 2 + s.rng.IntN(3)
	reqs := make([]SubmitRequest, n)
	sts := make([]*simTask, n)
	for i := range reqs {
		reqs[i], sts[i] = s.submitRequest()
	}
	if s.rng.IntN(5) == 0 && reqs[0].RequestID != "" {
		// The same request twice in one batch: one task.
		reqs[n-1], sts[n-1] = reqs[0], sts[0]
	}
	call := s.rec.Call()
	res, err := s.c.SubmitBatch(ctx, reqs)
	s.expect("submit batch", err)
	client := s.rng.IntN(simClients)
	ret := s.rec.Call()
	for i, req := range reqs {
		in, out := submitInput(req), outcome(err)
		if err == nil {
			in.Task, out.Duplicate = res[i].Task.ID, res[i].Duplicate
			s.acked(sts[i], res[i])
		} else if req.RequestID != "" && (i == 0 || sts[i] != sts[0]) {
			s.retries = append(s.retries, sts[i])
		}
		s.rec.Add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		s.tracef("submit batch[%d] %s rid=%q -> %s dup=%v %s", i, req.Payload, req.RequestID, in.Task, out.Duplicate, s.kind(err))
	}
}

func (s *sim) get() {
	if len(s.tasks) == 0 {
		return
	}
	st := s.tasks[s.rng.IntN(len(s.tasks))]
	call := s.rec.Call()
	t, err := s.c.Get(ctx, st.id)
	in, out := lincheck.In{Op: lincheck.OpGet, Task: st.id}, outcome(err)
	s.expect("get", err)
	if err == nil {
		out = getOutput(t)
		if string(t.Payload) != st.payload {
			s.fail("get %s: payload %q, want %q", st.id, t.Payload, st.payload)
		}
	}
	s.rec.Done(s.rng.IntN(simClients), in, call, out)
	s.tracef("get %s -> %s %s attempt %d %s", st.id, out.State, out.CurLease, out.Attempt, s.kind(err))
}

func (s *sim) kill() {
	if len(s.tasks) == 0 {
		return
	}
	st := s.tasks[s.rng.IntN(len(s.tasks))]
	reason := fmt.Sprintf("kill-%d", s.next())
	call := s.rec.Call()
	err := s.c.Kill(ctx, st.id, Actor{Reason: reason})
	in, out := lincheck.In{Op: lincheck.OpKill, Task: st.id, Reason: reason}, outcome(err)
	s.expect("kill", err, lincheck.WrongState)
	if err == nil || out.Pending {
		st.killed = true
	}
	if err == nil {
		s.acks = append(s.acks, simAck{op: "kill", task: st.id})
	}
	s.rec.Done(s.rng.IntN(simClients), in, call, out)
	s.tracef("kill %s -> %s", st.id, s.kind(err))
}

// lease asks for tasks for w and gives each a behaviour.
func (s *sim) lease(w *simWorker) {
	if len(w.held) >= 4 {
		return
	}
	// One worker id per call, so that the grants of a call that got no
	// answer can be found in the final state.
	req := LeaseRequest{WorkerID: fmt.Sprintf("%s.%d", w.name, s.next()), Queue: []string{"a", "b"}[s.rng.IntN(2)], MaxTasks: 1 + s.rng.IntN(3)}
	call := s.rec.Call()
	now := s.now()
	ls, err := s.c.Lease(ctx, req)
	s.expect("lease", err)
	if err != nil {
		s.rec.Done(w.id, lincheck.In{Op: lincheck.OpLease, Worker: req.WorkerID}, call, outcome(err))
		s.tracef("lease %s %s -> %s", req.WorkerID, req.Queue, s.kind(err))
		return
	}
	ret := s.rec.Call()
	for _, l := range ls {
		s.rec.Add(porcupine.Operation{ClientId: w.id, Call: call, Return: ret,
			Input:  lincheck.In{Op: lincheck.OpLease, Task: l.TaskID, Worker: req.WorkerID},
			Output: lincheck.Out{LeaseID: l.LeaseID, Attempt: l.Attempt, Committed: l.Committed, CommittedResult: string(l.CommittedResult)}})
		s.acks = append(s.acks, simAck{op: "lease", task: l.TaskID, lease: l.LeaseID})
		if l.Queue != req.Queue || l.WorkerID != req.WorkerID || !l.LeaseExpiry.Equal(now.Add(l.Window)) {
			s.fail("lease of %s: queue %s worker %s expiry %v, want %s %s %v", l.TaskID, l.Queue, l.WorkerID, l.LeaseExpiry, req.Queue, req.WorkerID, now.Add(l.Window))
		}
		h := &simHeld{l: l, worker: w, expiry: l.LeaseExpiry, peak: now, script: s.behaviour(l)}
		if l.Committed {
			if r, ok := s.results[l.TaskID]; ok && r != string(l.CommittedResult) {
				s.fail("finalisation lease of %s carries result %q, but the winning commit was %q", l.TaskID, l.CommittedResult, r)
			}
		}
		w.held = append(w.held, h)
		s.tracef("lease %s %s -> %s lease %s attempt %d committed=%v: %v", req.WorkerID, req.Queue, l.TaskID, l.LeaseID, l.Attempt, l.Committed, h.script)
	}
	if len(ls) == 0 {
		s.tracef("lease %s %s -> none", req.WorkerID, req.Queue)
	}
}

// behaviour picks the script a worker follows for one leased task.
func (s *sim) behaviour(l Lease) []string {
	if l.Committed {
		s.stats["finalise"]++
		if s.rng.IntN(4) == 0 {
			return []string{stepEffectFinalise, stepComplete, stepCompleteRetry}
		}
		return []string{stepEffectFinalise, stepComplete}
	}
	scripts := [][]string{
		{stepCommit, stepEffect, stepComplete},                // normal
		{stepHeartbeat, stepCommit, stepEffect, stepComplete}, // normal, with a heartbeat
		{stepComplete, stepEffect},                            // commit and done in one
		{stepPause, stepCommit, stepEffect, stepComplete},     // stalls past its lease
		{stepPause, stepComplete, stepEffect},                 // stalls, then completes
		{stepCommit, stepEffect, stepVanish},                  // crashes after commit and effect
		{stepCommit, stepVanish},                              // crashes right after commit
		{stepFail},                                            // retryable failure
		{stepFailPermanent},                                   // permanent failure
		{stepCommit, stepCommitRetry, stepEffect, stepComplete, stepCompleteRetry}, // network retries
		{stepCommit, stepFail, stepComplete},                                       // fails after committing (refused)
		{stepVanish},                                                               // crashes before anything
		{stepHeartbeat, stepSnooze},                                                // snoozes: runs again, same attempt
		{stepCommit, stepSnooze, stepEffect, stepComplete},                         // snoozes after committing (refused)
	}
	i := s.rng.IntN(len(scripts))
	s.stats[fmt.Sprintf("script-%02d", i)]++
	return scripts[i]
}

// actOnce runs the next step of a random held task; false if none is held.
func (s *sim) actOnce() bool {
	var all []*simHeld
	for _, w := range s.workers {
		all = append(all, w.held...)
	}
	if len(all) == 0 {
		return false
	}
	h := all[s.rng.IntN(len(all))]
	switch h.script[0] {
	case stepPause:
		h.script = h.script[1:]
		if s.now().Before(h.expiry) {
			s.setClock(h.expiry.Add(time.Duration(s.rng.IntN(3000))*time.Millisecond), fmt.Sprintf("worker %s pauses past lease %s", h.worker.name, h.l.LeaseID))
		}
		s.stats["pause"]++
	case stepEffect:
		h.script = h.script[1:]
		if h.won {
			s.effect(h, s.results[h.l.TaskID])
		}
	case stepEffectFinalise:
		h.script = h.script[1:]
		s.effect(h, string(h.l.CommittedResult))
	case stepVanish:
		s.tracef("worker %s vanishes with lease %s of %s", h.worker.name, h.l.LeaseID, h.l.TaskID)
		s.drop(h)
	default:
		a := s.action(h)
		a.call = s.rec.Call()
		a.run(s.c)
		s.settle(a)
	}
	if len(h.script) == 0 {
		s.drop(h)
	}
	return true
}

func (s *sim) drop(h *simHeld) {
	h.worker.held = slices.DeleteFunc(h.worker.held, func(x *simHeld) bool { return x == h })
	h.script = nil
}

// effect applies a task's external effect, keyed by the task id: a
// duplicate execution (docs/design/state-machine.md) is
// two different results applied for one task.
func (s *sim) effect(h *simHeld, result string) {
	id := h.l.TaskID
	if r, ok := s.results[id]; ok && r != result {
		s.fail("duplicate effect: worker %s applies result %q for task %s, but the winning commit was %q", h.worker.name, result, id, r)
	}
	if prev, ok := s.effects[id]; ok && prev != result {
		s.fail("duplicate effect: task %s had effect %q applied, now %q by lease %s", id, prev, result, h.l.LeaseID)
	}
	s.effects[id] = result
	s.stats["effects"]++
	s.tracef("effect of %s: %q by %s", id, result, h.l.LeaseID)
}

// simAction is one lease-holder request: prepared, run (possibly in a
// goroutine, alongside others), then settled in a fixed order.
type simAction struct {
	h                *simHeld
	step             string
	in               lincheck.In
	call             int64
	now              time.Time
	err              error
	tok              FencingToken
	fr               FailResult
	expiry           time.Time
	delay            time.Duration // of a snooze
	notBefore        time.Time     // a snooze's answer
	retryOf          bool          // a retry of the previous request: its answer must repeat
	prevWon, prevFin bool
	// faulted: run in a concurrent batch while a write or fsync fails, so
	// whether an answer that needs no record came back depends on the
	// grouping (it waits for whatever its request saw appended).
	faulted bool
}

func (s *sim) action(h *simHeld) *simAction {
	step := h.script[0]
	h.script = h.script[1:]
	a := &simAction{h: h, step: step, now: s.now(), prevWon: h.won, prevFin: h.completed}
	l := h.l
	switch step {
	case stepCommit, stepCommitRetry:
		a.in = lincheck.In{Op: lincheck.OpCommit, Task: l.TaskID, Lease: l.LeaseID, Result: "r:" + l.LeaseID}
	case stepComplete, stepCompleteRetry:
		// After a commit the result is ignored: send another to see that.
		res := "r:" + l.LeaseID
		if h.won || l.Committed {
			res = "x:" + l.LeaseID
		}
		a.in = lincheck.In{Op: lincheck.OpComplete, Task: l.TaskID, Lease: l.LeaseID, Result: res}
	case stepFail, stepFailPermanent:
		a.in = lincheck.In{Op: lincheck.OpFail, Task: l.TaskID, Lease: l.LeaseID, Permanent: step == stepFailPermanent, Reason: fmt.Sprintf("failed-%d", s.next())}
	case stepHeartbeat:
		a.in = lincheck.In{Op: lincheck.OpHeartbeat, Task: l.TaskID, Lease: l.LeaseID}
	case stepSnooze:
		a.in = lincheck.In{Op: lincheck.OpSnooze, Task: l.TaskID, Lease: l.LeaseID, Reason: fmt.Sprintf("snoozed-%d", s.next())}
		a.delay = time.Duration(s.rng.IntN(3000)) * time.Millisecond
	default:
		panic("sim: no request for step " + step)
	}
	a.retryOf = step == stepCommitRetry || step == stepCompleteRetry
	return a
}

// run sends the request; it touches nothing but the coordinator.
func (a *simAction) run(c *Coordinator) {
	in := a.in
	switch in.Op {
	case lincheck.OpCommit:
		a.tok, a.err = c.Commit(ctx, in.Task, in.Lease, []byte(in.Result))
	case lincheck.OpComplete:
		a.err = c.Complete(ctx, in.Task, in.Lease, []byte(in.Result))
	case lincheck.OpFail:
		a.fr, a.err = c.Fail(ctx, in.Task, in.Lease, in.Reason, in.Permanent)
	case lincheck.OpHeartbeat:
		a.expiry, a.err = c.Heartbeat(ctx, in.Task, in.Lease)
	case lincheck.OpSnooze:
		a.notBefore, a.err = c.Snooze(ctx, in.Task, in.Lease, a.delay, in.Reason)
	}
}

// settle records a request's answer, checks it, and moves its worker on.
func (s *sim) settle(a *simAction) {
	h, in := a.h, a.in
	out := outcome(a.err)
	k := s.kind(a.err)
	s.stats[in.Op+"-"+k]++
	s.expect(a.step, a.err, lincheck.LeaseLost, lincheck.AlreadyCommitted, lincheck.WrongState)
	if a.faulted {
		// Keep the answer out of the trace and the worker's choices, which
		// must not depend on the grouping: the worker gives up.
		s.tracef("%s %s %s by %s lease %s -> (under a fault)", h.worker.name, a.step, in.Task, h.l.WorkerID, in.Lease)
		if out.Err == "" && !out.Pending {
			s.checkAuthority(a, out.Err)
		}
		s.rec.Done(h.worker.id, in, a.call, out)
		s.drop(h)
		return
	}
	s.tracef("%s %s %s by %s lease %s -> %s", h.worker.name, a.step, in.Task, h.l.WorkerID, in.Lease, k)
	switch {
	case out.Pending:
	case h.uncertain:
	case a.retryOf:
		if k != h.last {
			s.fail("%s of %s by lease %s answered %s, the first answer was %s", a.step, in.Task, in.Lease, k, h.last)
		}
	default:
		s.checkAuthority(a, out.Err)
	}
	h.last = k
	if out.Pending {
		s.rec.Done(h.worker.id, in, a.call, out)
		// No answer: the worker may retry after the restart, or give up;
		// it applies no effect without an answer.
		if (in.Op == lincheck.OpCommit || in.Op == lincheck.OpComplete) && s.rng.IntN(2) == 0 {
			h.script = append([]string{a.step}, h.script...)
			h.last, h.uncertain = "", true
			if a.step == stepCommitRetry || a.step == stepCompleteRetry {
				h.script[0] = strings.TrimSuffix(a.step, "-retry")
			}
		} else {
			s.drop(h)
		}
		return
	}
	switch in.Op {
	case lincheck.OpCommit:
		if out.Err == "" {
			out.Attempt = a.tok.Attempt
			if a.tok.TaskID != in.Task || a.tok.Attempt != h.l.Attempt {
				s.fail("commit of %s by lease %s answered fencing token %+v, want attempt %d", in.Task, in.Lease, a.tok, h.l.Attempt)
			}
			s.win(h, in.Result)
			s.acks = append(s.acks, simAck{op: "commit", task: in.Task, lease: in.Lease, data: in.Result})
		}
	case lincheck.OpComplete:
		if out.Err == "" {
			if !h.won && !h.l.Committed {
				s.win(h, in.Result) // commit and done in one
			}
			h.completed = true
			result := s.results[in.Task]
			if h.l.Committed {
				result = string(h.l.CommittedResult)
			}
			s.acks = append(s.acks, simAck{op: "complete", task: in.Task, lease: in.Lease, data: result})
		}
	case lincheck.OpFail:
		if out.Err == "" {
			out.Retry = a.fr.State == state.Waiting
			s.acks = append(s.acks, simAck{op: "fail", task: in.Task, lease: in.Lease})
		}
	case lincheck.OpSnooze:
		if out.Err == "" {
			if want := a.now.Add(a.delay); !a.notBefore.Equal(want) {
				s.fail("snooze of lease %s answered not before %v, want %v", in.Lease, a.notBefore.Sub(epoch), want.Sub(epoch))
			}
			s.acks = append(s.acks, simAck{op: "snooze", task: in.Task, lease: in.Lease, data: in.Reason})
		}
	case lincheck.OpHeartbeat:
		if out.Err == "" {
			want := a.now.Add(h.l.Window)
			if want.Before(h.expiry) {
				want = h.expiry // the clock went back: the lease keeps its expiry
			}
			if !a.expiry.Equal(want) {
				s.fail("heartbeat of lease %s answered expiry %v, want %v", in.Lease, a.expiry, want)
			}
			h.expiry, h.peak = a.expiry, a.now
		}
	}
	s.rec.Done(h.worker.id, in, a.call, out)
	// A refused worker stops and applies nothing; so does one that failed
	// or snoozed. One told its task is committed carries on.
	ends := in.Op == lincheck.OpFail || in.Op == lincheck.OpSnooze
	if out.Err != "" && !(ends && out.Err == lincheck.WrongState) || ends && out.Err == "" {
		s.drop(h)
	}
}

// win notes that a lease's commit was answered ok.
func (s *sim) win(h *simHeld, result string) {
	id := h.l.TaskID
	if prev, ok := s.winners[id]; ok && prev != h.l.LeaseID {
		s.fail("task %s has two winning commits: leases %s and %s", id, prev, h.l.LeaseID)
	}
	s.winners[id], s.results[id] = h.l.LeaseID, result
	h.won = true
}

// checkAuthority checks a lease-holder answer against the clock: time only
// revokes. A lease at or past its expiry never acts (except to repeat an
// answer it already got), and one whose expiry the clock never reached, on
// a task nobody killed, is never refused.
func (s *sim) checkAuthority(a *simAction, got string) {
	h, op := a.h, a.in.Op
	repeat := op == lincheck.OpCommit && a.prevWon || op == lincheck.OpComplete && a.prevFin
	switch {
	case repeat:
		if got != "" {
			s.fail("%s by lease %s, which already succeeded, answered %s", op, a.in.Lease, got)
		}
	case h.uncertain:
	case !a.now.Before(h.expiry):
		if got == "" {
			s.fail("%s by lease %s of task %s succeeded at %v, at or past its expiry %v", op, a.in.Lease, a.in.Task, a.now.Sub(epoch), h.expiry.Sub(epoch))
		}
	case h.peak.Before(h.expiry) && !s.byIDKilled(a.in.Task):
		want := ""
		switch {
		case op == lincheck.OpCommit && h.l.Committed:
			want = lincheck.AlreadyCommitted // a finalisation lease does not commit
		case (op == lincheck.OpFail || op == lincheck.OpSnooze) && (h.l.Committed || h.won):
			want = lincheck.WrongState // a committed task cannot fail or snooze
		}
		if got != want {
			s.fail("%s by lease %s of task %s at %v, before its expiry %v (never reached): answered %q, want %q",
				op, a.in.Lease, a.in.Task, a.now.Sub(epoch), h.expiry.Sub(epoch), got, want)
		}
	}
}

func (s *sim) byIDKilled(id string) bool {
	st := s.byID[id]
	return st != nil && st.killed
}

// concurrentBatch runs the next request of up to four held tasks (distinct
// tasks, distinct workers) at once; faulted says a write or fsync will fail
// under it.
func (s *sim) concurrentBatch(faulted bool) {
	var batch []*simAction
	seen := map[string]bool{}
	for _, w := range s.workers {
		for _, h := range w.held {
			switch h.script[0] {
			case stepCommit, stepComplete, stepFail, stepFailPermanent, stepHeartbeat, stepSnooze:
			default:
				continue
			}
			if seen[h.l.TaskID] || len(batch) == 4 {
				continue
			}
			seen[h.l.TaskID] = true
			batch = append(batch, s.action(h))
			break
		}
	}
	if len(batch) < 2 {
		for _, a := range batch {
			a.h.script = append([]string{a.step}, a.h.script...)
		}
		return
	}
	s.stats["concurrent-batches"]++
	s.tracef("concurrent batch of %d", len(batch))
	// Under a fault, a client also reads the first two tasks of the batch
	// while they are written: a read must not reveal a record that the
	// failing fsync leaves undurable. (Without a fault the read's answer
	// would depend on the order, so it is left out.)
	var reads []string
	if faulted {
		reads = []string{batch[0].in.Task, batch[1].in.Task}
	}
	got := make([]*state.Task, len(reads))
	errs := make([]error, len(reads))
	call := s.rec.Call()
	var wg sync.WaitGroup
	for _, a := range batch {
		a.call, a.faulted = call, faulted
		wg.Go(func() { a.run(s.c) })
	}
	for i, id := range reads {
		wg.Go(func() { got[i], errs[i] = s.c.Get(ctx, id) })
	}
	wg.Wait()
	for _, a := range batch {
		s.settle(a)
		if len(a.h.script) == 0 {
			s.drop(a.h)
		}
	}
	for i, id := range reads {
		out := outcome(errs[i])
		s.expect("get", errs[i])
		if errs[i] == nil {
			out = getOutput(got[i])
		}
		s.rec.Done(simClients-1, lincheck.In{Op: lincheck.OpGet, Task: id}, call, out)
	}
}

// completeBatch has a worker complete every held task whose next step is a
// completion in one CompleteBatch call, sometimes naming the first twice
// (a retry inside the batch, which must get the same answer).
func (s *sim) completeBatch() {
	w := s.workers[s.rng.IntN(len(s.workers))]
	var batch []*simAction
	for _, h := range w.held {
		if h.script[0] == stepComplete && len(batch) < 4 {
			batch = append(batch, s.action(h))
		}
	}
	if len(batch) == 0 {
		return
	}
	items := make([]CompleteItem, len(batch))
	for i, a := range batch {
		items[i] = CompleteItem{TaskID: a.in.Task, LeaseID: a.in.Lease, Result: []byte(a.in.Result)}
	}
	twice := s.rng.IntN(4) == 0
	if twice {
		items = append(items, items[0])
	}
	s.stats["complete-batches"]++
	s.tracef("%s completes %d tasks in one batch (first twice: %v)", w.name, len(batch), twice)
	call := s.rec.Call()
	errs, err := s.c.CompleteBatch(ctx, items)
	for i, a := range batch {
		a.call, a.err = call, err
		if err == nil {
			a.err = errs[i]
		}
		s.settle(a)
		if len(a.h.script) == 0 {
			s.drop(a.h)
		}
	}
	if twice {
		a := batch[0]
		again := *a
		again.err = err
		if err == nil {
			again.err = errs[len(errs)-1]
		}
		k0, k1 := s.kind(a.err), s.kind(again.err)
		if k0 != k1 {
			s.fail("CompleteBatch answered %s and %s to the same completion of %s by lease %s", k0, k1, a.in.Task, a.in.Lease)
		}
		s.rec.Done(w.id, again.in, call, outcome(again.err))
	}
}

// checkAcks checks that every acknowledged operation is in the state.
func (s *sim) checkAcks(when string) {
	if s.c == nil {
		return
	}
	ex := s.c.Export()
	tasks := map[string]*state.Task{}
	for _, t := range ex.Tasks {
		tasks[t.ID] = t
	}
	for i, a := range s.acks {
		t := tasks[a.task]
		if t == nil {
			s.fail("%s: acknowledged %s of task %s (ack %d) is lost: no such task", when, a.op, a.task, i)
			continue
		}
		exec := t.ExecutionOf(a.lease)
		bad := ""
		switch a.op {
		case "submit":
			if string(t.Payload) != a.data {
				bad = fmt.Sprintf("payload %q, want %q", t.Payload, a.data)
			}
		case "lease":
			if exec == nil {
				bad = "no execution under the lease"
			}
		case "commit":
			if t.CommittedBy != a.lease || string(t.Result) != a.data {
				bad = fmt.Sprintf("committed by %q with %q", t.CommittedBy, t.Result)
			}
		case "complete":
			if t.State != state.Completed || exec == nil || exec.Status != state.ExecDone || string(t.Result) != a.data {
				bad = fmt.Sprintf("task %s with %q", t.State, t.Result)
			}
		case "fail":
			if exec == nil || exec.Status != state.ExecAborted {
				bad = "execution not aborted"
			}
		case "snooze":
			if exec == nil || exec.Status != state.ExecSnoozed || exec.Reason != a.data {
				bad = "execution not snoozed"
			}
		case "kill":
			if t.State != state.Dead {
				bad = "task " + t.State.String()
			}
		}
		if bad != "" {
			s.fail("%s: acknowledged %s of task %s by lease %s (ack %d) is lost: %s", when, a.op, a.task, a.lease, i, bad)
		}
	}
}

// finish ends the run: the disk recovers, every task is read once more,
// the disk's replay must equal the live state, and the history must be
// linearizable.
func (s *sim) finish() (porcupine.CheckResult, error) {
	s.fullFor = 0
	s.disk.SetFull(false)
	s.disk.ClearFaults()
	for range 3 {
		if s.c != nil && s.c.Err() == nil {
			break
		}
		s.restart("crash")
	}
	if s.c == nil {
		s.fail("the coordinator does not open at the end")
		return porcupine.Unknown, errors.New("no coordinator")
	}
	s.checkAcks("at the end")
	live := s.c.Export()
	// Read every task once more: those the state holds, and those whose
	// submit was acknowledged (in case the state lost one).
	ids := map[string]bool{}
	var all []string
	for _, t := range live.Tasks {
		ids[t.ID] = true
		all = append(all, t.ID)
	}
	for _, st := range s.tasks {
		if !ids[st.id] {
			all = append(all, st.id)
		}
	}
	for _, id := range all {
		call := s.rec.Call()
		got, err := s.c.Get(ctx, id)
		out := outcome(err)
		if err == nil {
			out = getOutput(got)
		}
		s.rec.Done(simReader, lincheck.In{Op: lincheck.OpGet, Task: id}, call, out)
		s.tracef("final %s: %s attempt %d lease %s committed by %s result %q %s", id, out.State, out.Attempt, out.CurLease, out.CommittedBy, out.Result, s.kind(err))
	}
	s.tracef("final: %d tasks, lsn %d", len(live.Tasks), live.LastLSN)
	s.shutdown()
	if !s.opts.ackBeforeFsync {
		for _, d := range []*faultfs.FS{s.disk, s.disk.PowerLoss()} {
			if disk := s.replay(d); !reflect.DeepEqual(live, disk) {
				s.fail("the live state differs from the replay of the disk at the end")
			}
		}
	}
	ops := append(s.rec.Ops(), resolvePending(s.rec.Pending(), live.Tasks)...)
	s.stats["history-ops"] += len(ops)
	res, err := checkHistory(ops, time.Minute, !s.opts.ackBeforeFsync)
	if res != porcupine.Ok {
		s.fail("%v", err)
	}
	return res, err
}

func (s *sim) replay(d *faultfs.FS) state.Export {
	l, err := wal.Open(wal.Options{Dir: simWALDir, FS: d, Sync: wal.SyncAlways, SegmentBytes: s.segmentBytes})
	if err != nil {
		s.fail("reopen the log at the end: %v", err)
		return state.Export{}
	}
	defer l.Close()
	st := state.New()
	if err := Replay(l, st, 1); err != nil {
		s.fail("replay at the end: %v", err)
	}
	return st.Export()
}

// brokenLog is a deliberately broken Log for the checker's own test: Wait
// reports every record durable at once, before it is written or fsynced
// (the bug "acknowledge before fsync"). It wraps a log opened with
// SyncNone, which never fsyncs a segment it is still writing, so a power
// loss deterministically takes every record since the log was opened.
type brokenLog struct{ *wal.Log }

func (brokenLog) Wait(ctx context.Context, lsn uint64) error { return nil }
