package bench

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/internal/wal"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

const (
	// pollWait is the long-poll wait of the workers' Lease calls; the run
	// cancels them when it ends, so it only bounds idle polling.
	pollWait = 5 * time.Second
	// stallTimeout fails a run in which neither submissions nor completions
	// advanced for this long: a lost task (a failed Complete inside the
	// worker runtime, which only logs it) would otherwise hang the run.
	stallTimeout = 60 * time.Second
	// workerGrace is the worker runtime's shutdown grace; its tasks are all
	// done when it is stopped.
	workerGrace = 10 * time.Second
)

// now and since read the wall clock. A benchmark measures real time, and
// reads it, as all of tenure does, through package clock.
func now() time.Time                  { return clock.Real.Now() }
func since(t time.Time) time.Duration { return clock.Real.Now().Sub(t) }

// Run runs the benchmark described by cfg: it starts the embedded server
// unless cfg.Addr names one, takes the no-load probes, runs the main
// workload and returns its summary. It returns an error, and no summary, if
// any call fails: a benchmark that lost a task has no meaningful figures.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := slog.New(slog.DiscardHandler)
	if cfg.Logger != nil {
		lg = slog.New(slog.NewTextHandler(cfg.Logger, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	tg, err := startTarget(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, cfg, tg, lg)
	if cerr := tg.stop(); err == nil && cerr != nil {
		err = fmt.Errorf("bench: stopping the embedded server: %w", cerr)
	}
	return res, err
}

// target is the server under load.
type target struct {
	urls      []string    // the nodes, clients spread over them round robin
	clientTLS *tls.Config // for https:// urls
	label     string      // the summary's target: "" for the embedded node
	fsync     string      // the durability of a target that is not embedded, if known
	node      *node.Node  // nil for a remote server
	dataDir   string      // the embedded node's, "" for a remote server
	stop      func() error
}

// startTarget returns the remote server of cfg.Addr, or starts an embedded
// node (or cfg.Cluster cluster nodes) on loopback ports, each served by
// the HTTP server `tenure server` runs (serve).
func startTarget(ctx context.Context, cfg Config, lg *slog.Logger) (*target, error) {
	if cfg.Addr != "" {
		urls := strings.Split(cfg.Addr, ",")
		return &target{urls: urls, label: cfg.Addr, clientTLS: cfg.ClientTLS, stop: func() error { return nil }}, nil
	}
	if cfg.Cluster > 0 {
		return startCluster(ctx, cfg, lg)
	}
	dir, temp := cfg.DataDir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "tenure-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: creating a temporary data directory: %w", err)
		}
		dir, temp = d, true
	}
	cleanup := func() {
		if temp {
			os.RemoveAll(dir)
		}
	}
	// Metrics as `tenure server` has them, so that the run pays for them.
	mx, err := metrics.New(metrics.Config{})
	if err != nil {
		cleanup()
		return nil, err
	}
	nodeCfg := node.Config{DataDir: dir, Sync: cfg.Fsync, CommitInterval: cfg.CommitInterval, Snapshots: cfg.Snapshots, Logger: lg}
	if cfg.Memory != nil {
		nodeCfg.Coordinator.Memory = cfg.Memory()
	}
	mx.ConfigureNode(&nodeCfg)
	n, err := node.Open(ctx, nodeCfg)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("bench: starting the embedded node: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.Close()
		cleanup()
		return nil, fmt.Errorf("bench: listening on a loopback port: %w", err)
	}
	mx.WatchNode(n)
	tg := &target{urls: []string{"http://" + ln.Addr().String()}, node: n, dataDir: dir}
	var tlsFiles *tlsfiles.Reloader
	if cfg.TLS {
		certDir, err := os.MkdirTemp("", "tenure-bench-tls-")
		if err == nil {
			tlsFiles, tg.clientTLS, err = runCertificate(certDir)
			dataCleanup := cleanup
			cleanup = func() { os.RemoveAll(certDir); dataCleanup() }
		}
		if err != nil {
			ln.Close()
			n.Close()
			cleanup()
			return nil, fmt.Errorf("bench: making a TLS certificate: %w", err)
		}
		tg.urls[0] = "https://" + ln.Addr().String()
	}
	stopAPI := serve(n.Router(), n, n, ln, mx, tlsFiles, lg)
	tg.stop = func() error {
		stopAPI()
		err := n.Close()
		cleanup()
		return err
	}
	return tg, nil
}

// runCertificate makes a CA and a certificate it issues for 127.0.0.1,
// written into dir, and returns the server's TLS files and a client
// configuration that trusts the CA.
func runCertificate(dir string) (*tlsfiles.Reloader, *tls.Config, error) {
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca, err := certgen.NewCA("tenure bench", now())
	if err != nil {
		return nil, nil, err
	}
	p, err := ca.Server("tenure bench", now(), "127.0.0.1")
	if err != nil {
		return nil, nil, err
	}
	if err := p.Write(certFile, keyFile); err != nil {
		return nil, nil, err
	}
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		return nil, nil, err
	}
	return r, &tls.Config{RootCAs: ca.Pool()}, nil
}

// serve answers the API of r's partitions on ln (over TLS with
// tlsFiles) with the HTTP server `tenure server` runs, at its default
// limits, until the returned stop is called. The run is over then, so the
// server closes at once rather than gracefully: a graceful shutdown waits
// for every connection a client dialled but never used.
func serve(r route.Router, snaps server.Snapshotter, ev server.EventSource, ln net.Listener, mx *metrics.Metrics, tlsFiles *tlsfiles.Reloader, lg *slog.Logger) (stop func()) {
	return server.New(r, server.Options{Snapshots: snaps, Events: ev, Logger: lg, Metrics: mx}).Serve(ln, server.HTTPConfig{TLS: tlsFiles}).Close
}

// runner holds one run's counters and recorders. Its goroutines report the
// first failure through fail, which cancels the run.
type runner struct {
	cfg Config
	tg  *target
	lg  *slog.Logger

	clients   atomic.Int64 // made so far, to spread them over the nodes
	submitted atomic.Int64
	completed atomic.Int64
	leases    atomic.Int64  // leases that returned tasks (Lease calls, and leases carried by CompleteBatch)
	leased    atomic.Int64  // tasks they returned
	carried   atomic.Int64  // those of them carried by a CompleteBatch call
	goal      atomic.Int64  // cfg.Tasks, unless lowerGoal lowered it
	done      chan struct{} // closed when completed reaches goal
	doneOnce  sync.Once

	submitCall, submitPerTask, leaseCall, leaseToComplete durations

	// keys holds the key of each key number (cfg.Keys), keyed the wait of
	// the tasks of the big key and of the small ones, and submittedAt the
	// time each task's submit was acknowledged (Unix ns), with
	// cfg.BigKeyTasks.
	keys        []string
	bigWait     durations
	smallWait   durations
	submittedAt []atomic.Int64

	// ol records an open-loop run (nil for a closed-loop one);
	// scrapeClient reads a remote server's /metrics for it.
	ol           *openLoop
	scrapeClient *http.Client

	cancel  context.CancelCauseFunc
	errOnce sync.Once
	err     error

	httpMu      sync.Mutex
	httpClients []*http.Client
}

// fail records the run's first error and cancels the run.
func (r *runner) fail(err error) {
	r.errOnce.Do(func() {
		r.err = err
		r.cancel(err)
	})
}

func (r *runner) completedOne() { r.completedN(1) }

func (r *runner) completedN(n int) {
	if r.completed.Add(int64(n)) >= r.goal.Load() {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// lowerGoal ends the run once n tasks are completed, instead of all of
// them: an open-loop run stopped its timetable after submitting n.
func (r *runner) lowerGoal(n int64) {
	r.goal.Store(n)
	if r.completed.Load() >= n {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// run measures cfg's workload on tg: the probes, then the main run, then
// its summary. It returns an error, and no summary, if the run failed.
func run(parent context.Context, cfg Config, tg *target, lg *slog.Logger) (*Result, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	r := newRunner(cfg, tg, lg, cancel)
	defer r.closeConns()
	res := &Result{Config: runConfig(cfg, tg)}
	if cfg.Fair {
		if err := r.setFair(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.ProbeRounds > 0 {
		p, err := r.probe(ctx)
		if err != nil {
			return nil, err
		}
		res.Probe = p
	}
	m := r.measure(ctx)
	if r.err != nil {
		return nil, fmt.Errorf("bench: %w (after %d submitted, %d completed)", r.err, r.submitted.Load(), r.completed.Load())
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: %w", context.Cause(ctx))
	}
	r.summarize(res, m)
	return res, nil
}

// setFair sets fair leasing on the run's queue.
func (r *runner) setFair(ctx context.Context) error {
	c, err := r.newClient(nil)
	if err != nil {
		return err
	}
	fair := true
	if _, err := c.SetQueueLimits(ctx, client.SetQueueLimitsRequest{Namespace: r.cfg.Namespace, Queue: r.cfg.Queue, Fair: &fair, Reason: "tenure bench --fair"}); err != nil {
		return fmt.Errorf("bench: setting fair leasing on the queue: %w", err)
	}
	return nil
}

// newRunner returns the runner of one run, its recorders sized for cfg.
// An open-loop run, whose length is not bounded by memory, counts its
// durations in histograms instead.
func newRunner(cfg Config, tg *target, lg *slog.Logger, cancel context.CancelCauseFunc) *runner {
	r := &runner{cfg: cfg, tg: tg, lg: lg, cancel: cancel, done: make(chan struct{})}
	r.goal.Store(int64(cfg.Tasks))
	if cfg.Mode == OpenLoop {
		r.ol = newOpenLoop(cfg)
		r.submitCall, r.submitPerTask, r.leaseCall, r.leaseToComplete = new(histogram), new(histogram), new(histogram), new(histogram)
		if cfg.Addr != "" {
			r.scrapeClient = r.httpClient()
		}
		return r
	}
	calls := (cfg.Tasks + cfg.Batch - 1) / cfg.Batch
	r.submitCall, r.submitPerTask = newRecorder(calls), newRecorder(calls)
	r.leaseCall, r.leaseToComplete = newRecorder(cfg.Tasks), newRecorder(cfg.Tasks)
	if cfg.Keys > 0 {
		r.keys = make([]string, cfg.Keys)
		for i := range r.keys {
			r.keys[i] = "key-" + strconv.Itoa(i)
		}
	}
	if cfg.BigKeyTasks > 0 {
		// A task leased twice (an expired lease) counts twice: room for it.
		r.bigWait, r.smallWait = newRecorder(2*cfg.BigKeyTasks), newRecorder(2*(cfg.Tasks-cfg.BigKeyTasks))
		r.submittedAt = make([]atomic.Int64, cfg.Tasks)
	}
	return r
}

// keyOf is the key of task i ("" without keys).
func (r *runner) keyOf(i int) string {
	switch {
	case r.keys == nil:
		return ""
	case i < r.cfg.BigKeyTasks:
		return "big"
	}
	return r.keys[(i-r.cfg.BigKeyTasks)%len(r.keys)]
}

// waited records the wait of leased tasks, leased at at: from the
// acknowledgement of its submit to its lease, for the big key or the
// small ones (with cfg.BigKeyTasks).
func (r *runner) waited(lts []client.LeasedTask, at time.Time) {
	if r.submittedAt == nil {
		return
	}
	for _, lt := range lts {
		n, ok := taskNumber(lt.Payload)
		if !ok || n >= uint64(len(r.submittedAt)) {
			continue
		}
		d := at.Sub(time.Unix(0, r.submittedAt[n].Load()))
		if int(n) < r.cfg.BigKeyTasks {
			r.bigWait.add(d)
		} else {
			r.smallWait.add(d)
		}
	}
}

// runConfig is the configuration the summary reports for cfg on tg.
func runConfig(cfg Config, tg *target) RunConfig {
	rc := RunConfig{
		Target: "embedded", Mode: cfg.Mode, Runtime: cfg.Runtime, Typed: cfg.Typed, Protocol: cfg.Protocol, Fsync: cfg.Fsync.String(), TLS: strings.HasPrefix(tg.urls[0], "https://"),
		Seed: cfg.Seed, Namespace: cfg.Namespace, Queue: cfg.Queue, Tasks: cfg.Tasks, PayloadBytes: cfg.PayloadBytes,
		Keys: cfg.Keys, BigKeyTasks: cfg.BigKeyTasks, Fair: cfg.Fair, Watchers: cfg.Watchers,
		Submitters: cfg.Submitters, Batch: cfg.Batch, Workers: cfg.Workers, Concurrency: cfg.Concurrency,
		LeaseBatch: cfg.LeaseBatch, CompleteBatch: cfg.CompleteBatch, SeparateLease: cfg.SeparateLease, GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
	}
	if tg.node == nil {
		rc.Target, rc.Fsync = tg.label, cmp.Or(tg.fsync, "unknown")
	} else {
		ms := float64(cfg.CommitInterval) / float64(time.Millisecond)
		rc.CommitIntervalMs = &ms
	}
	if cfg.Addr == "" {
		retention := seconds(cmp.Or(cfg.Snapshots.Retention, coordinator.DefaultRetention))
		every := seconds(cmp.Or(cfg.Snapshots.Every, host.DefaultSnapshotEvery))
		records := cmp.Or(cfg.Snapshots.EveryRecords, host.DefaultSnapshotEveryRecords)
		rc.RetentionSeconds, rc.SnapshotEverySeconds, rc.SnapshotEveryRecords = &retention, &every, &records
	}
	if cfg.Runtime {
		rc.LeaseBatch = 0 // the runtime chooses
	}
	return rc
}

// walStats returns the embedded node's WAL counters (zero for a remote
// server).
func (r *runner) walStats() wal.Stats {
	if r.tg.node == nil {
		return wal.Stats{}
	}
	return r.tg.node.WALStats()
}

// httpClient returns an HTTP client configured as the SDK's default one,
// with the target's TLS configuration.
func (r *runner) httpClient() *http.Client {
	hc := client.DefaultHTTPClient(r.cfg.Protocol)
	hc.Transport.(*http.Transport).TLSClientConfig = r.tg.clientTLS.Clone() // a transport changes its own
	return hc
}

// newClient returns a client of the target with connections of its own.
// hc nil: r.httpClient().
func (r *runner) newClient(hc *http.Client) (*client.Client, error) {
	if hc == nil {
		hc = r.httpClient()
	}
	url := r.tg.urls[int(r.clients.Add(1)-1)%len(r.tg.urls)]
	c, err := client.New(url, client.Options{Protocol: r.cfg.Protocol, HTTPClient: hc, Token: r.cfg.Token})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r.httpMu.Lock()
	r.httpClients = append(r.httpClients, hc)
	r.httpMu.Unlock()
	return c, nil
}

// closeConns closes the clients' idle connections. A transport may hold
// connections it dialled but never used; the server counts those as new,
// not idle, and a graceful shutdown waits 5s for them.
func (r *runner) closeConns() {
	r.httpMu.Lock()
	defer r.httpMu.Unlock()
	for _, hc := range r.httpClients {
		hc.CloseIdleConnections()
	}
}

// requestID is task i's idempotency key: unique per queue, so the run's
// own retries never create a second task. One allocation, the key: the
// number is formatted on the stack (the load generator's own costs count
// in the run's CPU per task).
func (r *runner) requestID(i int) string {
	var n [20]byte
	return r.cfg.Queue + "-" + string(strconv.AppendInt(n[:0], int64(i), 10))
}

// submit submits tasks 0..Tasks-1 from cfg.Submitters goroutines sharing
// one client; each takes the next Batch task numbers. An open-loop run
// submits them on its timetable instead.
func (r *runner) submit(ctx context.Context) {
	if r.ol != nil {
		r.submitOpen(ctx)
		return
	}
	c, err := r.newClient(nil)
	if err != nil {
		r.fail(err)
		return
	}
	cfg := r.cfg
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Submitters {
		wg.Go(func() {
			b := r.newBatcher()
			for ctx.Err() == nil {
				lo := int(next.Add(1)-1) * cfg.Batch
				if lo >= cfg.Tasks {
					return
				}
				if _, _, ok := b.submit(ctx, c, lo, min(lo+cfg.Batch, cfg.Tasks)); !ok {
					return
				}
			}
		})
	}
	wg.Wait()
}

// batcher is one submitter's buffers, reused from call to call.
type batcher struct {
	r     *runner
	reqs  []client.SubmitRequest
	arena []byte
}

func (r *runner) newBatcher() *batcher {
	return &batcher{r: r, reqs: make([]client.SubmitRequest, 0, r.cfg.Batch), arena: make([]byte, r.cfg.Batch*r.cfg.PayloadBytes)}
}

// submit submits tasks lo..hi-1 (at most Batch) in one call and records
// it: it returns when the call started and how long it took, or false
// after failing the run.
func (b *batcher) submit(ctx context.Context, c *client.Client, lo, hi int) (start time.Time, d time.Duration, ok bool) {
	r, cfg := b.r, b.r.cfg
	b.reqs = b.reqs[:0]
	for i := lo; i < hi; i++ {
		off := (i - lo) * cfg.PayloadBytes
		p := b.arena[off : off+cfg.PayloadBytes : off+cfg.PayloadBytes]
		fillPayload(p, cfg.Seed, uint64(i))
		if r.ol != nil || r.submittedAt != nil {
			markTask(p, i)
		}
		req := client.SubmitRequest{Namespace: cfg.Namespace, Queue: cfg.Queue, Payload: p, RequestID: r.requestID(i), Key: r.keyOf(i)}
		if cfg.Typed {
			req.Payload, req.Args = nil, typedTask{N: i, Body: hex.EncodeToString(p)[:cfg.PayloadBytes]}
		}
		b.reqs = append(b.reqs, req)
	}
	// The client has encoded and sent the payloads when the call returns,
	// so the arena is reused for the next batch.
	start = now()
	dup, err := submitOnce(ctx, c, b.reqs)
	d = since(start)
	if err != nil {
		r.fail(fmt.Errorf("submitting tasks %d..%d: %w", lo, hi-1, err))
		return start, d, false
	}
	if dup {
		r.fail(fmt.Errorf("submitting tasks %d..%d: the server already had tasks with these request ids (queue %q was used before; pass another --queue)", lo, hi-1, cfg.Queue))
		return start, d, false
	}
	if r.submittedAt != nil {
		acked := start.Add(d).UnixNano()
		for i := lo; i < hi; i++ {
			r.submittedAt[i].Store(acked)
		}
	}
	r.submitCall.add(d)
	r.submitPerTask.add(d / time.Duration(hi-lo))
	r.submitted.Add(int64(hi - lo))
	return start, d, true
}

// submitOnce submits reqs in one call (Submit for one task, SubmitBatch,
// answered with ids only, otherwise) and reports whether any was a
// duplicate.
func submitOnce(ctx context.Context, c *client.Client, reqs []client.SubmitRequest) (dup bool, err error) {
	if len(reqs) == 1 {
		res, err := c.Submit(ctx, reqs[0])
		return res.Duplicate, err
	}
	res, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs})
	for _, s := range res {
		dup = dup || s.Duplicate
	}
	return dup, err
}

// fillPayload fills p with task i's deterministic bytes (splitmix64 seeded
// by seed and i), cheap enough not to load the client.
func fillPayload(p []byte, seed, i uint64) {
	x := seed ^ (i+1)*0x9E3779B97F4A7C15
	var w [8]byte
	for len(p) > 0 {
		x += 0x9E3779B97F4A7C15
		z := x
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		binary.LittleEndian.PutUint64(w[:], z^z>>31)
		p = p[copy(p, w[:]):]
	}
}

// work runs the workers until every task is completed or the run fails.
func (r *runner) work(ctx context.Context) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range r.cfg.Workers {
		id := fmt.Sprintf("bench-%s-w%d", r.cfg.Queue, i)
		if r.cfg.Runtime {
			if err := r.startRuntimeWorker(wctx, &wg, id); err != nil {
				r.fail(err)
				break
			}
			continue
		}
		c, err := r.newClient(nil)
		if err != nil {
			r.fail(err)
			break
		}
		wg.Go(func() { r.rawWorker(ctx, wctx, c, id) })
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	stop()
	wg.Wait()
}

// rawWorker is the fastest honest worker. It runs lanes of up to
// LeaseBatch tasks each, as many as Concurrency holds (the last one
// smaller). A lane leases a batch, long-polling when none is ready, and
// completes it as soon as the answer arrives, in CompleteBatch calls of up
// to CompleteBatch tasks (one Complete per task with CompleteBatch 1),
// all at once. While leases come back full, those calls also lease the
// next batch (client.CompleteAndLease, unless SeparateLease), so that a
// busy lane makes one call per batch; a short lease means the queue was
// drained, and the lane goes back to long-polling with Lease, one call per
// batch again rather than a few tasks at a time. It stops leasing when
// wctx ends; completions run under ctx, so none in flight is abandoned
// when the last task is done.
func (r *runner) rawWorker(ctx, wctx context.Context, c *client.Client, id string) {
	var lanes sync.WaitGroup
	for held := 0; held < r.cfg.Concurrency; held += r.cfg.LeaseBatch {
		size := min(r.cfg.LeaseBatch, r.cfg.Concurrency-held)
		lanes.Go(func() { r.lane(ctx, wctx, c, id, size) })
	}
	lanes.Wait()
}

// leasedFor counts a lease of n tasks for worker id that answered lts,
// and fails the run if it answered more than n.
func (r *runner) leasedFor(id string, n int, lts []client.LeasedTask) bool {
	if len(lts) > n {
		r.fail(fmt.Errorf("worker %s: asked for %d tasks, the server leased %d", id, n, len(lts)))
		return false
	}
	if len(lts) > 0 {
		r.leases.Add(1)
		r.leased.Add(int64(len(lts)))
	}
	return true
}

// lane is one lane of rawWorker, of size tasks.
func (r *runner) lane(ctx, wctx context.Context, c *client.Client, id string, size int) {
	carry := !r.cfg.SeparateLease && r.cfg.CompleteBatch > 1
	var lts []client.LeasedTask // the batch in hand, leased at leasedAt
	var leasedAt time.Time
	full := false // the batch in hand is a full lease
	for {
		if len(lts) == 0 {
			if wctx.Err() != nil {
				return
			}
			t0 := now()
			res, err := c.Lease(wctx, client.LeaseRequest{
				WorkerID: id, Namespace: r.cfg.Namespace, Queue: r.cfg.Queue, MaxTasks: size, Wait: pollWait,
			})
			got := res.Tasks
			leasedAt = now()
			if err != nil {
				if wctx.Err() == nil {
					r.fail(fmt.Errorf("worker %s: %w", id, err))
				}
				return
			}
			if !r.leasedFor(id, size, got) {
				return
			}
			if len(got) > 0 {
				r.leaseCall.add(leasedAt.Sub(t0))
			}
			r.waited(got, leasedAt)
			lts, full = got, len(got) == size
			continue
		}
		// Complete the batch in chunks, all at once; while leases come
		// back full, each chunk's call leases as many tasks again.
		lease := carry && full && wctx.Err() == nil
		chunks := (len(lts) + r.cfg.CompleteBatch - 1) / r.cfg.CompleteBatch
		nexts := make([][]client.LeasedTask, chunks)
		var calls sync.WaitGroup
		var failed atomic.Bool
		for k := range chunks {
			chunk := lts[k*r.cfg.CompleteBatch : min((k+1)*r.cfg.CompleteBatch, len(lts))]
			calls.Go(func() {
				var err error
				if lease {
					nexts[k], err = r.completeAndLease(ctx, c, id, chunk, len(chunk))
				} else {
					err = r.complete(ctx, c, chunk)
				}
				if err == nil {
					err = r.acknowledged(chunk, leasedAt, now())
				}
				if err != nil {
					r.fail(fmt.Errorf("worker %s: %w", id, err))
					failed.Store(true)
				}
			})
		}
		calls.Wait()
		if failed.Load() {
			return
		}
		asked := len(lts)
		lts, leasedAt = slices.Concat(nexts...), now()
		r.waited(lts, leasedAt)
		if lease {
			if !r.leasedFor(id, asked, lts) {
				return
			}
			if len(lts) > 0 {
				r.carried.Add(1)
			}
		}
		full = lease && len(lts) == asked
	}
}

// acknowledged records the completions of chunk, leased at leasedAt and
// acknowledged at ack.
func (r *runner) acknowledged(chunk []client.LeasedTask, leasedAt, ack time.Time) error {
	if r.ol != nil {
		if err := r.ol.completed(chunk, ack); err != nil {
			return err
		}
	}
	for range chunk {
		r.leaseToComplete.add(ack.Sub(leasedAt))
		r.completedOne()
	}
	return nil
}

// complete completes lts: with one Complete call when there is one task
// and CompleteBatch is 1, else with one CompleteBatch call.
func (r *runner) complete(ctx context.Context, c *client.Client, lts []client.LeasedTask) error {
	if r.cfg.CompleteBatch == 1 {
		lt := &lts[0]
		if err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
			return fmt.Errorf("completing task %s: %w", lt.ID, err)
		}
		return nil
	}
	res, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: completeItems(lts)})
	if err != nil {
		return fmt.Errorf("completing %d tasks: %w", len(lts), err)
	}
	return firstItemError(lts, res.Errors)
}

// completeItems are the completions of lts, with no result.
func completeItems(lts []client.LeasedTask) []client.CompleteRequest {
	items := make([]client.CompleteRequest, len(lts))
	for i := range lts {
		items[i] = client.CompleteRequest{TaskID: lts[i].ID, LeaseID: lts[i].LeaseID}
	}
	return items
}

// firstItemError is the first failed completion of errs, one per task of
// lts, or nil: in a run no completion may fail.
func firstItemError(lts []client.LeasedTask, errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("completing task %s: %w", lts[i].ID, err)
		}
	}
	return nil
}

// completeAndLease completes lts and leases up to n tasks in the same call
// (client.CompleteBatch with a Lease), without waiting for one.
func (r *runner) completeAndLease(ctx context.Context, c *client.Client, id string, lts []client.LeasedTask, n int) ([]client.LeasedTask, error) {
	res, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: completeItems(lts), Lease: &client.LeaseRequest{
		WorkerID: id, Namespace: r.cfg.Namespace, Queue: r.cfg.Queue, MaxTasks: n,
	}})
	if err != nil {
		return nil, fmt.Errorf("completing %d tasks and leasing more: %w", len(lts), err)
	}
	return res.Leased, firstItemError(lts, res.Errors)
}

// typedTask is the task of a --typed run.
type typedTask struct {
	N    int    `json:"n"`
	Body string `json:"body"`
}

func (typedTask) Kind() string { return "bench" }

// startRuntimeWorker starts a worker of the worker package with a no-op
// handler. The runtime reports nothing per task, so its completions are
// counted from the HTTP answers to its Complete and CompleteBatch calls.
func (r *runner) startRuntimeWorker(wctx context.Context, wg *sync.WaitGroup, id string) error {
	hc := r.httpClient()
	hc.Transport = &ackTransport{base: hc.Transport, onAck: r.completedN, onErr: r.fail}
	c, err := r.newClient(hc)
	if err != nil {
		return err
	}
	w, err := worker.New(c, worker.Options{
		Queues:           []string{r.cfg.Queue},
		Namespace:        r.cfg.Namespace,
		WorkerID:         id,
		Concurrency:      r.cfg.Concurrency,
		PollWait:         pollWait,
		ShutdownGrace:    workerGrace,
		MaxCompleteBatch: r.cfg.CompleteBatch,
		Logger:           r.lg,
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r.cfg.Typed {
		worker.Handle(w, func(context.Context, *worker.Task[typedTask]) error { return nil })
	} else {
		worker.HandleOther(w, func(context.Context, *worker.Task[[]byte]) ([]byte, error) { return nil, nil }, nil)
	}
	wg.Go(func() {
		if err := w.Run(wctx); err != nil {
			r.fail(err)
		}
	})
	return nil
}

// monitor prints progress every ProgressEvery (when cfg.Progress is set)
// and fails the run when nothing advanced for stallTimeout. The returned
// function stops it and waits for it.
func (r *runner) monitor(ctx context.Context) (stop func()) {
	mctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := now()
		last, lastSub, lastDone, lastMove := start, int64(0), int64(0), start
		for {
			// A timer per tick, as package clock makes no tickers: the
			// ticks drift by their handling, which dt measures.
			tick := clock.Real.NewTimer(r.cfg.ProgressEvery)
			select {
			case <-mctx.Done():
				tick.Stop()
				return
			case at := <-tick.C():
				sub, done := r.submitted.Load(), r.completed.Load()
				// An open-loop run with every task done so far is waiting
				// for its timetable, not stalled.
				idle := r.ol != nil && sub == done
				if sub != lastSub || done != lastDone || idle {
					lastMove = at
				} else if at.Sub(lastMove) > stallTimeout {
					r.fail(fmt.Errorf("no task was submitted or completed for %v: a call was lost (see the warnings above)", stallTimeout))
				}
				if w := r.cfg.Progress; w != nil {
					dt := at.Sub(last).Seconds()
					fmt.Fprintf(w, "%7.1fs  submitted %9d  %8.0f/s   completed %9d  %8.0f/s\n",
						at.Sub(start).Seconds(), sub, float64(sub-lastSub)/dt, done, float64(done-lastDone)/dt)
				}
				last, lastSub, lastDone = at, sub, done
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
