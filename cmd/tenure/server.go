package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/ui"
	"github.com/tenurehq/tenure/internal/wal"
)

// serverCmd is `tenure server`.
type serverCmd struct {
	dataDir string
	listen  string
	fsync   string
	// commitInterval is the WAL's least time between two fsyncs.
	commitInterval time.Duration
	segmentBytes   int64
	maxPayload     int
	maxSnoozes     int
	maxSnoozeDelay time.Duration
	scan           time.Duration
	snapRecords    uint64
	snapEvery      time.Duration
	retention      time.Duration
	acceptLost     string
	logFormat      string
	logLevel       string
	pprof          bool
	maxQueues      int
	cluster        clusterFlags
	auth           authFlags
	limits         limitFlags
	workflows      workflowLimits
	tls            tlsServerFlags
	outbox         outboxFlags
}

func (*serverCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "server [flags]",
		Short: "run a tenure server: on the embedded on-disk WAL, or as a cluster node with --mysql",
		Long: `Serve the API (Connect, gRPC and JSON over HTTP), /healthz and /readyz on --listen.

Embedded mode (the default) keeps the WAL and snapshots in --data-dir. With
--mysql the server is one node of a cluster whose partitions' logs live in
that database; the flags marked "cluster mode" apply then.

With --tls-cert and --tls-key it serves HTTPS only (HTTP/2 and HTTP/1.1
over TLS), reading the files again on SIGHUP and when they change.`,
	}
}

func (c *serverCmd) define(fs *pflag.FlagSet) {
	fs.StringVar(&c.dataDir, "data-dir", envOr("TENURE_DATA_DIR", "./tenure-data"), "directory for the WAL, the snapshots and the lock file (env TENURE_DATA_DIR)")
	fs.StringVar(&c.listen, "listen", envOr("TENURE_LISTEN", "127.0.0.1:7070"), "address to serve the API, /healthz and /readyz on (env TENURE_LISTEN)")
	fs.StringVar(&c.fsync, "fsync", envOr("TENURE_FSYNC", "always"), "WAL fsync policy: always (durable before acknowledged) or none (UNSAFE: an OS crash or power loss loses acknowledged work) (env TENURE_FSYNC)")
	fs.DurationVar(&c.commitInterval, "commit-interval", wal.DefaultCommitInterval, commitIntervalHelp)
	fs.Int64Var(&c.segmentBytes, "wal-segment-bytes", wal.DefaultSegmentBytes, "size of a WAL segment file, in bytes (4096 to 1 GiB): the WAL below the older kept snapshot is deleted in whole segments")
	fs.IntVar(&c.maxPayload, "max-payload-bytes", coordinator.DefaultLimits.MaxPayloadBytes, "largest task payload accepted, in bytes")
	fs.IntVar(&c.maxSnoozes, "max-snoozes", coordinator.DefaultLimits.MaxSnoozes, "times one task may be snoozed (each keeps an execution in the task); past it a snooze is refused")
	fs.DurationVar(&c.maxSnoozeDelay, "max-snooze-delay", coordinator.DefaultLimits.MaxSnoozeDelay, "longest delay of one snooze")
	fs.DurationVar(&c.scan, "expiry-scan-interval", time.Second, "how often to scan for expired leases (they are also expired lazily on access)")
	fs.Uint64Var(&c.snapRecords, "snapshot-every-records", host.DefaultSnapshotEveryRecords, "take a snapshot after this many WAL records since the last one")
	fs.DurationVar(&c.snapEvery, "snapshot-every", host.DefaultSnapshotEvery, "take a snapshot this long after the last one, if any record was written since")
	fs.DurationVar(&c.retention, "retention", coordinator.DefaultRetention, "COMPLETED, FAILED and DEAD tasks leave the state at the first purge after they are this old (purges run every tenth of this, at most --snapshot-every apart, and before each snapshot); their request ids stop deduplicating then")
	fs.StringVar(&c.acceptLost, "accept-lost-records", "", "start although the WAL lost the records FIRST-LAST that a snapshot or the WAL's tail file proves it held (acknowledged work): "+
		"exactly the range a refused start named; a snapshot past the WAL's end is set aside and the WAL served as it is (embedded mode only)")
	fs.StringVar(&c.logFormat, "log-format", envOr("TENURE_LOG_FORMAT", "text"), "log format: text or json (env TENURE_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", envOr("TENURE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env TENURE_LOG_LEVEL)")
	fs.BoolVar(&c.pprof, "pprof", false, "serve Go's profiler under /debug/pprof/, to loopback clients only (others get 403)")
	c.cluster.add(fs)
	c.auth.add(fs)
	c.tls.add(fs)
	fs.IntVar(&c.maxQueues, "metrics-max-queues", metrics.DefaultMaxQueues, metricsMaxQueuesHelp)
	c.limits.add(fs)
	c.workflows.add(fs)
	c.outbox.add(fs)
}

func (*serverCmd) choices() map[string][]string {
	return map[string][]string{
		"fsync":      {"always", "none"},
		"log-format": {"text", "json"},
		"log-level":  {"debug", "info", "warn", "error"},
	}
}

func (c *serverCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, _ []string) error {
	stdout := a.stdout
	lg, err := newLogger(a.stderr, c.logFormat, c.logLevel)
	if err != nil {
		return usageError{err.Error()}
	}
	if c.maxPayload <= 0 || c.maxPayload > 64<<20 {
		return usageError{fmt.Sprintf("--max-payload-bytes %d is outside 1..%d", c.maxPayload, 64<<20)}
	}
	if c.maxSnoozes < 1 || c.maxSnoozes > 1_000_000 {
		return usageError{fmt.Sprintf("--max-snoozes %d is outside 1..1000000", c.maxSnoozes)}
	}
	if c.maxSnoozeDelay < time.Second || c.maxSnoozeDelay > 365*24*time.Hour {
		return usageError{fmt.Sprintf("--max-snooze-delay %v is outside 1s..8760h (a year)", c.maxSnoozeDelay)}
	}
	if err := checkCommitInterval(c.commitInterval); err != nil {
		return err
	}
	if c.segmentBytes < 4096 || c.segmentBytes > 1<<30 {
		return usageError{fmt.Sprintf("--wal-segment-bytes %d is outside 4096..%d", c.segmentBytes, 1<<30)}
	}
	if c.scan < 10*time.Millisecond || c.scan > time.Hour {
		return usageError{fmt.Sprintf("--expiry-scan-interval %v is outside 10ms..1h", c.scan)}
	}
	if c.snapRecords < 1 {
		return usageError{"--snapshot-every-records must be at least 1"}
	}
	if c.snapEvery < time.Second {
		return usageError{fmt.Sprintf("--snapshot-every %v is under 1s", c.snapEvery)}
	}
	if c.retention < time.Second {
		return usageError{fmt.Sprintf("--retention %v is under 1s", c.retention)}
	}
	if err := c.limits.check(); err != nil {
		return err
	}
	mx, err := newMetrics(c.maxQueues)
	if err != nil {
		return err
	}
	authn, err := c.auth.setup(ctx, c.listen, a.clock, lg)
	if err != nil {
		return err
	}
	tlsFiles, err := c.tls.start(ctx, a.clock, lg, c.cluster.dsn != "")
	if err != nil {
		return err
	}
	snaps := host.Schedule{EveryRecords: c.snapRecords, Every: c.snapEvery, Retention: c.retention}
	memory, err := memoryBudget(c.limits, snaps, lg)
	if err != nil {
		return err
	}
	mx.WatchMemory(memory)
	coordCfg := coordinator.Config{
		Limits:             coordinator.Limits{MaxPayloadBytes: c.maxPayload, MaxSnoozes: c.maxSnoozes, MaxSnoozeDelay: c.maxSnoozeDelay},
		ExpiryScanInterval: c.scan,
		Memory:             memory,
	}
	if err := c.workflows.apply(&coordCfg.Limits); err != nil {
		return err
	}
	if c.cluster.dsn != "" {
		for _, name := range []string{"data-dir", "fsync", "commit-interval", "wal-segment-bytes", "accept-lost-records"} {
			if fs.Changed(name) {
				return usageError{fmt.Sprintf("--%s is for the embedded mode; with --mysql the partitions' logs live in the database", name)}
			}
		}
		return runClusterServer(ctx, c.cluster, c.listen, coordCfg, snaps, c.pprof, c.limits, mx, authn, tlsFiles, lg, stdout, c.outbox, a.clock)
	}
	policy, err := wal.ParseSyncPolicy(c.fsync)
	if err != nil {
		return usageError{err.Error()}
	}
	var accept coordinator.LSNRange
	if fs.Changed("accept-lost-records") {
		if accept, err = coordinator.ParseLSNRange(c.acceptLost); err != nil {
			return usageError{fmt.Sprintf("--accept-lost-records: %v: pass the range a refused start named", err)}
		}
	}
	if policy == wal.SyncNone {
		lg.Warn("fsync is off: an OS crash or power loss can lose acknowledged tasks; use --fsync=always in production")
	}

	// Serve before replaying, so a taken port fails fast, the address is
	// known, and probes get answers: /healthz 200 (alive), /readyz 503
	// until the node serves.
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another server running there? pass --listen)", c.listen, err)
	}
	defer ln.Close()
	opening := server.NewOpening("the server is replaying its WAL")
	api := newAPIServer(opening.Router(), opening, opening, coordCfg, c.pprof, c.limits, mx, authn, lg)
	rl, err := c.outbox.open(ctx, api, mx, a.clock, lg)
	if err != nil {
		return err
	}
	defer rl.close()
	h := api.Serve(ln, server.HTTPConfig{TLS: tlsFiles})
	defer h.Close() // a failed start; after a graceful stop, a no-op

	start := a.clock.Now()
	nodeCfg := node.Config{
		DataDir:           c.dataDir,
		Sync:              policy,
		CommitInterval:    c.commitInterval,
		SegmentBytes:      c.segmentBytes,
		Logger:            lg,
		Snapshots:         snaps,
		Coordinator:       coordCfg,
		AcceptLostRecords: accept,
		EventTailBytes:    c.limits.eventTailBytes,
	}
	mx.ConfigureNode(&nodeCfg)
	n, err := node.Open(ctx, nodeCfg)
	if le, ok := errors.AsType[*coordinator.LostRecordsError](err); ok {
		return fmt.Errorf("%w; %s", err, lostRecordsAdvice(le))
	}
	if err != nil {
		return err
	}
	mx.WatchNode(n)
	opening.Open(n, n, n)
	rl.start(ctx, lg) // they stop with ctx, before the node closes

	stats := n.Coordinator().Stats()
	lg.Info("tenure serving", "listen", ln.Addr().String(), "data_dir", c.dataDir, "fsync", policy.String(),
		"records", stats.LastLSN, "tasks", stats.Tasks, "replay_took", a.clock.Now().Sub(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "tenure serving on %s (data in %s)\n", h.URL(), c.dataDir)

	if err := serveUntilDone(ctx, h, lg); err != nil {
		n.Close()
		return err
	}
	rl.close()
	// In-flight requests have finished (their appends are fsynced before
	// they answer); closing the WAL flushes and fsyncs whatever remains.
	if err := n.Close(); err != nil {
		return fmt.Errorf("closing the WAL: %w", err)
	}
	lg.Info("stopped cleanly")
	return nil
}

// lostRecordsAdvice says what to do about records lost from the end of the
// WAL: restore, or give them up with the one flag value that matches.
func lostRecordsAdvice(le *coordinator.LostRecordsError) string {
	if !le.Accepted.IsZero() {
		return fmt.Sprintf("to give these records up, pass --accept-lost-records %s instead of %s", le.Lost, le.Accepted)
	}
	aside := ""
	if le.Snapshot != "" {
		aside = "the snapshot is set aside as .discarded, and "
	}
	return fmt.Sprintf("restore the data directory from a backup if you have one; or, to serve the WAL as it is and give up records %s for good "+
		"(%srequest ids of the lost tasks create new tasks), start the server with --accept-lost-records %s", le.Lost, aside, le.Lost)
}

// newAPIServer returns the API over the partitions r routes to (with
// snapshots taken by snaps, event streams fed by ev, mx served at GET /metrics, and callers
// authenticated by authn if not nil), within lim. Serve it with its
// Serve, which assembles the HTTP server as every node runs it.
func newAPIServer(r route.Router, snaps server.Snapshotter, ev server.EventSource, cfg coordinator.Config, pprof bool, lim limitFlags, mx *metrics.Metrics, authn server.Authenticator, lg *slog.Logger) *server.Server {
	return server.New(r, server.Options{
		MaxRequestBytes: lim.maxRequestBytes,
		Load:            lim.load,
		Limits:          cfg.Limits,
		Snapshots:       snaps,
		Events:          ev,
		Pprof:           pprof,
		Logger:          lg,
		Metrics:         mx,
		Auth:            authn,
		Dashboard:       ui.Handler(),
	})
}

// serveUntilDone waits until ctx ends, then stops h gracefully: refuse
// new connections, end long-polls, let in-flight requests finish (up to
// 30 s). It returns an error only if serving failed.
func serveUntilDone(ctx context.Context, h *server.HTTP, lg *slog.Logger) error {
	select {
	case <-h.Done():
		return fmt.Errorf("serving: %w", h.Err())
	case <-ctx.Done():
	}
	lg.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		lg.Warn("in-flight requests did not finish in time", "err", err)
	}
	return nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, errors.New("--log-format must be text or json")
}

// commitIntervalHelp is the help of --commit-interval, of tenure server and
// of tenure bench's embedded server.
const commitIntervalHelp = "least time between two WAL fsyncs under --fsync always, when the last one carried more than one request: requests that arrive meanwhile share the next one " +
	"(fewer fsyncs, less CPU, under load); adds at most this to a request's latency, nothing to a server idle that long or called one request at a time; 0 for none, at most 100ms"

// checkCommitInterval checks --commit-interval.
func checkCommitInterval(d time.Duration) error {
	if d < 0 || d > wal.MaxCommitInterval {
		return usageError{fmt.Sprintf("--commit-interval %v is outside 0..%v", d, wal.MaxCommitInterval)}
	}
	return nil
}
