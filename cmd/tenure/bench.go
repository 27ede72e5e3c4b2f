package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/bench"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/wal"
)

// benchCmd is `tenure bench`.
type benchCmd struct {
	cfg          bench.Config
	mode         string
	addr         string
	fsync        string
	json         bool
	quiet        bool
	cpuProfile   string
	mutexProfile string
	allocProfile string
	memProfile   string
	plot         string
	tls          tlsClientFlags
}

func (*benchCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "measure throughput, latency and memory of a server under load",
		Long: `Start a server on a temporary data directory (or load --addr, or a
--cluster of nodes started in this process on --mysql), submit --tasks
tasks, work them off, and report rates, latency percentiles, fsyncs and
memory per task.`,
	}
}

func (c *benchCmd) define(fs *pflag.FlagSet) {
	cfg := &c.cfg
	fs.IntVar(&cfg.Tasks, "tasks", bench.DefaultTasks, "tasks to submit, lease and complete")
	fs.IntVar(&cfg.PayloadBytes, "payload-bytes", bench.DefaultPayloadBytes, "payload size of each task")
	fs.IntVar(&cfg.Submitters, "submitters", bench.DefaultSubmitters, "goroutines submitting at once (sharing one client)")
	fs.IntVar(&cfg.Batch, "batch", bench.DefaultBatch, "tasks per SubmitBatch call; 1 uses single Submit calls")
	fs.IntVar(&cfg.Workers, "workers", bench.DefaultWorkers, "worker loops, each with its own client and connections")
	fs.IntVar(&cfg.Concurrency, "concurrency", bench.DefaultConcurrency, "tasks each worker holds at once (leased, completion not yet acknowledged)")
	fs.IntVar(&cfg.LeaseBatch, "lease-batch", bench.DefaultLeaseBatch, "most tasks one lease asks for (at most --concurrency): each worker runs lanes of this many tasks, as many as --concurrency holds")
	fs.IntVar(&cfg.CompleteBatch, "complete-batch", bench.DefaultCompleteBatch, "most completions per CompleteBatch call (the worker runtime coalesces up to this many); 1: one Complete call per task")
	fs.BoolVar(&cfg.SeparateLease, "separate-lease", false, "raw loop: lease only with Lease calls, not also in the CompleteBatch call that completes the tasks before (client.CompleteBatch with a Lease)")
	fs.BoolVar(&cfg.Typed, "typed", false, "with --runtime: submit typed tasks (a number and a string of --payload-bytes, JSON), which the worker decodes for a typed no-op handler")
	fs.IntVar(&cfg.Keys, "keys", 0, "give the tasks keys: task i the key key-<i mod N> (0: no keys)")
	fs.IntVar(&cfg.BigKeyTasks, "big-key-tasks", 0, "with --keys: the first N of --tasks have one key of their own, submitted before the others; reports the wait (submit to lease) of the big key's tasks and the small keys' apart")
	fs.BoolVar(&cfg.Fair, "fair", false, "set fair leasing across the keys on the queue before the run")
	fs.IntVar(&cfg.Watchers, "watchers", 0, "event streams (WatchEvents) that follow every event of the log through the run, each with its own client: reports when they caught up and the CPU until then (embedded server only)")
	fs.BoolVar(&cfg.Runtime, "runtime", false, "run the workers with the worker package and a no-op handler instead of the raw Lease/Complete loop")
	fs.StringVar(&c.mode, "mode", string(bench.Sequential), "sequential (submit all, then work all off) or concurrent (submitters and workers at once); --duration runs open loop instead")
	fs.DurationVar(&cfg.Duration, "duration", 0, "run open loop for this long (e.g. 10m): submit at --rate whatever the workers do, and report each --window")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: tasks due per second (with --duration)")
	fs.DurationVar(&cfg.Tick, "tick", bench.DefaultTick, "open loop: how often the timetable is checked; the tasks due since go out together, in calls of at most --batch")
	fs.DurationVar(&cfg.Window, "window", bench.DefaultWindow, "open loop: the interval of each row of figures (latency, rate, memory, disk)")
	fs.DurationVar(&cfg.MaxBacklog, "max-backlog", bench.DefaultMaxBacklog, "open loop: stop submitting (and report it) when the tasks submitted but not completed exceed this many seconds of --rate")
	fs.StringVar(&c.plot, "plot", "", "open loop: write an SVG plot of latency, memory and disk over the run to this file")
	fs.DurationVar(&cfg.Snapshots.Retention, "retention", 0, "embedded server or --cluster: completed tasks leave the state at the first purge after they are this old (default: the server's, 168h)")
	fs.DurationVar(&cfg.Snapshots.Every, "snapshot-every", 0, "embedded server or --cluster: a snapshot this long after the last one (default: the server's, 10m)")
	fs.Uint64Var(&cfg.Snapshots.EveryRecords, "snapshot-every-records", 0, "embedded server or --cluster: a snapshot after this many records (default: the server's, 1000000)")
	fs.StringVar(&c.addr, "addr", "", "load this running server, or these cluster nodes separated by commas (e.g. http://127.0.0.1:7070); empty: start an embedded server on a loopback port")
	fs.IntVar(&cfg.Cluster, "cluster", 0, "start this many cluster-mode nodes in this process on --mysql (a fresh database is best) and load them all")
	fs.StringVar(&cfg.MySQL, "mysql", "", "cluster database DSN for --cluster, e.g. root@tcp(127.0.0.1:3306)/tenure_bench")
	fs.IntVar(&cfg.Partitions, "partitions", 8, "partitions of the bench queue in a --cluster run")
	fs.StringVar(&cfg.Protocol, "protocol", "connect", "client protocol: connect, grpc or json")
	fs.BoolVar(&cfg.TLS, "tls", false, "serve the embedded server over TLS (HTTP/2 and HTTP/1.1), as tenure server --tls-cert does, with a certificate made for the run")
	c.tls.add(fs)
	// Not envOr: help would print the token as the flag's default.
	fs.StringVar(&cfg.Token, "token", "", "bearer token for an --addr server started with --auth-file (default: env TENURE_TOKEN)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the payloads and of the default queue name")
	fs.StringVar(&cfg.Namespace, "namespace", "default", "namespace of the tasks")
	fs.StringVar(&cfg.Queue, "queue", "", `queue of the tasks (default "bench-<seed>-<time>", unique per run)`)
	fs.StringVar(&c.fsync, "fsync", "always", "embedded server's WAL fsync policy: always or none")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", wal.DefaultCommitInterval, "embedded server's "+commitIntervalHelp)
	fs.StringVar(&cfg.DataDir, "data-dir", "", "embedded server's data directory, kept afterwards (default: a temporary directory, removed)")
	fs.IntVar(&cfg.ProbeRounds, "probe-rounds", bench.DefaultProbeRounds, "rounds of each no-load single-operation probe before the run (0: skip)")
	fs.BoolVar(&c.json, "json", false, "print the summary as one JSON object")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines on stderr")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the whole run to this file")
	fs.StringVar(&c.mutexProfile, "mutexprofile", "", "write a pprof mutex contention profile of the whole run to this file")
	fs.StringVar(&c.allocProfile, "allocprofile", "", "write a pprof profile of the whole run's allocations (alloc_space, alloc_objects) to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a pprof heap profile to this file, taken when every task is submitted and waiting (sequential mode)")
}

// embeddedOnly are the flags of the embedded server's WAL, refused with
// --addr and --cluster.
var embeddedOnly = []string{"fsync", "commit-interval"}

func (*benchCmd) choices() map[string][]string {
	return map[string][]string{
		"mode":     {string(bench.Sequential), string(bench.Concurrent)},
		"protocol": {"connect", "grpc", "json"},
		"fsync":    {"always", "none"},
	}
}

func (c *benchCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, _ []string) error {
	stdout, stderr := a.stdout, a.stderr
	cfg := c.cfg
	cfg.Mode = bench.Mode(c.mode)
	if fs.Changed("duration") {
		if fs.Changed("mode") {
			return usageError{"--mode is for closed-loop runs; --duration runs open loop"}
		}
		if fs.Changed("tasks") {
			return usageError{"--tasks is for closed-loop runs; an open-loop run submits --rate × --duration tasks"}
		}
		cfg.Mode = bench.OpenLoop
	} else {
		for _, f := range []string{"rate", "tick", "window", "max-backlog", "plot"} {
			if fs.Changed(f) {
				return usageError{fmt.Sprintf("--%s is for an open-loop run: give --duration", f)}
			}
		}
	}
	policy, err := wal.ParseSyncPolicy(c.fsync)
	if err != nil {
		return usageError{err.Error()}
	}
	cfg.Fsync = policy
	// The nodes it starts have the memory budget `tenure server` has by
	// default (not its soft memory limit, which would change how the
	// collector runs in a process that holds the clients too).
	cfg.Memory = func() *coordinator.MemoryBudget {
		budget, _ := defaultMemoryBudget()
		return coordinator.NewMemoryBudget(budget, cfg.Snapshots.PurgeInterval())
	}
	if c.addr != "" {
		urls := strings.Split(c.addr, ",")
		for i, u := range urls {
			if u != "" && !strings.Contains(u, "://") {
				urls[i] = "http://" + u
				if c.tls.on() {
					urls[i] = "https://" + u
				}
			}
		}
		cfg.Addr = strings.Join(urls, ",")
		for _, name := range embeddedOnly {
			if fs.Changed(name) {
				return usageError{fmt.Sprintf("--%s is for the embedded server; a running server keeps its own", name)}
			}
		}
	}
	cfg.Token = cmp.Or(cfg.Token, os.Getenv("TENURE_TOKEN"))
	if cfg.ClientTLS, err = c.tls.config(); err != nil {
		return err
	}
	for _, name := range embeddedOnly {
		if cfg.Cluster > 0 && fs.Changed(name) {
			return usageError{fmt.Sprintf("--%s is for the embedded server; cluster nodes log to the database, durable when it commits", name)}
		}
	}
	if err := checkCommitInterval(cfg.CommitInterval); err != nil {
		return err
	}
	if cfg.Queue == "" {
		cfg.Queue = fmt.Sprintf("bench-%d-%s", cfg.Seed, a.clock.Now().UTC().Format("20060102T150405.000000"))
	}
	if !c.quiet {
		cfg.Progress = stderr
	}
	cfg.Logger = stderr
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}

	if c.memProfile != "" {
		if cfg.Mode != bench.Sequential {
			return usageError{"--memprofile needs --mode sequential: it is taken when every task is waiting"}
		}
		f, err := os.Create(c.memProfile)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer f.Close()
		cfg.HeapProfile = f
		runtime.MemProfileRate = 4096 // finer than the default, for per-task structures
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if c.mutexProfile != "" {
		prev := runtime.SetMutexProfileFraction(5)
		defer runtime.SetMutexProfileFraction(prev)
		defer writeProfile(stderr, "mutex", c.mutexProfile)
	}
	if c.allocProfile != "" {
		defer writeProfile(stderr, "allocs", c.allocProfile)
	}

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if c.plot != "" {
		if err := writePlot(c.plot, res); err != nil {
			return err
		}
	}
	if c.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	return res.WriteText(stdout)
}

// writeProfile writes the named runtime profile to path, reporting a
// failure on stderr (the run's figures are still good).
func writeProfile(stderr io.Writer, name, path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "tenure bench: writing the %s profile: %v\n", name, err)
	}
}

// writePlot writes res's open-loop plot to path.
func writePlot(path string, res *bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	err = res.OpenLoop.WritePlot(f, res.PlotTitle())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
