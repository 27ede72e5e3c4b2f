package bench

import (
	"fmt"
	"io"
	"strings"
)

// Result is the summary of one run. Its JSON form is stable: every key is
// always present, with null for a figure the run could not measure (for
// example the WAL counters of a remote server).
type Result struct {
	Config RunConfig `json:"config"`

	Submitted int `json:"submitted"`
	Completed int `json:"completed"`
	// SubmitSeconds is the submission phase's wall time; CompleteSeconds
	// the time from the workers' start (sequential) or the run's start
	// (concurrent) to the last acknowledged Complete; TotalSeconds covers
	// both (in sequential mode without the memory sample between them).
	SubmitSeconds   float64 `json:"submit_seconds"`
	CompleteSeconds float64 `json:"complete_seconds"`
	TotalSeconds    float64 `json:"total_seconds"`
	SubmittedPerSec float64 `json:"submitted_per_sec"`
	CompletedPerSec float64 `json:"completed_per_sec"`
	EndToEndPerSec  float64 `json:"end_to_end_per_sec"`

	// SubmitCall is the latency of each Submit or SubmitBatch call;
	// SubmitPerTask is each call's latency divided by its tasks (the
	// amortised cost of one task).
	SubmitCall    Latency `json:"submit_call"`
	SubmitPerTask Latency `json:"submit_per_task"`
	// LeaseCall is the latency of each Lease call that returned tasks (an
	// empty long-poll is not a figure). TasksPerLease is the mean size of
	// the leases that returned tasks, those of Lease calls and those that
	// CompleteBatch calls carried; LeasesCarried is the number of the
	// latter (0 with SeparateLease).
	LeaseCall     *Latency `json:"lease_call"`
	TasksPerLease *float64 `json:"tasks_per_lease"`
	LeasesCarried *int64   `json:"leases_carried"`
	// LeaseToComplete is, per task, the time from its Lease answer to its
	// acknowledged Complete. Null with the worker runtime, whose calls the
	// benchmark does not see one by one.
	LeaseToComplete *Latency `json:"lease_to_complete"`

	// KeyWaits is, with a big key (Config.BigKeyTasks), each task's wait
	// from its acknowledged submit to its lease, for the big key's tasks and
	// the small keys' apart; null otherwise.
	KeyWaits *KeyWaits `json:"key_waits"`

	// OpenLoop is the open-loop run's timetable, latency and windows; null
	// for a closed-loop run.
	OpenLoop *OpenLoopResult `json:"open_loop"`

	// Watchers is what the event streams of the run read (null without
	// any: Config.Watchers).
	Watchers *WatchersResult `json:"watchers"`

	Probe   *Probe      `json:"probe"`
	WAL     *WALFigures `json:"wal"`
	Memory  Memory      `json:"memory"`
	CPU     CPU         `json:"cpu"`
	Targets []Target    `json:"targets"`
}

// WatchersResult is what the event streams of a run read: each every
// record of the run. CaughtUpSeconds is how long after the last completion
// the slowest one had read the log's last record; CPU counts the run's CPU
// up to then, per 100k completed tasks (the run's own figure stops at the
// last completion).
type WatchersResult struct {
	Count           int     `json:"count"`
	EventsEach      []int64 `json:"events_each"`
	CaughtUpSeconds float64 `json:"caught_up_seconds"`
	CPUPer100kTasks float64 `json:"cpu_seconds_per_100k_tasks_with_catch_up"`
}

// KeyWaits are the waits of a run with a big key beside small ones.
type KeyWaits struct {
	Big   Latency `json:"big_key"`
	Small Latency `json:"small_keys"`
}

// RunConfig is the configuration a Result was measured with.
type RunConfig struct {
	Target   string `json:"target"` // "embedded" or the server's address
	Mode     Mode   `json:"mode"`
	Runtime  bool   `json:"worker_runtime"`
	Typed    bool   `json:"typed_tasks,omitempty"`
	Protocol string `json:"protocol"`
	Fsync    string `json:"fsync"` // "unknown" for a remote server
	// CommitIntervalMs is the embedded node's least time between two WAL
	// fsyncs, in milliseconds; null against --addr or a cluster.
	CommitIntervalMs *float64 `json:"commit_interval_ms"`
	TLS              bool     `json:"tls"` // the clients call over TLS
	Seed             uint64   `json:"seed"`
	Namespace        string   `json:"namespace"`
	Queue            string   `json:"queue"`
	Tasks            int      `json:"tasks"`
	// Keys and BigKeyTasks give the tasks keys (0: none); Fair is fair
	// leasing across them.
	Keys        int  `json:"keys,omitempty"`
	BigKeyTasks int  `json:"big_key_tasks,omitempty"`
	Fair        bool `json:"fair,omitempty"`
	// Watchers is the number of event streams that followed the run.
	Watchers     int `json:"watchers,omitempty"`
	PayloadBytes int `json:"payload_bytes"`
	Submitters   int `json:"submitters"`
	Batch        int `json:"batch"`
	Workers      int `json:"workers"`
	Concurrency  int `json:"concurrency"`
	LeaseBatch   int `json:"lease_batch"` // 0: chosen by the worker runtime
	// CompleteBatch is the most completions per CompleteBatch call (1:
	// one Complete call per task).
	CompleteBatch int `json:"complete_batch"`
	// SeparateLease: the raw loop leased with Lease calls only, not also
	// in its CompleteBatch calls.
	SeparateLease bool `json:"separate_lease"`
	GOMAXPROCS    int  `json:"gomaxprocs"`
	NumCPU        int  `json:"num_cpu"`
	// The snapshot schedule and retention of the embedded node or the
	// started cluster's nodes, defaults applied; null against --addr.
	RetentionSeconds     *float64 `json:"retention_seconds"`
	SnapshotEverySeconds *float64 `json:"snapshot_every_seconds"`
	SnapshotEveryRecords *uint64  `json:"snapshot_every_records"`
}

// fsyncLabel is the fsync policy, with the commit interval under always:
// "always, commit interval 1ms".
func (c RunConfig) fsyncLabel() string {
	if c.CommitIntervalMs != nil && c.Fsync == "always" {
		return fmt.Sprintf("%s, commit interval %gms", c.Fsync, *c.CommitIntervalMs)
	}
	return c.Fsync
}

// Probe holds the single-operation latencies measured with no other load,
// before the main run.
type Probe struct {
	Rounds int `json:"rounds"`
	// DiskFsync is the latency of a small append and fsync of a file in the
	// embedded node's data directory: the floor under every durable call.
	// Null for a remote server.
	DiskFsync *Latency `json:"disk_fsync"`
	// Submit is one Submit call after another, each waiting for its answer.
	Submit Latency `json:"submit"`
	// Handoff is the time from the start of a Submit call to the return of
	// a Lease call that was already long-polling on the queue.
	Handoff Latency `json:"handoff"`
}

// WALFigures are the embedded node's WAL counters over the main run.
type WALFigures struct {
	Records         uint64  `json:"records"`
	Batches         uint64  `json:"batches"`
	Fsyncs          uint64  `json:"fsyncs"`
	Bytes           uint64  `json:"bytes"`
	RecordsPerFsync float64 `json:"records_per_fsync"`
	RecordsPerTask  float64 `json:"records_per_task"`
}

// Memory figures are of this process: with the embedded server they cover
// server, client and workers together.
type Memory struct {
	PeakRSSBytes uint64 `json:"peak_rss_bytes"`
	// RSSBeforeBytes and RSSAfterSubmitBytes are sampled after a full
	// collection, before the first submit and after the last one
	// (sequential mode only).
	RSSBeforeBytes      *uint64 `json:"rss_before_bytes"`
	RSSAfterSubmitBytes *uint64 `json:"rss_after_submit_bytes"`
	// RSSPerTaskBeyondPayload is (after − before) / tasks − payload bytes:
	// what one waiting task costs the process besides its payload.
	// HeapPerTaskBeyondPayload is the same from the live Go heap, without
	// the allocator's slack. Both need the embedded server and sequential
	// mode (all tasks alive at once); null otherwise.
	RSSPerTaskBeyondPayload  *float64 `json:"rss_per_task_beyond_payload"`
	HeapPerTaskBeyondPayload *float64 `json:"heap_per_task_beyond_payload"`
	IncludesClient           bool     `json:"includes_client"`
}

// CPU is the process's CPU use over the main run, without the memory
// sample between the sequential phases.
type CPU struct {
	Seconds   float64 `json:"cpu_seconds"`
	GCSeconds float64 `json:"gc_cpu_seconds"`
	// Utilization is CPU seconds / (wall seconds × GOMAXPROCS): 1 means
	// every core the process may use was busy all the time.
	Utilization float64 `json:"utilization"`
	// MachineBusy is the share of all the machine's CPU time that was busy
	// (from /proc/stat; null where unreadable), and OtherProcesses the part
	// of it this process did not use: other load on a shared machine, which
	// makes the figures lower than the machine can do (the kernel's work
	// for this process's loopback traffic is partly counted there too).
	MachineBusy    *float64 `json:"machine_busy"`
	OtherProcesses *float64 `json:"other_processes"`

	// Scope says whose CPU these figures are: this one process (the
	// embedded server, its clients and workers together; or the started
	// cluster's nodes, without their database) or, against --addr, only
	// the bench's clients and workers, not the server's.
	Scope string `json:"scope"`
	// Run is the whole main run, per completed task; Submit the submission
	// phase, per submitted task; LeaseComplete the leasing and completing
	// phase, per completed task. The phases are null in concurrent mode,
	// where they overlap; in sequential mode they add up to Run.
	Run           CPUUse  `json:"run"`
	Submit        *CPUUse `json:"submit"`
	LeaseComplete *CPUUse `json:"lease_complete"`
}

// The values of CPU.Scope.
const (
	cpuScopeProcess = "process: server, clients and workers"
	cpuScopeClient  = "bench process only: clients and workers, not the server"
	cpuScopeCluster = "process: cluster nodes, clients and workers, not the database"
)

// CPUUse is the process's CPU over a stretch of the run, from getrusage
// (user and system time) and runtime/metrics (the GC's estimated share,
// which is part of user and system time).
type CPUUse struct {
	Tasks         int        `json:"tasks"`
	Seconds       float64    `json:"cpu_seconds"`
	UserSeconds   float64    `json:"user_seconds"`
	SystemSeconds float64    `json:"system_seconds"`
	GCSeconds     float64    `json:"gc_cpu_seconds"`
	Per100kTasks  CPUPer100k `json:"per_100k_tasks"`
}

// CPUPer100k is CPU-seconds per 100,000 tasks: the cost of the work,
// independent of how fast the machine ran it.
type CPUPer100k struct {
	Seconds       float64 `json:"cpu_seconds"`
	UserSeconds   float64 `json:"user_seconds"`
	SystemSeconds float64 `json:"system_seconds"`
	GCSeconds     float64 `json:"gc_cpu_seconds"`
}

// Target is one of the project's performance targets, checked against this
// run. Met is null when the run did not measure the figure.
type Target struct {
	Name  string   `json:"name"`
	Goal  string   `json:"goal"`
	Value *float64 `json:"value"`
	Unit  string   `json:"unit"`
	Met   *bool    `json:"met"`
}

// The project's performance targets, as BENCHMARKS.md states them.
const (
	targetSubmitPerSec   = 100_000
	targetCompletePerSec = 100_000
	targetSubmitOverMs   = 1.0 // submit p99 above the disk's fsync p99
	targetHandoffP50Ms   = 1.0
	targetBytesPerTask   = 300
)

// evaluateTargets fills r.Targets.
func (r *Result) evaluateTargets() {
	check := func(name, goal, unit string, v *float64, ok func(float64) bool) {
		t := Target{Name: name, Goal: goal, Value: v, Unit: unit}
		if v != nil {
			met := ok(*v)
			t.Met = &met
		}
		r.Targets = append(r.Targets, t)
	}
	atMost := func(limit float64) func(float64) bool { return func(v float64) bool { return v <= limit } }
	atLeast := func(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }
	f := func(v float64) *float64 { return &v }

	check("submitted_per_sec", fmt.Sprintf(">= %d", targetSubmitPerSec), "tasks/s", f(r.SubmittedPerSec), atLeast(targetSubmitPerSec))
	check("completed_per_sec", fmt.Sprintf(">= %d", targetCompletePerSec), "tasks/s", f(r.CompletedPerSec), atLeast(targetCompletePerSec))
	var over, handoff *float64
	if p := r.Probe; p != nil {
		handoff = f(p.Handoff.P50)
		if p.DiskFsync != nil {
			over = f(round3(p.Submit.P99 - p.DiskFsync.P99))
		}
	}
	check("submit_p99_above_fsync_p99", fmt.Sprintf("<= %g", targetSubmitOverMs), "ms", over, atMost(targetSubmitOverMs))
	check("handoff_p50", fmt.Sprintf("<= %g", targetHandoffP50Ms), "ms", handoff, atMost(targetHandoffP50Ms))
	check("rss_per_task_beyond_payload", fmt.Sprintf("<= %d", targetBytesPerTask), "bytes", r.Memory.RSSPerTaskBeyondPayload, atMost(targetBytesPerTask))
}

func round3(v float64) float64 {
	if v < 0 {
		return -round3(-v)
	}
	return float64(int64(v*1e3+0.5)) / 1e3
}

// WriteText prints r as a human-readable summary.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	rt := "raw Lease/Complete loop"
	if c.Runtime {
		rt = "worker runtime, no-op handler"
	}
	if c.Typed {
		rt = "worker runtime, typed JSON tasks, no-op handler"
	}
	tlsOn := ""
	if c.TLS {
		tlsOn = " over TLS"
	}
	fsync := c.fsyncLabel()
	if ol := r.OpenLoop; ol != nil {
		fmt.Fprintf(&b, "tenure bench: open loop, %g tasks/s for %gs (%d tasks of %d B), target %s (fsync %s, protocol %s%s)\n",
			ol.RatePerSec, ol.DurationSeconds, c.Tasks, c.PayloadBytes, c.Target, fsync, c.Protocol, tlsOn)
	} else {
		fmt.Fprintf(&b, "tenure bench: %d tasks of %d B, %s mode, target %s (fsync %s, protocol %s%s)\n",
			c.Tasks, c.PayloadBytes, c.Mode, c.Target, fsync, c.Protocol, tlsOn)
	}
	lb := fmt.Sprintf("lease batch %d", c.LeaseBatch)
	if c.Runtime {
		lb = "lease batch chosen by the runtime"
	}
	cb := fmt.Sprintf("complete batch %d", c.CompleteBatch)
	switch {
	case c.CompleteBatch == 1:
		cb = "one Complete per task"
	case !c.Runtime && !c.SeparateLease:
		cb += ", leasing again in the same call"
	}
	fmt.Fprintf(&b, "  submitters %d × batch %d; workers %d × concurrency %d, %s, %s (%s)\n",
		c.Submitters, c.Batch, c.Workers, c.Concurrency, lb, cb, rt)
	if c.RetentionSeconds != nil {
		fmt.Fprintf(&b, "  retention %gs; a snapshot every %d records or %gs\n", *c.RetentionSeconds, *c.SnapshotEveryRecords, *c.SnapshotEverySeconds)
	}
	if c.Keys > 0 {
		fair := "fair leasing off"
		if c.Fair {
			fair = "fair leasing on"
		}
		if c.BigKeyTasks > 0 {
			fmt.Fprintf(&b, "  keys: %d tasks of one big key, submitted first, then %d over %d keys; %s\n", c.BigKeyTasks, c.Tasks-c.BigKeyTasks, c.Keys, fair)
		} else {
			fmt.Fprintf(&b, "  keys: %d tasks over %d keys; %s\n", c.Tasks, c.Keys, fair)
		}
	}
	fmt.Fprintf(&b, "  queue %s/%s, seed %d, GOMAXPROCS %d of %d CPUs\n\n", c.Namespace, c.Queue, c.Seed, c.GOMAXPROCS, c.NumCPU)

	fmt.Fprintf(&b, "CPU per task: %.3f CPU-s per 100k tasks (%s)\n\n", r.CPU.Run.Per100kTasks.Seconds, r.CPU.Scope)
	if w := r.Watchers; w != nil {
		fmt.Fprintf(&b, "event streams: %d, each read %v events; the slowest caught up %.3fs after the last completion; %.3f CPU-s per 100k tasks until then\n\n",
			w.Count, w.EventsEach, w.CaughtUpSeconds, w.CPUPer100kTasks)
	}
	if r.OpenLoop != nil {
		r.OpenLoop.writeText(&b)
	} else {
		r.writeClosedLoop(&b)
	}
	if w := r.WAL; w != nil {
		fmt.Fprintf(&b, "WAL (main run): %d records, %d writes, %d fsyncs, %.1f records/fsync, %.2f records/task, %s\n",
			w.Records, w.Batches, w.Fsyncs, w.RecordsPerFsync, w.RecordsPerTask, humanBytes(w.Bytes))
	}
	fmt.Fprintf(&b, "CPU (main run): %.2fs, %.0f%% of %d cores; GC ≈ %.2fs (%.0f%%)",
		r.CPU.Seconds, 100*r.CPU.Utilization, c.GOMAXPROCS, r.CPU.GCSeconds, pct(r.CPU.GCSeconds, r.CPU.Seconds))
	if r.CPU.MachineBusy != nil {
		fmt.Fprintf(&b, "; machine %.0f%% busy, other processes ≈ %.0f%%", 100**r.CPU.MachineBusy, 100**r.CPU.OtherProcesses)
		if *r.CPU.OtherProcesses > 0.1 {
			b.WriteString(" (shared machine: figures are low)")
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "memory: peak RSS %s", humanBytes(r.Memory.PeakRSSBytes))
	if m := r.Memory; m.RSSPerTaskBeyondPayload != nil {
		fmt.Fprintf(&b, "; per waiting task beyond its payload: %.0f B resident, %.0f B Go heap", *m.RSSPerTaskBeyondPayload, *m.HeapPerTaskBeyondPayload)
	}
	if r.Memory.IncludesClient {
		b.WriteString(" (one process: server and client together)")
	}
	b.WriteString("\n")
	if r.OpenLoop == nil {
		b.WriteString("\ntargets\n")
	}
	for _, t := range r.Targets {
		v, met := "n/a", "not measured"
		if t.Value != nil {
			v = fmt.Sprintf("%.3g %s", *t.Value, t.Unit)
			if *t.Value >= 1000 {
				v = fmt.Sprintf("%.0f %s", *t.Value, t.Unit)
			}
		}
		if t.Met != nil {
			met = "NOT MET"
			if *t.Met {
				met = "met"
			}
		}
		fmt.Fprintf(&b, "  %-28s %-9s %-18s %s\n", t.Name, t.Goal, v, met)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeClosedLoop prints the rates and latencies of a closed-loop run.
func (r *Result) writeClosedLoop(b *strings.Builder) {
	fmt.Fprintf(b, "throughput                                            CPU-s per 100k tasks\n")
	fmt.Fprintf(b, "                                                      total = user + sys (GC)\n")
	perTask := func(u *CPUUse) string {
		if u == nil {
			return "   n/a (phases overlap)"
		}
		p := u.Per100kTasks
		return fmt.Sprintf("%7.3f = %.3f + %.3f (%.3f)", p.Seconds, p.UserSeconds, p.SystemSeconds, p.GCSeconds)
	}
	fmt.Fprintf(b, "  submitted       %9d in %7.3fs  %9.0f tasks/s  %s\n", r.Submitted, r.SubmitSeconds, r.SubmittedPerSec, perTask(r.CPU.Submit))
	fmt.Fprintf(b, "  completed       %9d in %7.3fs  %9.0f tasks/s  %s (lease → acknowledged complete)\n", r.Completed, r.CompleteSeconds, r.CompletedPerSec, perTask(r.CPU.LeaseComplete))
	fmt.Fprintf(b, "  end to end      %9d in %7.3fs  %9.0f tasks/s  %s\n\n", r.Completed, r.TotalSeconds, r.EndToEndPerSec, perTask(&r.CPU.Run))

	b.WriteString(latencyHeader)
	lat := func(name string, l *Latency) { writeLatency(b, name, l) }
	lat("submit call", &r.SubmitCall)
	lat("submit per task", &r.SubmitPerTask)
	lat("lease call", r.LeaseCall)
	lat("lease→complete", r.LeaseToComplete)
	if k := r.KeyWaits; k != nil {
		lat("wait, big key", &k.Big)
		lat("wait, small keys", &k.Small)
	}
	if r.TasksPerLease != nil {
		fmt.Fprintf(b, "  tasks per lease: %.1f", *r.TasksPerLease)
		if r.LeasesCarried != nil && *r.LeasesCarried > 0 {
			fmt.Fprintf(b, " (%d leases carried by CompleteBatch calls)", *r.LeasesCarried)
		}
		b.WriteString("\n")
	}
	if p := r.Probe; p != nil {
		fmt.Fprintf(b, "no load, %d rounds each:\n", p.Rounds)
		if p.DiskFsync != nil {
			lat("disk fsync", p.DiskFsync)
		}
		lat("single submit", &p.Submit)
		lat("long-poll handoff", &p.Handoff)
	}
	b.WriteString("\n")

}

// latencyHeader heads the rows of writeLatency.
const latencyHeader = "latency (ms)            count      p50      p90      p99      max\n"

// writeLatency prints l as one row under latencyHeader ("n/a" for nil).
func writeLatency(b *strings.Builder, name string, l *Latency) {
	if l == nil {
		fmt.Fprintf(b, "  %-18s %8s\n", name, "n/a")
		return
	}
	fmt.Fprintf(b, "  %-18s %8d %8.3f %8.3f %8.3f %8.3f\n", name, l.Count, l.P50, l.P90, l.P99, l.Max)
}

func pct(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * part / whole
}
