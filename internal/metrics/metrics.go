package metrics

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/host"
)

// Limits of Config.MaxQueues.
const (
	DefaultMaxQueues = 100
	MaxMaxQueues     = 10_000
)

// Config configures Metrics. Zero fields take their defaults.
type Config struct {
	// MaxQueues is how many distinct (namespace, queue) pairs get labels
	// of their own (default 100, 1 to 10,000); the queues seen after them
	// are reported together as namespace="_other", queue="_other".
	MaxQueues int
	// Queues returns the per-queue figures behind tenure_tasks and the
	// other per-queue gauges, read at every scrape; the same queue may
	// come several times (one sample per partition) and is summed. Nil:
	// those gauges are absent. It must be cheap: no scan of every task.
	Queues func() []QueueSample
	// Clock times requests and tells snapshot ages (default clock.Real).
	Clock clock.Clock
}

// CheckMaxQueues returns an error that says what to do if n is not a valid
// Config.MaxQueues given explicitly (0 is not: it would mean the default).
func CheckMaxQueues(n int) error {
	if n < 1 || n > MaxMaxQueues {
		return fmt.Errorf("%d queues with labels of their own is outside 1..%d (the queues after them are reported as _other); omit it for the default of %d",
			n, MaxMaxQueues, DefaultMaxQueues)
	}
	return nil
}

// Metrics holds the registry and every metric of one tenure process. Its
// methods are safe for concurrent use.
type Metrics struct {
	// queuesSet: Config.Queues feeds the per-queue gauges, not the node.
	queuesSet bool
	reg       *prometheus.Registry
	clock     clock.Clock

	queues *queueLabels
	events [numEvents]*prometheus.CounterVec

	requests      *prometheus.HistogramVec
	requestSeries cache[requestKey, prometheus.Observer]
	authFailures  map[connect.Code]prometheus.Counter
	limitHits     *prometheus.CounterVec

	walAppend, walFsync, batchRecords prometheus.Histogram

	snapshotDuration prometheus.Histogram
	purgeDuration    prometheus.Histogram
	tasksPurged      prometheus.Counter
	replayDuration   prometheus.Gauge
	snapMu           sync.Mutex
	lastSnapshot     map[*host.Host]time.Time // per serving host: its last snapshot, or its opening

	epochChanges    prometheus.Counter
	tasksDelivered  prometheus.Counter
	remoteResolved  prometheus.Counter
	forwarded       *prometheus.CounterVec
	forwardedSeries cache[string, prometheus.Counter]
	dbCommit        prometheus.Histogram
}

// Buckets, in base units.
var (
	// requestBuckets reach 30 s: a Lease long-polls up to that long.
	requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// ioBuckets: 50 µs to about 3.3 s, doubling (writes, fsyncs, commits).
	ioBuckets = prometheus.ExponentialBuckets(0.00005, 2, 17)
	// batchBuckets: 1 to 4096 records, doubling.
	batchBuckets = prometheus.ExponentialBuckets(1, 2, 13)
	// snapshotBuckets: 10 ms to about 160 s, doubling.
	snapshotBuckets = prometheus.ExponentialBuckets(0.01, 2, 15)
	// purgeBuckets: 100 µs (a pass over a small state with nothing to
	// drop) to about 26 s, doubling.
	purgeBuckets = prometheus.ExponentialBuckets(0.0001, 2, 19)
)

// New returns the metrics of one process, with the Go runtime and process
// collectors and every metric both modes have registered; ConfigureNode or
// ConfigureMember adds the mode's own.
func New(cfg Config) (*Metrics, error) {
	if cfg.MaxQueues == 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	if err := CheckMaxQueues(cfg.MaxQueues); err != nil {
		return nil, fmt.Errorf("metrics: Config.MaxQueues: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	m := &Metrics{
		reg:          prometheus.NewRegistry(),
		clock:        cfg.Clock,
		lastSnapshot: make(map[*host.Host]time.Time),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	queueLabelNames := []string{"namespace", "queue"}
	for e := range numEvents {
		m.events[e] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: eventNames[e].name, Help: eventNames[e].help}, queueLabelNames)
		m.reg.MustRegister(m.events[e])
	}
	m.queues = newQueueLabels(cfg.MaxQueues, m.newQueueSeries)
	if cfg.Queues != nil {
		m.reg.MustRegister(&queueCollector{queues: m.queues, source: cfg.Queues})
		m.queuesSet = true
	}

	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenure_request_duration_seconds",
		Help:    "Time to answer one API call, by procedure and code (ok, or the error's Connect code).",
		Buckets: requestBuckets,
	}, []string{"procedure", "code"})
	m.snapshotDuration = histogram("tenure_snapshot_duration_seconds",
		"Time to take one snapshot of a partition: the retention purge, the copy, the write and the compaction.", snapshotBuckets)
	m.purgeDuration = histogram("tenure_purge_duration_seconds",
		"Time of one pass of the retention purge of a partition, alone or before a snapshot: all its slices, and the requests served between them.", purgeBuckets)
	m.tasksPurged = counter("tenure_tasks_purged_total",
		"Finished tasks dropped by the retention purge (their request ids deduplicate no more).")
	m.replayDuration = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenure_replay_duration_seconds",
		Help: "Time the last opening of a partition took to load its newest snapshot and replay its log after it.",
	})
	snapshotAge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenure_snapshot_age_seconds",
		Help: "Seconds since the last snapshot of the partition that has gone longest without one (counted from its opening until its first); 0 while no partition is served.",
	}, m.snapshotAge)
	m.limitHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_limit_hits_total",
		Help: "Requests refused or cut off, and connections closed, by a limit of the server (docs/guides/limits.md), by limit.",
	}, []string{"limit"})
	m.reg.MustRegister(m.requests, m.limitHits, m.snapshotDuration, m.purgeDuration, m.tasksPurged, m.replayDuration, snapshotAge)
	m.authFailures = newAuthFailures(m.reg)

	// Registered by ConfigureNode or ConfigureMember.
	m.batchRecords = histogram("tenure_wal_batch_records",
		"Records per group commit: one WAL write (and fsync) in embedded mode, one database transaction of a partition's log in cluster mode.", batchBuckets)
	m.walAppend = histogram("tenure_wal_append_duration_seconds",
		"Time to write one group-commit batch to the WAL's segment file (the write, before its fsync).", ioBuckets)
	m.walFsync = histogram("tenure_wal_fsync_duration_seconds", "Time of one fsync of WAL segment data.", ioBuckets)
	m.epochChanges = counter("tenure_cluster_epoch_changes_total",
		"Partitions this node took over at a new epoch (each a Fence record it wrote).")
	m.tasksDelivered = counter("tenure_cluster_tasks_delivered_total",
		"Tasks a partition this node serves delivered to the partition that owns them (named by TasksDelivered records it wrote).")
	m.remoteResolved = counter("tenure_cluster_remote_edges_resolved_total",
		"Remote edges of BLOCKED tasks resolved once their dependency in another partition ended (DependencyResolved records this node wrote).")
	m.forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenure_cluster_forwarded_requests_total",
		Help: "Requests this node forwarded to the node that serves their partition, by procedure.",
	}, []string{"procedure"})
	m.dbCommit = histogram("tenure_cluster_db_commit_duration_seconds",
		"Time of one database transaction of a partition's log: the epoch check, the insert and the commit.", ioBuckets)
	return m, nil
}

// counter returns a counter without labels.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// histogram returns a histogram without labels.
func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Handler answers GET /metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// cache is a map that lookups read without a lock: they load an immutable
// map, and an insert copies it under mu. It is for small maps (label
// values of bounded cardinality) written rarely and read on every event.
type cache[K comparable, V any] struct {
	mu sync.Mutex
	p  atomic.Pointer[map[K]V]
}

// load returns the value of k, if there is one.
func (c *cache[K, V]) load(k K) (V, bool) {
	if p := c.p.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// insert returns the value of k, made by newV if there is none yet.
func (c *cache[K, V]) insert(k K, newV func(K) V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.load(k); ok {
		return v
	}
	v := newV(k)
	c.storeLocked(k, v)
	return v
}

// storeLocked adds k with v; c.mu must be held.
func (c *cache[K, V]) storeLocked(k K, v V) {
	var old map[K]V
	if p := c.p.Load(); p != nil {
		old = *p
	}
	next := make(map[K]V, len(old)+1)
	maps.Copy(next, old)
	next[k] = v
	c.p.Store(&next)
}

// lenLocked is the number of keys; c.mu must be held.
func (c *cache[K, V]) lenLocked() int {
	if p := c.p.Load(); p != nil {
		return len(*p)
	}
	return 0
}
