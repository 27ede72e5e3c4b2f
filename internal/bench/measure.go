package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/wal"
)

// measurement is what the main run measured: the phases' wall times, and
// the samples taken around them.
type measurement struct {
	// submit is the submission phase's wall time; complete the time from
	// the workers' start (sequential) or the run's start (concurrent) to
	// the last acknowledged completion; total covers both (in sequential
	// mode without the gap between them).
	submit, complete, total time.Duration
	// wall and cpu are the run's wall time and the CPU it used, both less
	// the gap between the sequential phases.
	wall time.Duration
	cpu  cpuSample
	// submitCPU and completeCPU are the CPU of the sequential phases (the
	// submission, then leasing and completing); they add up to cpu. Zero in
	// concurrent mode, where the phases overlap.
	submitCPU, completeCPU cpuSample
	// walBefore and walAfter are the embedded node's WAL counters.
	walBefore, walAfter wal.Stats
	// memBefore is sampled before the run; memAfter after the submission
	// phase (sequential mode only).
	memBefore, memAfter memSample
	// watchers is what the run's event streams read (nil without any).
	watchers *WatchersResult
}

// gap is the wall time and CPU spent between the sequential phases,
// sampling memory (a full collection): they count in neither phase.
type gap struct {
	wall time.Duration
	cpu  cpuSample
	// end is the CPU sample at the end of the gap, where the second
	// phase's CPU starts.
	end cpuSample
}

// measure runs the main workload in cfg.Mode and measures it.
func (r *runner) measure(ctx context.Context) measurement {
	// Everything the main run allocates up front exists now; the recorders'
	// pages are touched so that filling them does not count as task memory.
	for _, d := range []durations{r.submitCall, r.submitPerTask, r.leaseCall, r.leaseToComplete, r.bigWait, r.smallWait} {
		if rec, ok := d.(*recorder); ok {
			for i := range rec.ds {
				rec.ds[i] = -1
			}
		}
	}
	var m measurement
	var ws *watchers
	if r.cfg.Watchers > 0 {
		var err error
		if ws, err = r.startWatchers(ctx); err != nil {
			r.fail(err)
			return m
		}
		defer ws.stop()
	}
	m.walBefore = r.walStats()
	m.memBefore = settledMemory()
	cpuBefore := cpuNow()
	stopMonitor := r.monitor(ctx)

	start := now()
	var between gap
	switch r.cfg.Mode {
	case Sequential:
		between = r.sequential(ctx, start, cpuBefore, &m)
	case Concurrent:
		r.concurrent(ctx, start, &m)
	case OpenLoop:
		r.openLoopRun(ctx, start, &m)
	}
	cpuAfter, wall := cpuNow(), since(start)
	m.walAfter = r.walStats()
	stopMonitor()
	m.cpu = cpuAfter.minus(cpuBefore).minus(between.cpu)
	m.wall = wall - between.wall
	if r.cfg.Mode == Sequential && ctx.Err() == nil {
		m.completeCPU = cpuAfter.minus(between.end)
	}
	if ws != nil && ctx.Err() == nil {
		m.watchers = r.watchersCaughtUp(ctx, ws, cpuBefore, between)
	}
	return m
}

// watchersCaughtUp waits for the run's event streams to read the log's
// last record, and returns what they read and the CPU of the run until
// then.
func (r *runner) watchersCaughtUp(ctx context.Context, ws *watchers, cpuBefore cpuSample, between gap) *WatchersResult {
	c := r.tg.node.Coordinator()
	if c == nil {
		r.fail(fmt.Errorf("the embedded node does not serve"))
		return nil
	}
	took, err := ws.caughtUp(ctx, c.Stats().LastLSN)
	if err != nil {
		r.fail(fmt.Errorf("the event streams did not catch up: %w", err))
		return nil
	}
	cpu := cpuNow().minus(cpuBefore).minus(between.cpu)
	res := &WatchersResult{Count: len(ws.pos), CaughtUpSeconds: seconds(took)}
	for i := range ws.events {
		res.EventsEach = append(res.EventsEach, ws.events[i].Load())
	}
	if n := r.completed.Load(); n > 0 {
		res.CPUPer100kTasks = cpu.total.Seconds() / float64(n) * 1e5
	}
	return res
}

// sequential submits every task, samples memory (and writes the heap
// profile) while they all wait, then works them off. It returns the time
// and CPU the sampling took.
func (r *runner) sequential(ctx context.Context, start time.Time, cpuStart cpuSample, m *measurement) gap {
	r.submit(ctx)
	m.submit = since(start)
	if ctx.Err() != nil {
		return gap{}
	}
	gapStart, gapCPUStart := now(), cpuNow()
	m.submitCPU = gapCPUStart.minus(cpuStart)
	m.memAfter = settledMemory()
	if r.cfg.HeapProfile != nil {
		if err := pprof.Lookup("heap").WriteTo(r.cfg.HeapProfile, 0); err != nil {
			r.fail(fmt.Errorf("writing the heap profile: %w", err))
			return gap{}
		}
	}
	gapCPUEnd := cpuNow()
	between := gap{wall: since(gapStart), cpu: gapCPUEnd.minus(gapCPUStart), end: gapCPUEnd}
	workStart := now()
	r.work(ctx)
	m.complete = since(workStart)
	m.total = m.submit + m.complete
	return between
}

// concurrent submits and works off the tasks at the same time.
func (r *runner) concurrent(ctx context.Context, start time.Time, m *measurement) {
	var wg sync.WaitGroup
	wg.Go(func() { r.work(ctx) })
	r.submit(ctx)
	m.submit = since(start)
	wg.Wait()
	m.complete = since(start)
	m.total = m.complete
}

// summarize fills res with the figures of m and of the run's recorders.
func (r *runner) summarize(res *Result, m measurement) {
	cfg := r.cfg
	res.Submitted, res.Completed = int(r.submitted.Load()), int(r.completed.Load())
	res.Watchers = m.watchers
	res.SubmitSeconds, res.CompleteSeconds, res.TotalSeconds = seconds(m.submit), seconds(m.complete), seconds(m.total)
	res.SubmittedPerSec = rate(res.Submitted, m.submit)
	res.CompletedPerSec = rate(res.Completed, m.complete)
	res.EndToEndPerSec = rate(res.Completed, m.total)
	res.SubmitCall = r.submitCall.summary()
	res.SubmitPerTask = r.submitPerTask.summary()
	if !cfg.Runtime {
		lc, ltc := r.leaseCall.summary(), r.leaseToComplete.summary()
		res.LeaseCall, res.LeaseToComplete = &lc, &ltc
		if n := r.leases.Load(); n > 0 {
			v := round3(float64(r.leased.Load()) / float64(n))
			res.TasksPerLease = &v
		}
		carried := r.carried.Load()
		res.LeasesCarried = &carried
	}
	embedded := r.tg.node != nil
	if embedded {
		res.WAL = walFigures(m.walBefore, m.walAfter, res.Completed)
	}
	res.CPU = cpuFigures(m.cpu, m.wall, res.Config.GOMAXPROCS, res.Config.NumCPU)
	memScope := memoryScopeProcess
	switch {
	case cfg.Addr != "":
		res.CPU.Scope, memScope = cpuScopeClient, memoryScopeClient
	case cfg.Cluster > 0:
		res.CPU.Scope, memScope = cpuScopeCluster, memoryScopeCluster
	default:
		res.CPU.Scope = cpuScopeProcess
	}
	res.CPU.Run = cpuUse(m.cpu, res.Completed)
	if cfg.Mode == Sequential {
		s, c := cpuUse(m.submitCPU, res.Submitted), cpuUse(m.completeCPU, res.Completed)
		res.CPU.Submit, res.CPU.LeaseComplete = &s, &c
	}
	res.Memory = memoryFigures(m, cfg, embedded)
	if r.bigWait != nil {
		res.KeyWaits = &KeyWaits{Big: r.bigWait.summary(), Small: r.smallWait.summary()}
	}
	if r.ol != nil {
		// The targets are of closed-loop runs (rates at full load).
		res.OpenLoop = r.ol.result(cfg.Tick, memScope)
		return
	}
	res.evaluateTargets()
}

// walFigures is what the WAL wrote between two samples, for tasks tasks.
func walFigures(before, after wal.Stats, tasks int) *WALFigures {
	w := &WALFigures{
		Records: after.Records - before.Records,
		Batches: after.Batches - before.Batches,
		Fsyncs:  after.Fsyncs - before.Fsyncs,
		Bytes:   after.Bytes - before.Bytes,
	}
	if w.Fsyncs > 0 {
		w.RecordsPerFsync = round3(float64(w.Records) / float64(w.Fsyncs))
	}
	w.RecordsPerTask = round3(float64(w.Records) / float64(tasks))
	return w
}

// cpuFigures is the CPU used over wall, on procs cores of the process's
// and cpus of the machine.
func cpuFigures(used cpuSample, wall time.Duration, procs, cpus int) CPU {
	c := CPU{Seconds: seconds(used.total), GCSeconds: seconds(used.gc)}
	if wall > 0 {
		c.Utilization = round3(used.total.Seconds() / (wall.Seconds() * float64(procs)))
		if used.machineAll > 0 {
			busy := round3(float64(used.machineBusy) / float64(used.machineAll))
			own := used.total.Seconds() / (wall.Seconds() * float64(cpus))
			others := round3(max(0, busy-own))
			c.MachineBusy, c.OtherProcesses = &busy, &others
		}
	}
	return c
}

// cpuUse is the CPU used, for tasks tasks.
func cpuUse(used cpuSample, tasks int) CPUUse {
	return CPUUse{
		Tasks:         tasks,
		Seconds:       seconds(used.total),
		UserSeconds:   seconds(used.user),
		SystemSeconds: seconds(used.sys),
		GCSeconds:     seconds(used.gc),
		Per100kTasks: CPUPer100k{
			Seconds:       per100k(used.total, tasks),
			UserSeconds:   per100k(used.user, tasks),
			SystemSeconds: per100k(used.sys, tasks),
			GCSeconds:     per100k(used.gc, tasks),
		},
	}
}

// memoryFigures is the process's peak memory and, in sequential mode, what
// the waiting tasks added; per task only for the embedded node, whose
// memory is the process's.
func memoryFigures(m measurement, cfg Config, embedded bool) Memory {
	var mem Memory
	mem.PeakRSSBytes, _ = procStatus("VmHWM")
	mem.IncludesClient = embedded
	if cfg.Mode == Sequential {
		b, a := m.memBefore.rss, m.memAfter.rss
		mem.RSSBeforeBytes, mem.RSSAfterSubmitBytes = &b, &a
		if embedded {
			perTask := func(after, before uint64) *float64 {
				v := (float64(after)-float64(before))/float64(cfg.Tasks) - float64(cfg.PayloadBytes)
				v = float64(int64(v*10)) / 10
				return &v
			}
			mem.RSSPerTaskBeyondPayload = perTask(m.memAfter.rss, m.memBefore.rss)
			mem.HeapPerTaskBeyondPayload = perTask(m.memAfter.heap, m.memBefore.heap)
		}
	}
	return mem
}
