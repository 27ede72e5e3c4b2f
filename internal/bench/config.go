package bench

import (
	"crypto/tls"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/wal"
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
)

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
	// LeaseBatch is the most tasks one Lease call asks for (at most
	// Concurrency; a worker asks only for the slots it has free). Ignored
	// with Runtime, whose worker chooses for itself.
	LeaseBatch int
	// CompleteBatch is the most completions one CompleteBatch call carries:
	// the raw loop completes each Lease answer in calls of up to this many
	// tasks, the worker runtime coalesces up to this many. 1 uses one
	// Complete call per task instead.
	CompleteBatch int
	// Runtime runs the workers with the worker package and a no-op handler
	// instead of the raw Lease/Complete loop.
	Runtime bool
	// Mode is Sequential (default) or Concurrent.
	Mode Mode
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
	ranges := []struct {
		flag     string
		v        int
		min, max int
	}{
		{"tasks", c.Tasks, 1, MaxTasks},
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
	case Sequential, Concurrent:
	default:
		return fmt.Errorf("--mode %q: use %s or %s", c.Mode, Sequential, Concurrent)
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
	if c.ClientTLS != nil && c.Addr == "" {
		return fmt.Errorf("--ca-file, --cert-file and --key-file are for an https:// --addr")
	}
	return nil
}
