package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/bench"
	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

// TestBenchJSON runs small benchmarks in-process against the embedded
// server and checks the summary's shape and counts (never its timings).
func TestBenchJSON(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tasks int
		extra []string
	}{
		{"sequential", 2000, nil},
		// The variations are smaller and skip fsync and most probes, to
		// stay quick under the race detector.
		{"concurrent-runtime", 500, []string{"--mode", "concurrent", "--runtime", "--batch", "10", "--probe-rounds", "3", "--fsync", "none"}},
		{"grpc", 500, []string{"--protocol", "grpc", "--probe-rounds", "3", "--lease-batch", "8", "--fsync", "none"}},
		{"single-complete", 300, []string{"--complete-batch", "1", "--probe-rounds", "3", "--fsync", "none"}},
		{"separate-lease", 300, []string{"--separate-lease", "--lease-batch", "8", "--probe-rounds", "3", "--fsync", "none"}},
		// The runtime's completions are counted from the CompleteBatch
		// answers, decoded per protocol.
		{"runtime-grpc", 300, []string{"--runtime", "--protocol", "grpc", "--probe-rounds", "3", "--fsync", "none"}},
		{"runtime-json", 300, []string{"--runtime", "--protocol", "json", "--complete-batch", "7", "--probe-rounds", "3", "--fsync", "none"}},
		// Over TLS: HTTP/2 for gRPC, and the runtime's answers decoded
		// as over plain HTTP.
		{"tls-grpc", 300, []string{"--tls", "--protocol", "grpc", "--probe-rounds", "3", "--fsync", "none"}},
		{"tls-runtime-json", 300, []string{"--tls", "--runtime", "--protocol", "json", "--probe-rounds", "3", "--fsync", "none"}},
		// Event streams follow the run: each reads every record of it.
		{"watchers", 300, []string{"--watchers", "3", "--probe-rounds", "3", "--fsync", "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks := tc.tasks
			args := append([]string{"bench", "--tasks", strconv.Itoa(tasks), "--json", "--quiet"}, tc.extra...)
			var out, errb bytes.Buffer
			if code := run(context.Background(), args, &out, &errb); code != 0 {
				t.Fatalf("tenure %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errb.String())
			}
			if errb.Len() != 0 {
				t.Errorf("--quiet run wrote to stderr: %s", errb.String())
			}
			if n := bytes.Count(bytes.TrimSpace(out.Bytes()), []byte("\n")); n != 0 {
				t.Errorf("--json printed %d lines, want one object on one line", n+1)
			}

			var keys map[string]json.RawMessage
			if err := json.Unmarshal(out.Bytes(), &keys); err != nil {
				t.Fatalf("output is not a JSON object: %v\n%s", err, out.String())
			}
			for _, k := range []string{"config", "submitted", "completed", "submitted_per_sec", "completed_per_sec",
				"end_to_end_per_sec", "submit_call", "submit_per_task", "lease_call", "lease_to_complete",
				"probe", "wal", "memory", "cpu", "targets"} {
				if _, ok := keys[k]; !ok {
					t.Errorf("summary has no %q key", k)
				}
			}

			var res bench.Result
			dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&res); err != nil {
				t.Fatalf("decoding the summary: %v", err)
			}
			if ci := res.Config.CommitIntervalMs; ci == nil || *ci != 1 {
				t.Errorf("config says commit interval %v ms for the embedded server; want the default, 1", ci)
			}
			if res.Config.TLS != slices.Contains(tc.extra, "--tls") {
				t.Errorf("config says TLS %v, with flags %q", res.Config.TLS, tc.extra)
			}
			if res.Config.Tasks != tasks || res.Submitted != tasks || res.Completed != tasks {
				t.Errorf("tasks %d, submitted %d, completed %d; want %d each", res.Config.Tasks, res.Submitted, res.Completed, tasks)
			}
			wantCalls := (tasks + res.Config.Batch - 1) / res.Config.Batch
			if res.SubmitCall.Count != wantCalls || res.SubmitPerTask.Count != wantCalls {
				t.Errorf("%d submit calls recorded (%d per task), want %d", res.SubmitCall.Count, res.SubmitPerTask.Count, wantCalls)
			}
			if res.Config.Runtime {
				if res.LeaseToComplete != nil || res.LeaseCall != nil {
					t.Errorf("worker runtime run reports per-call lease figures it cannot measure")
				}
			} else if res.LeaseToComplete == nil || res.LeaseToComplete.Count != tasks {
				t.Errorf("lease→complete recorded for %v tasks, want %d", res.LeaseToComplete, tasks)
			}
			// The raw loop leases again in its CompleteBatch calls, unless
			// told not to or completing one task per call: surely so when
			// more tasks wait than its workers hold at once.
			if c := res.Config; !c.Runtime {
				carries := !c.SeparateLease && c.CompleteBatch > 1
				switch {
				case res.LeasesCarried == nil:
					t.Errorf("leases carried by CompleteBatch calls not reported")
				case !carries && *res.LeasesCarried != 0:
					t.Errorf("%d leases carried by CompleteBatch calls, want none", *res.LeasesCarried)
				case carries && tasks > c.Workers*c.Concurrency && *res.LeasesCarried == 0:
					t.Errorf("no lease carried by a CompleteBatch call, with %d tasks for %d × %d slots", tasks, c.Workers, c.Concurrency)
				}
			}
			// Every task is at least created, leased and completed.
			if res.WAL == nil || res.WAL.Records < uint64(3*tasks) || (res.WAL.Fsyncs == 0) != (res.Config.Fsync == "none") {
				t.Errorf("WAL figures %+v with fsync %s: want at least %d records, and fsyncs unless fsync is none", res.WAL, res.Config.Fsync, 3*tasks)
			}
			if res.Probe == nil || res.Probe.Submit.Count == 0 || res.Probe.Handoff.Count != res.Probe.Submit.Count || res.Probe.DiskFsync == nil {
				t.Errorf("probe figures incomplete: %+v", res.Probe)
			}
			if res.Memory.PeakRSSBytes == 0 {
				t.Errorf("peak RSS not measured")
			}
			if seq := res.Config.Mode == bench.Sequential; seq != (res.Memory.RSSPerTaskBeyondPayload != nil) {
				t.Errorf("mode %s: per-task memory %v (measured only in sequential mode)", res.Config.Mode, res.Memory.RSSPerTaskBeyondPayload)
			}
			if res.CPU.Run.Tasks != tasks || res.CPU.Run.Per100kTasks.Seconds <= 0 || res.CPU.Scope == "" {
				t.Errorf("CPU per task not reported: %+v", res.CPU)
			}
			if seq := res.Config.Mode == bench.Sequential; seq != (res.CPU.Submit != nil && res.CPU.LeaseComplete != nil) {
				t.Errorf("mode %s: CPU phases %v, %v (reported only in sequential mode)", res.Config.Mode, res.CPU.Submit, res.CPU.LeaseComplete)
			}
			if w := res.Watchers; slices.Contains(tc.extra, "--watchers") {
				if w == nil || w.Count != 3 || len(w.EventsEach) != 3 || w.CPUPer100kTasks <= 0 {
					t.Errorf("the event streams' figures: %+v", w)
				} else {
					for i, n := range w.EventsEach {
						if res.WAL == nil || uint64(n) != res.WAL.Records {
							t.Errorf("event stream %d read %d events; the run wrote %v records", i, n, res.WAL)
						}
					}
				}
			} else if w != nil {
				t.Errorf("event streams' figures %+v without --watchers", w)
			}
			if len(res.Targets) != 5 {
				t.Errorf("%d targets evaluated, want 5", len(res.Targets))
			}
		})
	}
}

// TestBenchText checks that the human summary names every section.
func TestBenchText(t *testing.T) {
	out := mustCLI(t, "bench", "--tasks", "300", "--quiet", "--probe-rounds", "2", "--fsync", "none", "--seed", "7", "--queue", "text-check")
	for _, want := range []string{"queue default/text-check, seed 7", "submitted", "completed", "lease→complete", "long-poll handoff", "CPU per task:", "CPU-s per 100k tasks", "WAL (main run)", "peak RSS", "targets"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	t.Parallel()
	ca, err := certgen.NewCA("ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := certgen.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tasks", "0"}, "--tasks 0 is outside 1..10000000"},
		{[]string{"--tasks", "-5"}, "--tasks -5 is outside"},
		{[]string{"--payload-bytes", "-1"}, "--payload-bytes -1 is outside"},
		{[]string{"--batch", "1001"}, "--batch 1001 is outside 1..1000"},
		{[]string{"--submitters", "0"}, "--submitters 0 is outside"},
		{[]string{"--workers", "0"}, "--workers 0 is outside"},
		{[]string{"--concurrency", "0"}, "--concurrency 0 is outside"},
		{[]string{"--lease-batch", "128"}, "--lease-batch 128 is above --concurrency 64"},
		{[]string{"--probe-rounds", "-1"}, "--probe-rounds -1 is outside"},
		{[]string{"--mode", "both"}, `--mode "both": use sequential or concurrent`},
		{[]string{"--protocol", "http3"}, `--protocol "http3"`},
		{[]string{"--fsync", "sometimes"}, "sometimes"},
		{[]string{"--addr", "127.0.0.1:1", "--fsync", "none"}, "--fsync is for the embedded server"},
		{[]string{"--addr", "127.0.0.1:1", "--commit-interval", "2ms"}, "--commit-interval is for the embedded server"},
		{[]string{"--cluster", "3", "--mysql", "root@tcp(127.0.0.1:1)/x", "--commit-interval", "2ms"}, "--commit-interval is for the embedded server; cluster nodes log to the database"},
		{[]string{"--commit-interval", "101ms"}, "--commit-interval 101ms is outside 0..100ms"},
		{[]string{"--commit-interval", "-1ms"}, "--commit-interval -1ms is outside 0..100ms"},
		{[]string{"--addr", "127.0.0.1:1", "--data-dir", "/tmp/x"}, "--data-dir is for the embedded server"},
		{[]string{"--addr", "127.0.0.1:1", "--tls"}, "--tls is for the embedded server"},
		{[]string{"--ca-file", caFile}, "--ca-file, --cert-file and --key-file are for an https:// --addr"},
		{[]string{"--addr", "127.0.0.1:1", "--cert-file", caFile}, "--cert-file and --key-file go together"},
		{[]string{"--queue", strings.Repeat("q", 201)}, "--queue is 201 bytes"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--rate", "100"}, "--rate is for an open-loop run: give --duration"},
		{[]string{"--plot", "x.svg"}, "--plot is for an open-loop run"},
		{[]string{"--duration", "10s", "--mode", "concurrent"}, "--mode is for closed-loop runs"},
		{[]string{"--duration", "10s", "--rate", "100", "--tasks", "5"}, "--tasks is for closed-loop runs"},
		{[]string{"--duration", "10s"}, "--rate 0 is outside"},
		{[]string{"--duration", "500ms", "--rate", "10"}, "--duration 500ms is outside 1s..24h0m0s"},
		{[]string{"--duration", "10s", "--rate", "10", "--runtime"}, "--runtime cannot run open loop"},
		{[]string{"--duration", "10s", "--rate", "10", "--payload-bytes", "4"}, "--payload-bytes 4 is under 8"},
		{[]string{"--duration", "10s", "--rate", "10", "--window", "100ms"}, "--window 100ms is under 1s"},
		{[]string{"--duration", "1h", "--rate", "10", "--window", "1s"}, "makes 3600 windows"},
		{[]string{"--duration", "10s", "--rate", "10", "--tick", "5s"}, "--tick 5s is outside"},
		{[]string{"--duration", "10s", "--rate", "10", "--max-backlog", "-1s"}, "--max-backlog -1s is negative"},
		{[]string{"--duration", "24h", "--rate", "1e6", "--window", "1h"}, "makes 86400000000 tasks"},
		{[]string{"--addr", "127.0.0.1:1", "--retention", "10s"}, "--retention, --snapshot-every and --snapshot-every-records are for the embedded server"},
		{[]string{"--retention", "10ms"}, "--retention 10ms is under 1s"},
		{[]string{"--snapshot-every", "10ms"}, "--snapshot-every 10ms is under 1s"},
	} {
		usageRefused(t, append([]string{"bench"}, tc.args...), tc.want)
	}
}

// TestBenchOpenLoop is the smoke test of an open-loop run against the
// embedded server, with retention and snapshots on: it checks the counts,
// the windows, the samples and the plot (never a timing).
func TestBenchOpenLoop(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "run.svg")
	args := []string{"bench", "--duration", "3s", "--rate", "200", "--window", "1s", "--json", "--quiet",
		"--probe-rounds", "2", "--fsync", "none", "--retention", "1s", "--snapshot-every", "1s", "--plot", plot}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("tenure %s: exit %d\nstderr: %s", strings.Join(args, " "), code, errb.String())
	}
	var res bench.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, out.String())
	}
	ol := res.OpenLoop
	if ol == nil {
		t.Fatalf("no open_loop figures:\n%s", out.String())
	}
	if res.Config.Mode != bench.OpenLoop || res.Config.Tasks != 600 || ol.Due != 600 || res.Submitted != 600 || res.Completed != 600 {
		t.Errorf("mode %s, %d tasks, %d due, %d submitted, %d completed; want open-loop and 600 of each", res.Config.Mode, res.Config.Tasks, ol.Due, res.Submitted, res.Completed)
	}
	if ol.StoppedAtSeconds != nil || ol.Latency.Count != 600 || ol.SubmitLag.Count != 600 {
		t.Errorf("stopped at %v, %d latencies, %d lags; want a whole run of 600", ol.StoppedAtSeconds, ol.Latency.Count, ol.SubmitLag.Count)
	}
	if res.Config.RetentionSeconds == nil || *res.Config.RetentionSeconds != 1 || *res.Config.SnapshotEverySeconds != 1 {
		t.Errorf("retention %v, snapshot every %v; want 1s and 1s", res.Config.RetentionSeconds, res.Config.SnapshotEverySeconds)
	}
	if len(ol.Windows) != 3 {
		t.Fatalf("%d windows, want 3", len(ol.Windows))
	}
	submitted, completed := 0, 0
	for i, w := range ol.Windows {
		submitted += w.Submitted
		completed += w.Completed
		if w.StartSeconds != float64(i) || w.End.RSSBytes == 0 || w.End.WALBytes == nil || w.End.SnapshotBytes == nil || w.End.ServerRSSBytes != nil {
			t.Errorf("window %d: %+v", i, w)
		}
	}
	if submitted != 600 || completed != 600 {
		t.Errorf("windows hold %d submitted, %d completed; want 600", submitted, completed)
	}
	if keys := strings.Count(out.String(), `"open_loop"`); keys != 1 {
		t.Errorf("open_loop appears %d times", keys)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg ")) || bytes.Count(svg, []byte(`class="panel"`)) != 3 {
		t.Errorf("--plot wrote no three-panel SVG:\n%s", svg)
	}

	// The text summary has the per-window table.
	text := mustCLI(t, "bench", "--duration", "1s", "--rate", "50", "--window", "1s", "--quiet", "--probe-rounds", "1", "--fsync", "none")
	for _, want := range []string{"open loop, 50 tasks/s", "timetable: 50 tasks due", "due→completed", "per window", "0-1"} {
		if !strings.Contains(text, want) {
			t.Errorf("text summary without %q:\n%s", want, text)
		}
	}
}

// TestBenchCluster runs `tenure bench --cluster 3` on a fresh database:
// three cluster nodes in-process, clients spread over them, every task
// completed.
func TestBenchCluster(t *testing.T) {
	dsn := clustertest.NewDatabase(t)
	const tasks = 600
	args := []string{"bench", "--cluster", "3", "--mysql", dsn, "--partitions", "4", "--tasks", strconv.Itoa(tasks),
		"--probe-rounds", "3", "--json", "--quiet"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("tenure bench --cluster: exit %d\nstderr: %s", code, errb.String())
	}
	var res bench.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not the JSON summary: %v\n%s", err, out.String())
	}
	if res.Submitted != tasks || res.Completed != tasks {
		t.Fatalf("submitted %d, completed %d; want %d each", res.Submitted, res.Completed, tasks)
	}
	if !strings.HasPrefix(res.Config.Target, "cluster of 3 nodes") || res.Config.Fsync != "database commit" {
		t.Fatalf("target %q (fsync %q), want a 3-node cluster", res.Config.Target, res.Config.Fsync)
	}
	for _, bad := range [][]string{
		{"bench", "--cluster", "3"},
		{"bench", "--cluster", "3", "--mysql", dsn, "--addr", "http://x"},
		{"bench", "--mysql", dsn},
		{"bench", "--addr", "http://a,,http://b"},
	} {
		var o, e bytes.Buffer
		if code := run(context.Background(), bad, &o, &e); code != 2 {
			t.Errorf("tenure %s: exit %d, want 2 (usage)\n%s", strings.Join(bad, " "), code, e.String())
		}
	}
}
