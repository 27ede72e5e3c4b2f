package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// seededRand is a deterministic id source.
type seededRand struct{ r *rand.ChaCha8 }

func newSeededRand(seed uint64) *seededRand {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return &seededRand{rand.NewChaCha8(s)}
}

func (s *seededRand) Read(p []byte) (int, error) { return s.r.Read(p) }

// env is a coordinator over a real file WAL in a temporary directory, with a
// fake clock.
type env struct {
	t     *testing.T
	dir   string
	clock *clock.Fake
	log   *wal.Log
	c     *Coordinator
	sync  wal.SyncPolicy
	seed  uint64
	rand  *seededRand // one stream across restarts, as crypto/rand would be
	// checkEveryRecord runs the state invariants after every applied record.
	checkEveryRecord bool
	// observer is Config.Observer.
	observer Observer
	// scan and maxExpiries, when set, are Config.ExpiryScanInterval
	// (default here 1 s) and Config.MaxExpiriesPerScan.
	scan        time.Duration
	maxExpiries int
	// memory is Config.Memory.
	memory *MemoryBudget
	// suffix is Config.TaskIDSuffix: the partition's, in cluster mode.
	suffix string
}

func newEnv(t *testing.T, seed uint64) *env {
	t.Helper()
	return newEnvIn(t, seed, "")
}

// newEnvIn is newEnv for a partition whose task ids end with suffix.
func newEnvIn(t *testing.T, seed uint64, suffix string) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch), sync: wal.SyncNone, seed: seed, rand: newSeededRand(seed), checkEveryRecord: true, suffix: suffix}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) config() Config {
	scan := e.scan
	if scan == 0 {
		scan = time.Second
	}
	return Config{Clock: e.clock, Rand: e.rand, ExpiryScanInterval: scan, MaxExpiriesPerScan: e.maxExpiries, Observer: e.observer, Memory: e.memory,
		TaskIDSuffix: e.suffix}
}

func (e *env) open() {
	e.t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(e.dir, "wal"), Sync: e.sync, SegmentBytes: 1 << 20})
	if err != nil {
		e.t.Fatalf("open wal: %v", err)
	}
	c, err := Open(context.Background(), l, e.config())
	if err != nil {
		l.Close()
		e.t.Fatalf("open coordinator: %v", err)
	}
	if e.checkEveryRecord {
		c.onApply = func(st *state.State) {
			if err := st.Invariants(); err != nil {
				e.t.Errorf("invariants after lsn %d: %v", st.LastLSN(), err)
			}
		}
	}
	e.log, e.c = l, c
}

func (e *env) close() {
	if e.c != nil {
		e.c.Close()
		e.log.Close()
		e.c = nil
	}
}

// restart closes and reopens from the files on disk, checking that the
// reopened state equals the state before.
func (e *env) restart() {
	e.t.Helper()
	before := e.c.Export()
	e.close()
	e.open()
	if after := e.c.Export(); !reflect.DeepEqual(before, after) {
		e.t.Fatalf("state after restart differs from the state before")
	}
}

// replayFromDisk replays the WAL files into a fresh state, without a
// coordinator (no expiry after replay).
func (e *env) replayFromDisk() state.Export {
	e.t.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(e.dir, "wal"), Sync: wal.SyncNone, SegmentBytes: 1 << 20})
	if err != nil {
		e.t.Fatalf("reopen wal: %v", err)
	}
	defer l.Close()
	st := state.New()
	if err := Replay(l, st, 1); err != nil {
		e.t.Fatalf("replay: %v", err)
	}
	if err := st.Invariants(); err != nil {
		e.t.Fatalf("replayed state: %v", err)
	}
	return st.Export()
}

var ctx = context.Background()

func (e *env) submit(queue string, mods ...func(*SubmitRequest)) *state.Task {
	e.t.Helper()
	req := SubmitRequest{Queue: queue, Payload: []byte("payload")}
	for _, m := range mods {
		m(&req)
	}
	res, err := e.c.Submit(ctx, req)
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return res.Task
}

func (e *env) lease(worker, queue string) Lease {
	e.t.Helper()
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: worker, Queue: queue})
	if err != nil || len(ls) != 1 {
		e.t.Fatalf("lease: %v, %d leases", err, len(ls))
	}
	return ls[0]
}

func (e *env) get(id string) *state.Task {
	e.t.Helper()
	t, err := e.c.Get(ctx, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return t
}

// historyTypes lists the record types of a task's history.
func (e *env) historyTypes(id string) []record.Type {
	e.t.Helper()
	h, err := e.c.History(ctx, id)
	if err != nil {
		e.t.Fatalf("history: %v", err)
	}
	var out []record.Type
	for _, he := range h {
		out = append(out, record.TypeOf(he.Record))
	}
	return out
}

// seedRange is the seeds a randomized test runs, from first: only, when
// its -*.seed flag names one; else as many as its -*.seeds flag says
// (flagged), or def, at most short under -short.
func seedRange(only uint64, flagged, def, short int) (first uint64, n int) {
	switch {
	case only != 0:
		return only, 1
	case flagged > 0:
		return 1, flagged
	case testing.Short():
		return 1, min(def, short)
	}
	return 1, def
}

// runSeeds runs a simulation of each of n seeds from first, failing t at
// the first that fails with the command that replays it (replay: the
// go test flags before the seed), and returns the sums of their stats.
func runSeeds(t *testing.T, first uint64, n int, replay string, run func(seed uint64) (map[string]int, error)) map[string]int {
	t.Helper()
	total := map[string]int{}
	for seed := first; seed < first+uint64(n); seed++ {
		stats, err := run(seed)
		if err != nil {
			t.Fatalf("seed %d: %v\n(replay: go test ./internal/coordinator %s %d -v)", seed, err, replay, seed)
		}
		for k, v := range stats {
			total[k] += v
		}
	}
	return total
}

// simDisk is a coordinator over a file WAL on the fault-injecting disk of
// package faultfs, with a fake clock, seeded ids and a seeded random
// source: what the simulations of schedules and workflows share. Each
// restart reopens it from what the disk holds after the crash it names.
type simDisk struct {
	rng   *rand.Rand
	clk   *clock.Fake
	ids   *seededRand
	disk  *faultfs.FS
	log   *wal.Log
	c     *Coordinator
	stats map[string]int
	// config is the coordinator's configuration (clock and ids are set);
	// opened, if set, runs after each open.
	config Config
	opened func(*Coordinator) error
}

// newSimDisk makes the disk of a simulation of seed (salt tells one
// simulation's random stream from another's) and opens the coordinator.
func newSimDisk(seed, salt uint64, config Config, opened func(*Coordinator) error) (*simDisk, error) {
	s := &simDisk{
		rng:    rand.New(rand.NewPCG(seed, salt)),
		clk:    clock.NewFake(epoch),
		ids:    newSeededRand(seed),
		disk:   faultfs.NewWithDir("/data"),
		stats:  map[string]int{},
		config: config,
		opened: opened,
	}
	return s, s.open()
}

func (s *simDisk) open() error {
	l, err := wal.Open(wal.Options{Dir: simWALDir, FS: s.disk, Sync: wal.SyncAlways, SegmentBytes: 1 << 20})
	if err != nil {
		return fmt.Errorf("open wal: %w", err)
	}
	cfg := s.config
	cfg.Clock, cfg.Rand = s.clk, s.ids
	c, err := Open(ctx, l, cfg)
	if err != nil {
		l.Close()
		return fmt.Errorf("open coordinator: %w", err)
	}
	if err := c.CheckInvariants(); err != nil {
		c.Close()
		l.Close()
		return fmt.Errorf("invariants after opening: %w", err)
	}
	s.log, s.c = l, c
	if s.opened != nil {
		return s.opened(c)
	}
	return nil
}

func (s *simDisk) shutdown() {
	if s.c != nil {
		s.c.Close()
		s.log.Close()
		s.c, s.log = nil, nil
	}
}

// restart reopens after a crash: "crash" (kill -9: the page cache
// survives), "power" (only what was fsynced survives) or "power-keep"
// (that and a prefix of the rest).
func (s *simDisk) restart(how string) error {
	s.stats["restart-"+how]++
	s.shutdown()
	switch how {
	case "power":
		s.disk = s.disk.PowerLoss()
	case "power-keep":
		s.disk = s.disk.PowerLossKeep(s.rng)
	}
	s.disk.ClearFaults()
	return s.open()
}

// The faults both simulations inject, each counted in stats under its
// name.

// kill is kill -9 and a restart.
func (s *simDisk) kill() error {
	s.stats["fault-kill"]++
	return s.restart("crash")
}

// powerLoss cuts the power between two operations and restarts: only what
// was fsynced survives, or that and a prefix of the rest.
func (s *simDisk) powerLoss() error {
	s.stats["fault-power"]++
	if s.rng.IntN(2) == 0 {
		return s.restart("power")
	}
	return s.restart("power-keep")
}

// failNext fails the next fsync (faultfs.OpSync) or write.
func (s *simDisk) failNext(kind faultfs.Kind) {
	name := "fault-write"
	if kind == faultfs.OpSync {
		name = "fault-fsync"
	}
	s.stats[name]++
	s.disk.FailNext(kind, nil)
}

// cutPower arms a power cut within the next three operations, in the
// middle of what runs next.
func (s *simDisk) cutPower() {
	s.stats["fault-power-cut"]++
	s.disk.CutPowerAfter(s.disk.Ops() + 1 + s.rng.IntN(3))
}

// stopped handles the error of what ran after the faults were armed: an
// error other than the partition stopping is a bug; a stopped partition is
// reopened from what is durable (after a failed fsync the page cache cannot
// be trusted: a power loss).
func (s *simDisk) stopped(err error) error {
	if !errors.Is(err, ErrUnavailable) {
		return err
	}
	s.stats["reopen"]++
	return s.restart("power")
}

// replayDisk replays the durable log record by record into a new state,
// calling each with every record before it applies (nil: none) and after.
func (s *simDisk) replayDisk(before, after func(lsn uint64, r state.Record, st *state.State) error) (*state.State, error) {
	l, err := wal.Open(wal.Options{Dir: simWALDir, FS: s.disk, Sync: wal.SyncNone, SegmentBytes: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("reopen wal: %w", err)
	}
	defer l.Close()
	st := state.New()
	err = l.Replay(1, func(lsn uint64, e wal.Entry) error {
		r, err := record.Decode(record.Type(e.Type), e.Payload)
		if err != nil {
			return err
		}
		if before != nil {
			if err := before(lsn, r, st); err != nil {
				return err
			}
		}
		if err := st.Apply(lsn, r); err != nil {
			return err
		}
		return after(lsn, r, st)
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return st, nil
}
