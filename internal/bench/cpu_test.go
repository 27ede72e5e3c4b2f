package bench

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wal"
)

func TestBenchPer100k(t *testing.T) {
	for _, tc := range []struct {
		d     time.Duration
		tasks int
		want  float64
	}{
		{2 * time.Second, 200_000, 1},
		{1500 * time.Millisecond, 50_000, 3},
		{time.Second, 100_000, 1},
		{3 * time.Second, 300, 1000},
		{7 * time.Millisecond, 1_000, 0.7},
		{time.Microsecond, 100_000, 0.000001},
		{0, 100_000, 0},
		{time.Second, 0, 0},
	} {
		if got := per100k(tc.d, tc.tasks); got != tc.want {
			t.Errorf("per100k(%v, %d) = %v, want %v", tc.d, tc.tasks, got, tc.want)
		}
	}
}

func TestBenchCPUUse(t *testing.T) {
	used := cpuSample{total: 3 * time.Second, user: 2 * time.Second, sys: time.Second, gc: 500 * time.Millisecond}
	got := cpuUse(used, 50_000)
	want := CPUUse{
		Tasks: 50_000, Seconds: 3, UserSeconds: 2, SystemSeconds: 1, GCSeconds: 0.5,
		Per100kTasks: CPUPer100k{Seconds: 6, UserSeconds: 4, SystemSeconds: 2, GCSeconds: 1},
	}
	if got != want {
		t.Errorf("cpuUse = %+v, want %+v", got, want)
	}
}

// TestBenchCPUPhases runs small benchmarks against the embedded server and
// checks the CPU figures' presence and consistency (never their size).
func TestBenchCPUPhases(t *testing.T) {
	const tasks = 1000
	run := func(mode Mode) *Result {
		t.Helper()
		res, err := Run(context.Background(), Config{
			Tasks: tasks, PayloadBytes: 16, Submitters: 2, Batch: 50, Workers: 2, Concurrency: 32,
			LeaseBatch: 32, CompleteBatch: 32, Mode: mode, Queue: "cpu-" + string(mode), Fsync: wal.SyncNone,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(name string, u CPUUse, tasks int) {
		t.Helper()
		if u.Tasks != tasks {
			t.Errorf("%s: %d tasks, want %d", name, u.Tasks, tasks)
		}
		for _, v := range []float64{u.Seconds, u.UserSeconds, u.SystemSeconds, u.GCSeconds,
			u.Per100kTasks.Seconds, u.Per100kTasks.UserSeconds, u.Per100kTasks.SystemSeconds, u.Per100kTasks.GCSeconds} {
			if v < 0 || math.IsNaN(v) {
				t.Errorf("%s: negative or NaN figure in %+v", name, u)
			}
		}
		// Each figure is rounded on its own: allow a millisecond each.
		if d := u.Seconds - u.UserSeconds - u.SystemSeconds; math.Abs(d) > 0.002 {
			t.Errorf("%s: user + system differ from the total by %.3fs: %+v", name, d, u)
		}
		if u.Seconds == 0 {
			t.Errorf("%s: no CPU measured: %+v", name, u)
		}
	}

	seq := run(Sequential)
	if seq.CPU.Scope != cpuScopeProcess {
		t.Errorf("embedded run's CPU scope %q, want %q", seq.CPU.Scope, cpuScopeProcess)
	}
	check("run", seq.CPU.Run, tasks)
	if seq.CPU.Run.Seconds != seq.CPU.Seconds || seq.CPU.Run.GCSeconds != seq.CPU.GCSeconds {
		t.Errorf("run figures %+v disagree with cpu_seconds %.3f, gc_cpu_seconds %.3f", seq.CPU.Run, seq.CPU.Seconds, seq.CPU.GCSeconds)
	}
	if seq.CPU.Submit == nil || seq.CPU.LeaseComplete == nil {
		t.Fatalf("sequential run without phase figures: %+v", seq.CPU)
	}
	s, c, all := *seq.CPU.Submit, *seq.CPU.LeaseComplete, seq.CPU.Run
	check("submit", s, tasks)
	check("lease+complete", c, tasks)
	// The phases are contiguous and exclude the memory sample between them,
	// as the whole run does: they add up to it, but for rounding.
	for _, p := range []struct {
		name          string
		phases, whole float64
	}{
		{"cpu", s.Seconds + c.Seconds, all.Seconds},
		{"user", s.UserSeconds + c.UserSeconds, all.UserSeconds},
		{"system", s.SystemSeconds + c.SystemSeconds, all.SystemSeconds},
		{"gc", s.GCSeconds + c.GCSeconds, all.GCSeconds},
		{"cpu per 100k", s.Per100kTasks.Seconds + c.Per100kTasks.Seconds, all.Per100kTasks.Seconds},
	} {
		if math.Abs(p.phases-p.whole) > 0.002*100_000/tasks {
			t.Errorf("%s: phases add up to %.6f, the whole run is %.6f", p.name, p.phases, p.whole)
		}
	}

	// Against another server (here an embedded node started beside the
	// run, reached by its address) the figures are the bench's own.
	srvCfg := Config{Tasks: 1, PayloadBytes: 1, Submitters: 1, Batch: 1, Workers: 1, Concurrency: 1, LeaseBatch: 1, CompleteBatch: 1, Queue: "unused", Fsync: wal.SyncNone}
	if err := srvCfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := startTarget(context.Background(), srvCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	remote, err := Run(context.Background(), Config{
		Tasks: tasks, PayloadBytes: 16, Submitters: 2, Batch: 50, Workers: 2, Concurrency: 32,
		LeaseBatch: 32, CompleteBatch: 32, Queue: "cpu-remote", Addr: srv.urls[0],
	})
	if err != nil {
		t.Fatal(err)
	}
	if remote.CPU.Scope != cpuScopeClient || remote.CPU.Submit == nil {
		t.Errorf("remote run's CPU: scope %q, submit phase %v; want %q and the phases", remote.CPU.Scope, remote.CPU.Submit, cpuScopeClient)
	}
	var text strings.Builder
	if err := remote.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "CPU per task:") || !strings.Contains(text.String(), "not the server") {
		t.Errorf("remote run's summary does not say whose CPU it counts:\n%s", text.String())
	}

	conc := run(Concurrent)
	check("concurrent run", conc.CPU.Run, tasks)
	if conc.CPU.Submit != nil || conc.CPU.LeaseComplete != nil {
		t.Errorf("concurrent run reports phase figures of overlapping phases: %+v", conc.CPU)
	}
}
