package bench

import (
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/wal"
	"github.com/tenurehq/tenure/sdk/client"
)

// Mode says whether submission and work overlap.
type Mode string

const (
	// Sequential submits every task first, then leases and completes them
	// all: two clean, separate figures (and the memory of all tasks alive
	// at once).
	Sequential Mode = "sequential"
	// Concurrent runs submitters and workers at the same time, as a
	// production queue under steady load.
	Concurrent Mode = "concurrent"
	// OpenLoop submits at a fixed rate for a fixed duration, whatever the
	// workers do (Config.Duration and Config.Rate), with workers running
	// as in Concurrent: the latency of each task counts from when it was
	// due, so queueing shows.
	OpenLoop Mode = "open-loop"
)

// Limits of the configuration. They follow the server's default limits
// where one applies (a SubmitBatch and a Lease take at most 1000 tasks, a
// payload at most 1 MiB).
const (
	MaxTasks         = 10_000_000
	MaxPayloadBytes  = 1 << 20
	MaxSubmitters    = 1024
	MaxBatch         = 1000
	MaxWorkers       = 1024
	MaxConcurrency   = 10_000
	MaxLeaseBatch    = 1000
	MaxCompleteBatch = 1000
	MaxProbeRounds   = 100_000
	// MaxOpenLoopTasks bounds the tasks due in an open-loop run (the run
	// keeps no per-task figure, so only the log and the state grow).
	MaxOpenLoopTasks = 1_000_000_000
	MaxRate          = 10_000_000
	MaxDuration      = 24 * time.Hour
	MaxWindows       = 1000
	// maxQueueBytes leaves room for the probe queues' suffixes within the
	// server's 256-byte limit on identifiers.
	maxQueueBytes = 200
)

// Defaults of the configuration.
const (
	DefaultTasks         = 100_000
	DefaultPayloadBytes  = 64
	DefaultSubmitters    = 16
	DefaultBatch         = 100
	DefaultWorkers       = 8
	DefaultConcurrency   = 64
	DefaultLeaseBatch    = 64
	DefaultCompleteBatch = 64
	DefaultProbeRounds   = 200
	DefaultTick          = time.Millisecond
	DefaultWindow        = time.Minute
	DefaultMaxBacklog    = 30 * time.Second
)

// minOpenLoopPayload is the smallest payload of an open-loop run: a task's
// first 8 bytes carry its number, from which a worker knows when it was
// due.
const minOpenLoopPayload = 8

// Config describes one benchmark run. Validate it with Validate (Run does).
type Config struct {
	// Tasks is the number of tasks submitted and completed in the main run.
	Tasks int
	// PayloadBytes is the size of each task's payload.
	PayloadBytes int
	// Submitters is the number of goroutines submitting at once; they share
	// one client, as an application would.
	Submitters int
	// Batch is the number of tasks per SubmitBatch call; 1 uses single
	// Submit calls.
	Batch int
	// Workers is the number of worker loops, each with its own client (and
	// so its own connections).
	Workers int
	// Concurrency is the number of tasks one worker holds at once (leased,
	// not yet acknowledged as completed).
	Concurrency int
	// LeaseBatch is the most tasks one lease asks for (at most
	// Concurrency): the raw loop runs lanes of LeaseBatch tasks, as many as
	// Concurrency holds (the last one smaller), each leasing for its size.
	// Ignored with Runtime, whose worker chooses for itself.
	LeaseBatch int
	// CompleteBatch is the most completions one CompleteBatch call carries:
	// the raw loop completes each Lease answer in calls of up to this many
	// tasks, the worker runtime coalesces up to this many. 1 uses one
	// Complete call per task instead.
	CompleteBatch int
	// SeparateLease makes the raw loop lease only with Lease calls. By
	// default, while leases come back full, the CompleteBatch calls that
	// complete a lane's batch also lease its next one
	// (client.CompleteAndLease); a short lease sends the lane back to
	// long-polling with Lease. Not with CompleteBatch 1 (single Complete
	// calls) or Runtime.
	SeparateLease bool
	// Runtime runs the workers with the worker package and a no-op handler
	// instead of the raw Lease/Complete loop.
	Runtime bool
	// Typed (with Runtime) submits typed tasks (SubmitRequest.Args: a
	// number and a string of PayloadBytes, JSON-encoded by the client),
	// which the worker decodes into their type for a typed no-op handler
	// (worker.Handle): what a typed task costs beside the raw []byte path.
	Typed bool
	// Keys, if positive, gives the tasks keys (docs/design/keys.md): task
	// i (past the BigKeyTasks first) the key "key-<i mod Keys>".
	Keys int
	// BigKeyTasks (with Keys) gives the first BigKeyTasks tasks one key of
	// their own, "big", submitted before the others: one key's backlog
	// beside Keys small ones. The run then reports each task's wait, from
	// its acknowledged submit to its lease, for the big key and the small
	// ones apart (KeyWaits).
	BigKeyTasks int
	// Fair sets fair leasing across the keys on the queue before the run
	// (SetQueueLimits).
	Fair bool
	// Watchers is the number of event streams (WatchEvents) that follow
	// every event of the log through the main run, each with a client of
	// its own: what the streams cost the server (and, in this one process,
	// their readers). The embedded server only.
	Watchers int
	// Mode is Sequential (default), Concurrent or OpenLoop (the default
	// when Duration is set).
	Mode Mode
	// Duration and Rate describe an open-loop run: task i is due Duration
	// i/Rate seconds after the start, for every i that falls within
	// Duration, and is submitted when due, whatever the workers do. Tasks
	// is then the number of tasks due (Validate sets it).
	Duration time.Duration
	Rate     float64
	// Tick is how often an open-loop run checks its timetable: the tasks
	// due since the last check go out together, in calls of at most Batch
	// (default 1ms; a task may wait up to a tick before its call starts,
	// and that wait counts in its latency).
	Tick time.Duration
	// Window is the length of each interval an open-loop run reports
	// figures for (default 1 minute); the last one also holds the drain,
	// the completions after the timetable's end.
	Window time.Duration
	// MaxBacklog stops an open-loop run's timetable when the tasks
	// submitted but not yet completed exceed MaxBacklog × Rate (default
	// 30s): a server that does not keep up would otherwise pile up tasks,
	// and memory, without bound. The run then drains and reports what it
	// measured, saying when and why it stopped.
	MaxBacklog time.Duration
	// Snapshots is the snapshot schedule and retention of the embedded node
	// or of the started cluster's nodes (zero fields: the server's
	// defaults). A long run needs a short retention to keep its memory and
	// disk flat: completed tasks leave the state, and the log below the
	// kept snapshots is deleted, only at a snapshot.
	Snapshots host.Schedule
	// Memory is the memory budget of the embedded node or of each of the
	// started cluster's nodes, as `tenure server` has one, so that the run
	// pays for its accounting (nil: none).
	Memory func() *coordinator.MemoryBudget
	// Addr is the server to load ("http://host:port"), or several nodes of
	// one cluster separated by commas (clients are spread over them).
	// Empty: start an embedded node (or, with Cluster, a cluster) on
	// loopback ports.
	Addr string
	// Cluster, if positive, starts that many cluster-mode nodes in this
	// process on the database MySQL names (a fresh database is best: its
	// tables are created if missing) instead of an embedded node.
	Cluster int
	// MySQL is the cluster database's DSN, for Cluster.
	MySQL string
	// Partitions is the partition count of the bench queue in a started
	// cluster (default 8).
	Partitions int
	// TLS serves the embedded node over TLS (HTTP/2 and HTTP/1.1 by ALPN),
	// as `tenure server --tls-cert` serves, with a certificate made for the
	// run, which the clients trust.
	TLS bool
	// ClientTLS is the clients' TLS configuration for https:// nodes in Addr
	// (nil: the system's roots, no client certificate).
	ClientTLS *tls.Config
	// Token is the bearer token the clients send, for --addr servers
	// started with --auth-file.
	Token string
	// Protocol is the client's protocol: connect (default), grpc or json.
	Protocol string
	// Seed makes the payloads (and the default queue name) reproducible.
	Seed uint64
	// Namespace of the tasks (default "default").
	Namespace string
	// Queue of the tasks; required. Request ids are derived from it, so a
	// second run must use another queue (cmd/tenure makes a unique one).
	Queue string
	// Fsync is the embedded node's WAL policy (default always).
	Fsync wal.SyncPolicy
	// CommitInterval is the embedded node's least time between two WAL
	// fsyncs (wal.Options.CommitInterval; 0: none).
	CommitInterval time.Duration
	// DataDir is the embedded node's data directory. Empty: a temporary
	// directory, removed afterwards. A given directory is kept.
	DataDir string
	// ProbeRounds is the number of rounds of each no-load single-operation
	// measurement taken before the main run (0: skip them).
	ProbeRounds int
	// Progress receives one line per ProgressEvery while the run goes on;
	// nil for none.
	Progress io.Writer
	// ProgressEvery is the interval between progress lines (default 1s).
	ProgressEvery time.Duration
	// HeapProfile, when set, receives a pprof heap profile taken right
	// after the post-submission memory sample of a sequential run: the live
	// heap with every task waiting.
	HeapProfile io.Writer
	// Logger receives warnings from the embedded server and the worker
	// runtime; nil discards them.
	Logger io.Writer
}

// Validate fills defaults for zero optional fields and checks every field
// against its limit; the error names the field as a command-line flag.
func (c *Config) Validate() error {
	if c.Mode == "" {
		c.Mode = Sequential
	}
	if c.Protocol == "" {
		c.Protocol = client.ProtocolConnect
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if err := c.validateOpenLoop(); err != nil {
		return err
	}
	maxTasks := MaxTasks
	if c.Mode == OpenLoop {
		maxTasks = MaxOpenLoopTasks
	}
	ranges := []struct {
		flag     string
		v        int
		min, max int
	}{
		{"tasks", c.Tasks, 1, maxTasks},
		{"payload-bytes", c.PayloadBytes, 0, MaxPayloadBytes},
		{"submitters", c.Submitters, 1, MaxSubmitters},
		{"batch", c.Batch, 1, MaxBatch},
		{"workers", c.Workers, 1, MaxWorkers},
		{"concurrency", c.Concurrency, 1, MaxConcurrency},
		{"lease-batch", c.LeaseBatch, 1, MaxLeaseBatch},
		{"complete-batch", c.CompleteBatch, 1, MaxCompleteBatch},
		{"probe-rounds", c.ProbeRounds, 0, MaxProbeRounds},
	}
	for _, r := range ranges {
		if r.v < r.min || r.v > r.max {
			return fmt.Errorf("--%s %d is outside %d..%d", r.flag, r.v, r.min, r.max)
		}
	}
	if c.LeaseBatch > c.Concurrency {
		return fmt.Errorf("--lease-batch %d is above --concurrency %d: a worker never holds more than --concurrency tasks, so it could not use a larger lease", c.LeaseBatch, c.Concurrency)
	}
	switch c.Mode {
	case Sequential, Concurrent, OpenLoop:
	default:
		return fmt.Errorf("--mode %q: use %s or %s (or --duration and --rate for an open-loop run)", c.Mode, Sequential, Concurrent)
	}
	switch c.Protocol {
	case client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolJSON:
	default:
		return fmt.Errorf("--protocol %q: use %s, %s or %s", c.Protocol, client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolJSON)
	}
	if c.Queue == "" {
		return fmt.Errorf("--queue is empty")
	}
	if len(c.Queue) > maxQueueBytes {
		return fmt.Errorf("--queue is %d bytes; the limit is %d (the probes add a suffix within the server's 256)", len(c.Queue), maxQueueBytes)
	}
	if c.ProgressEvery < 0 {
		return fmt.Errorf("progress interval %v is negative", c.ProgressEvery)
	}
	if c.HeapProfile != nil && c.Mode != Sequential {
		return fmt.Errorf("--memprofile needs --mode sequential: it is taken when every task is waiting")
	}
	if c.Watchers < 0 || c.Watchers > MaxWatchers {
		return fmt.Errorf("--watchers %d is outside 0..%d", c.Watchers, MaxWatchers)
	}
	if c.Watchers > 0 && (c.Addr != "" || c.Cluster > 0) {
		return fmt.Errorf("--watchers follows the log of the embedded server the benchmark starts: leave out --addr and --cluster")
	}
	if c.Cluster < 0 || c.Cluster > 16 {
		return fmt.Errorf("--cluster %d is outside 0..16 nodes", c.Cluster)
	}
	if c.Cluster > 0 && (c.MySQL == "" || c.Addr != "" || c.DataDir != "") {
		return fmt.Errorf("--cluster needs --mysql DSN, and cannot be used with --addr or --data-dir")
	}
	if c.Cluster == 0 && c.MySQL != "" {
		return fmt.Errorf("--mysql is for --cluster N (to load a running cluster, pass its nodes to --addr)")
	}
	for _, u := range strings.Split(c.Addr, ",") {
		if c.Addr != "" && u == "" {
			return fmt.Errorf("--addr %q has an empty address between commas", c.Addr)
		}
	}
	if c.Addr != "" && c.DataDir != "" {
		return fmt.Errorf("--data-dir is for the embedded server; it cannot be used with --addr")
	}
	if c.TLS && (c.Addr != "" || c.Cluster > 0) {
		return fmt.Errorf("--tls is for the embedded server; to load a server that serves TLS, give --addr https://host:port (and --ca-file)")
	}
	if c.Snapshots != (host.Schedule{}) && c.Addr != "" {
		return fmt.Errorf("--retention, --snapshot-every and --snapshot-every-records are for the embedded server or a --cluster; a running server keeps its own")
	}
	if s := c.Snapshots; s.Every < 0 || (s.Every > 0 && s.Every < time.Second) {
		return fmt.Errorf("--snapshot-every %v is under 1s", s.Every)
	}
	if s := c.Snapshots; s.Retention < 0 || (s.Retention > 0 && s.Retention < time.Second) {
		return fmt.Errorf("--retention %v is under 1s", s.Retention)
	}
	if c.ClientTLS != nil && c.Addr == "" {
		return fmt.Errorf("--ca-file, --cert-file and --key-file are for an https:// --addr")
	}
	if c.Typed && (!c.Runtime || c.Mode == OpenLoop) {
		return fmt.Errorf("--typed is for the worker runtime (--runtime), not open loop: the raw loop has no handler to decode a typed task")
	}
	return c.validateKeys()
}

// validateKeys checks the fields of a run with keys.
func (c *Config) validateKeys() error {
	switch {
	case c.Keys < 0 || c.Keys > c.Tasks:
		return fmt.Errorf("--keys %d is outside 0..%d (--tasks)", c.Keys, c.Tasks)
	case c.BigKeyTasks < 0 || c.BigKeyTasks >= c.Tasks:
		return fmt.Errorf("--big-key-tasks %d is outside 0..%d (less than --tasks: the other tasks have --keys keys)", c.BigKeyTasks, c.Tasks-1)
	case c.BigKeyTasks > 0 && c.Keys == 0:
		return fmt.Errorf("--big-key-tasks needs --keys: the big key's backlog is beside the small keys'")
	case c.Keys > 0 && c.Mode == OpenLoop:
		return fmt.Errorf("--keys is for a closed-loop run, not --duration")
	case c.BigKeyTasks > 0 && (c.Runtime || c.PayloadBytes < minOpenLoopPayload):
		return fmt.Errorf("--big-key-tasks measures each task's wait in the raw loop: not with --runtime, and --payload-bytes at least %d (a task's number)", minOpenLoopPayload)
	}
	return nil
}

// validateOpenLoop checks the open-loop fields, and for an open-loop run
// fills their defaults and sets Tasks to the number of tasks due.
func (c *Config) validateOpenLoop() error {
	if c.Duration != 0 && c.Mode == Sequential {
		c.Mode = OpenLoop
	}
	if c.Mode != OpenLoop {
		if c.Duration != 0 || c.Rate != 0 {
			return fmt.Errorf("--duration and --rate go together, for an open-loop run (not --mode %s)", c.Mode)
		}
		return nil
	}
	switch {
	case c.Duration < time.Second || c.Duration > MaxDuration:
		return fmt.Errorf("--duration %v is outside 1s..%v", c.Duration, MaxDuration)
	case !(c.Rate > 0 && c.Rate <= MaxRate):
		return fmt.Errorf("--rate %g is outside (0, %d] tasks per second", c.Rate, MaxRate)
	case c.Runtime:
		return fmt.Errorf("--runtime cannot run open loop: the worker runtime does not say when each task's completion was acknowledged")
	case c.PayloadBytes < minOpenLoopPayload:
		return fmt.Errorf("--payload-bytes %d is under %d: an open-loop task carries its number in its first %d bytes", c.PayloadBytes, minOpenLoopPayload, minOpenLoopPayload)
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxBacklog == 0 {
		c.MaxBacklog = DefaultMaxBacklog
	}
	if c.MaxBacklog < 0 {
		return fmt.Errorf("--max-backlog %v is negative", c.MaxBacklog)
	}
	if c.Tick < 100*time.Microsecond || c.Tick > time.Second {
		return fmt.Errorf("--tick %v is outside 100µs..1s", c.Tick)
	}
	if c.Window < time.Second {
		return fmt.Errorf("--window %v is under 1s", c.Window)
	}
	if n := windowCount(c.Duration, c.Window); n > MaxWindows {
		return fmt.Errorf("--window %v makes %d windows of --duration %v; the limit is %d", c.Window, n, c.Duration, MaxWindows)
	}
	due := timetable{rate: c.Rate}.dueWithin(c.Duration)
	if due < 1 || due > MaxOpenLoopTasks {
		return fmt.Errorf("--rate %g for --duration %v makes %d tasks; it must be 1..%d", c.Rate, c.Duration, due, MaxOpenLoopTasks)
	}
	c.Tasks = due
	return nil
}
