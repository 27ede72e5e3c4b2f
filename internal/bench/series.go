package bench

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// OpenLoopResult is the summary of an open-loop run: the timetable it
// kept, the latency of its tasks, and the figures of each window.
type OpenLoopResult struct {
	RatePerSec      float64 `json:"rate_per_sec"`
	DurationSeconds float64 `json:"duration_seconds"`
	TickMs          float64 `json:"tick_ms"`
	WindowSeconds   float64 `json:"window_seconds"`
	// Due is the number of tasks on the timetable.
	Due int `json:"due"`
	// BehindSchedule counts the tasks whose submit call started more than
	// BehindAfterMs after they were due (every submitter was busy, or the
	// machine did not run the timetable in time). They were submitted
	// late, not skipped; their latency counts from when they were due.
	BehindSchedule int     `json:"behind_schedule"`
	BehindAfterMs  float64 `json:"behind_after_ms"`
	// SubmitLag is, per task, the time from when it was due to the start
	// of its submit call; Latency the time from when it was due to its
	// acknowledged completion. Percentiles of the whole run.
	SubmitLag Latency `json:"submit_lag"`
	Latency   Latency `json:"latency"`
	// SubmitCall is the latency of each submit call.
	SubmitCall Latency `json:"submit_call"`
	// StoppedAtSeconds is when the timetable was stopped because the
	// tasks submitted but not completed exceeded MaxBacklog (the server
	// did not keep up with the rate); null if it ran to its end. The tasks
	// due after it were not submitted, and the windows end with the run.
	StoppedAtSeconds *float64 `json:"stopped_at_seconds"`
	MaxBacklog       int64    `json:"max_backlog"`
	// DrainSeconds is the time from the end of the timetable to the last
	// acknowledged completion.
	DrainSeconds float64 `json:"drain_seconds"`
	// MemoryScope says whose memory rss_bytes and heap_live_bytes are.
	MemoryScope string `json:"memory_scope"`
	// Start is sampled as the run starts; each window has the sample at
	// its end.
	Start   Sample   `json:"start"`
	Windows []Window `json:"windows"`
}

// The values of OpenLoopResult.MemoryScope.
const (
	memoryScopeProcess = "process: server, clients and workers"
	memoryScopeClient  = "bench process only: clients and workers; the server's resident memory is server_rss_bytes, from its /metrics"
	memoryScopeCluster = "process: cluster nodes, clients and workers, not the database"
)

// Sample is the memory and disk at one moment of an open-loop run.
type Sample struct {
	AtSeconds float64 `json:"at_seconds"`
	// RSSBytes is this process's resident memory, HeapLiveBytes its Go heap
	// marked live by the last collection.
	RSSBytes      uint64 `json:"rss_bytes"`
	HeapLiveBytes uint64 `json:"heap_live_bytes"`
	// WALBytes is the WAL's segment files on disk (the embedded node's, or
	// a remote server's tenure_wal_bytes); SnapshotBytes the embedded
	// node's snapshot files; ServerRSSBytes a remote server's resident
	// memory (process_resident_memory_bytes). Null where not known.
	WALBytes       *uint64 `json:"wal_bytes"`
	SnapshotBytes  *uint64 `json:"snapshot_bytes"`
	ServerRSSBytes *uint64 `json:"server_rss_bytes"`
}

// Window is one interval of an open-loop run. Submissions count in the
// window their call started in, completions in the window their
// acknowledgement arrived in; the last window also holds the drain.
type Window struct {
	StartSeconds    float64 `json:"start_seconds"`
	EndSeconds      float64 `json:"end_seconds"`
	Submitted       int     `json:"submitted"`
	BehindSchedule  int     `json:"behind_schedule"`
	SubmitLag       Latency `json:"submit_lag"`
	SubmitCall      Latency `json:"submit_call"`
	Completed       int     `json:"completed"`
	CompletedPerSec float64 `json:"completed_per_sec"`
	// Latency is from when each task completed in the window was due to
	// its acknowledged completion.
	Latency Latency `json:"latency"`
	// CPUSeconds is the process's CPU in the window (see cpu.scope), and
	// CPUPer100kTasks the same per 100,000 tasks completed in it.
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUPer100kTasks float64 `json:"cpu_per_100k_tasks"`
	// MachineBusy and OtherProcesses are as in cpu, over the window: on a
	// shared machine, the share of it that other processes took.
	MachineBusy    *float64 `json:"machine_busy"`
	OtherProcesses *float64 `json:"other_processes"`
	// End is sampled at the window's end.
	End Sample `json:"end"`
}

// result summarises the run that o recorded.
func (o *openLoop) result(tick time.Duration, scope string) *OpenLoopResult {
	last := o.samples[len(o.samples)-1].at
	res := &OpenLoopResult{
		RatePerSec:      o.tt.rate,
		DurationSeconds: seconds(o.duration),
		TickMs:          ms(tick),
		WindowSeconds:   seconds(o.window),
		Due:             o.tt.total,
		BehindAfterMs:   ms(behindAfter),
		DrainSeconds:    seconds(max(last.Sub(o.tt.start.Add(o.duration)), 0)),
		MemoryScope:     scope,
		Start:           o.sampleFigures(o.samples[0]),
		MaxBacklog:      o.maxBacklog,
	}
	if !o.stoppedAt.IsZero() {
		at := seconds(o.stoppedAt.Sub(o.tt.start))
		res.StoppedAtSeconds = &at
		res.DrainSeconds = seconds(last.Sub(o.stoppedAt))
	}
	var lag, latency, call histogram
	for k := range o.windows {
		w := &o.windows[k]
		lag.merge(&w.submitLag)
		latency.merge(&w.latency)
		call.merge(&w.submitCall)
		res.BehindSchedule += int(w.behind.Load())
		res.Windows = append(res.Windows, o.windowFigures(k))
	}
	res.SubmitLag, res.Latency, res.SubmitCall = lag.summary(), latency.summary(), call.summary()
	return res
}

// windowFigures is the report of window k: its counts, latencies, the CPU
// between the samples at its ends, and the sample at its end. Every
// window but the last ends at its nominal end; the last at its sample.
func (o *openLoop) windowFigures(k int) Window {
	w := &o.windows[k]
	from := time.Duration(k) * o.window
	to := from + o.window
	if k == len(o.windows)-1 {
		to = o.samples[k+1].at.Sub(o.tt.start)
	}
	cpu := o.samples[k+1].cpu.minus(o.samples[k].cpu)
	machine := cpuFigures(cpu, o.samples[k+1].at.Sub(o.samples[k].at), runtime.GOMAXPROCS(0), runtime.NumCPU())
	completed := int(w.completed.Load())
	return Window{
		MachineBusy:     machine.MachineBusy,
		OtherProcesses:  machine.OtherProcesses,
		StartSeconds:    seconds(from),
		EndSeconds:      seconds(to),
		Submitted:       int(w.submitted.Load()),
		BehindSchedule:  int(w.behind.Load()),
		SubmitLag:       w.submitLag.summary(),
		SubmitCall:      w.submitCall.summary(),
		Completed:       completed,
		CompletedPerSec: rate(completed, to-from),
		Latency:         w.latency.summary(),
		CPUSeconds:      seconds(cpu.total),
		CPUPer100kTasks: per100k(cpu.total, completed),
		End:             o.sampleFigures(o.samples[k+1]),
	}
}

// sampleFigures is the report of sample s.
func (o *openLoop) sampleFigures(s sample) Sample {
	return Sample{
		AtSeconds:      seconds(max(s.at.Sub(o.tt.start), 0)),
		RSSBytes:       s.rss,
		HeapLiveBytes:  s.heapLive,
		WALBytes:       s.wal,
		SnapshotBytes:  s.snapshots,
		ServerRSSBytes: s.serverRSS,
	}
}

// writeText prints the open-loop figures: the timetable kept, the
// latencies of the whole run, and one row per window.
func (o *OpenLoopResult) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "timetable: %d tasks due at %g/s, checked every %g ms; %d behind schedule (their submit call started more than %g ms after they were due)\n",
		o.Due, o.RatePerSec, o.TickMs, o.BehindSchedule, o.BehindAfterMs)
	if o.StoppedAtSeconds != nil {
		fmt.Fprintf(b, "STOPPED at %gs: more than %d tasks (--max-backlog) were submitted and not completed; the server did not keep up with %g/s, and the tasks due later were not submitted\n",
			*o.StoppedAtSeconds, o.MaxBacklog, o.RatePerSec)
		fmt.Fprintf(b, "drain: the last completion %.3fs after the stop\n\n", o.DrainSeconds)
	} else {
		fmt.Fprintf(b, "drain: the last completion %.3fs after the timetable's end\n\n", o.DrainSeconds)
	}
	b.WriteString(latencyHeader)
	writeLatency(b, "due→completed", &o.Latency)
	writeLatency(b, "due→submit call", &o.SubmitLag)
	writeLatency(b, "submit call", &o.SubmitCall)
	b.WriteString("\n")

	mib := func(v *uint64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.1f", float64(*v)/(1<<20))
	}
	fmt.Fprintf(b, "per window (latency due→completed in ms; others: the machine's CPU other processes used; memory of the %s)\n", o.MemoryScope)
	fmt.Fprintf(b, "  %-13s %9s %8s %8s %8s %8s %8s %7s %8s %6s %8s %8s %8s %8s %8s\n",
		"window (s)", "completed", "per s", "p50", "p90", "p99", "max", "behind", "CPU/100k", "others", "RSS MiB", "heap MiB", "WAL MiB", "snap MiB", "srv MiB")
	memory := func(s Sample) {
		fmt.Fprintf(b, " %8s %8s %8s %8s %8s\n", mib(&s.RSSBytes), mib(&s.HeapLiveBytes), mib(s.WALBytes), mib(s.SnapshotBytes), mib(s.ServerRSSBytes))
	}
	fmt.Fprintf(b, "  %-13s %9s %8s %8s %8s %8s %8s %7s %8s %6s", "start", "", "", "", "", "", "", "", "", "")
	memory(o.Start)
	for _, w := range o.Windows {
		others := "n/a"
		if w.OtherProcesses != nil {
			others = fmt.Sprintf("%.0f%%", 100**w.OtherProcesses)
		}
		fmt.Fprintf(b, "  %-13s %9d %8.0f %8.3f %8.3f %8.3f %8.3f %7d %8.3f %6s",
			fmt.Sprintf("%g-%g", w.StartSeconds, w.EndSeconds), w.Completed, w.CompletedPerSec,
			w.Latency.P50, w.Latency.P90, w.Latency.P99, w.Latency.Max, w.BehindSchedule, w.CPUPer100kTasks, others)
		memory(w.End)
	}
	b.WriteString("\n")
}
