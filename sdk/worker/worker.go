package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/internal/backoff"
	"github.com/tenurehq/tenure/sdk/internal/chain"
)

// FencingToken identifies the one commit of a task: the task and the
// attempt whose commit won (the client's FencingToken). On a finalisation
// lease Attempt is the committing attempt, read from the server; if that
// read fails it is the finalisation lease's own attempt, which is why
// effects should be keyed by TaskID alone.
type FencingToken = client.FencingToken

// Options configure a Worker. Queues is required; zero values of the
// others take their defaults.
type Options struct {
	// Queues are the queues to lease from, one or more (at most 32) of
	// Namespace: one pool of Concurrency slots serves them all, and one
	// Lease call asks all of them, starting from a queue that rotates from
	// call to call.
	Queues []string
	// Namespace to lease from (default "default").
	Namespace string
	// WorkerID names this process in leases (default host-pid-random).
	WorkerID string
	// Concurrency is the number of tasks run at once (default 1, at most
	// 10000).
	Concurrency int
	// HeartbeatEvery is the time between heartbeats as a fraction of the
	// task's execution window, in (0, 1) (default 1/3).
	HeartbeatEvery float64
	// PollWait is the long-poll wait of one Lease call (default 10s, at most
	// 30s).
	PollWait time.Duration
	// ReportStart makes the worker report each task's start (a Start call)
	// before its handler runs, so that its execution shows IN_PROGRESS. It
	// costs one call and one log record per task. Off (the default), an
	// execution shows LEASED until it is completed, failed or lost.
	ReportStart bool
	// MaxCompleteBatch is the most completions the worker sends in one
	// CompleteBatch call (default 64, at most 1000). The worker coalesces
	// the completions of its tasks: one call is out at a time, and the
	// completions that arrive meanwhile go together in the next, so a
	// completion under light load is sent at once, alone. Each call also
	// carries the worker's next lease (see the package documentation).
	// 1: one Complete call per task, and no lease carried.
	MaxCompleteBatch int
	// ShutdownGrace is how long running tasks may go on after Run's ctx
	// ended before their contexts are cancelled and their tasks failed
	// (default 30s).
	ShutdownGrace time.Duration
	// Logger receives the worker's logs (default slog.Default()).
	Logger *slog.Logger
	// StopWhenEmpty makes Run stop, as if its ctx had ended, once a Lease
	// finds nothing to lease while no task of this worker runs: no task of
	// its queues is due (tasks waiting for a retry's backoff or their
	// not-before time are left for later), or the queue is paused or at
	// its limits. For scripts and batch jobs that work a queue off and
	// exit. While tasks run, the worker long-polls as usual, so it stops
	// within one PollWait of its last task.
	StopWhenEmpty bool
	// Codec decodes typed tasks' payloads and encodes their results (Handle,
	// HandleResult, HandleEffects). Nil: the client's (client.Options.Codec).
	Codec client.Codec
	// Middleware runs around each attempt, the first outermost (see
	// Middleware). A worker with middleware logs a failed attempt at Debug
	// level only, leaving the line at Info to the middleware.
	Middleware []Middleware
	// TracerProvider makes the OpenTelemetry span of each attempt (nil:
	// the global provider, otel.GetTracerProvider). The span, "process
	// <queue>", is a child of the span the task was submitted from (the
	// client sends its trace context), so one trace runs from the submit
	// through every attempt; the middleware's and the handler's context
	// carries it. It records the task, namespace, attempt and lease, and
	// ends with the attempt's outcome (tenure.outcome, and the error of
	// one that did not complete or snooze).
	TracerProvider trace.TracerProvider
}

const (
	defaultNamespace      = "default"
	maxConcurrency        = 10000
	defaultHeartbeatEvery = 1.0 / 3
	defaultPollWait       = 10 * time.Second
	maxPollWait           = 30 * time.Second
	defaultShutdownGrace  = 30 * time.Second
	// maxIDBytes is the API's limit on identifiers.
	maxIDBytes = 256
	// maxQueues is the API's limit on the queues of one Lease.
	maxQueues               = 32
	defaultMaxCompleteBatch = 64
	// maxCompleteBatch is the API's limit on the items of one CompleteBatch.
	maxCompleteBatch = 1000
	// maxLeaseTasks is the most tasks one Lease call asks for (the server allows 1000).
	maxLeaseTasks = 100
	// maxReasonBytes is the API's limit on a failure reason.
	maxReasonBytes = 4 << 10
	// effectsTries is how often Effects is tried while this worker holds
	// the lease, before the task is left to a finalisation lease.
	effectsTries = 3
	// callTimeout bounds a report (Commit, Complete, Fail) to the server;
	// the client retries unavailable answers within it.
	callTimeout = 30 * time.Second
)

// retryBackoff spaces the worker's retries: of a failed Lease, of an empty
// Lease answer that came early (a draining server), of failed Effects.
var retryBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

func (o *Options) validate() error {
	if o.Namespace == "" {
		o.Namespace = defaultNamespace
	}
	if len(o.Namespace) > maxIDBytes {
		return fmt.Errorf("worker: Options.Namespace is %d bytes; the limit is %d", len(o.Namespace), maxIDBytes)
	}
	if o.WorkerID == "" {
		o.WorkerID = defaultWorkerID()
	}
	if len(o.WorkerID) > maxIDBytes {
		return fmt.Errorf("worker: Options.WorkerID is %d bytes; the limit is %d", len(o.WorkerID), maxIDBytes)
	}
	switch {
	case len(o.Queues) == 0:
		return errors.New("worker: Options.Queues is empty; name the queue (or queues) to lease from")
	case len(o.Queues) > maxQueues:
		return fmt.Errorf("worker: Options.Queues names %d queues; the limit is %d", len(o.Queues), maxQueues)
	}
	for i, q := range o.Queues {
		switch {
		case q == "":
			return fmt.Errorf("worker: Options.Queues[%d] is empty", i)
		case len(q) > maxIDBytes:
			return fmt.Errorf("worker: Options.Queues[%d] is %d bytes; the limit is %d", i, len(q), maxIDBytes)
		case slices.Contains(o.Queues[:i], q):
			return fmt.Errorf("worker: Options.Queues names %q twice", q)
		}
	}
	for i, m := range o.Middleware {
		if m == nil {
			return fmt.Errorf("worker: Options.Middleware[%d] is nil", i)
		}
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = 1
	case o.Concurrency < 0 || o.Concurrency > maxConcurrency:
		return fmt.Errorf("worker: Options.Concurrency %d is outside 1..%d", o.Concurrency, maxConcurrency)
	}
	switch {
	case o.HeartbeatEvery == 0:
		o.HeartbeatEvery = defaultHeartbeatEvery
	case !(o.HeartbeatEvery > 0 && o.HeartbeatEvery < 1): // also rejects NaN
		return fmt.Errorf("worker: Options.HeartbeatEvery %v must be a fraction of the execution window strictly between 0 and 1 (e.g. 0.33)", o.HeartbeatEvery)
	}
	switch {
	case o.PollWait == 0:
		o.PollWait = defaultPollWait
	case o.PollWait < 0 || o.PollWait > maxPollWait:
		return fmt.Errorf("worker: Options.PollWait %v is outside 0..%v (0 for the default %v)", o.PollWait, maxPollWait, defaultPollWait)
	}
	switch {
	case o.MaxCompleteBatch == 0:
		o.MaxCompleteBatch = defaultMaxCompleteBatch
	case o.MaxCompleteBatch < 0 || o.MaxCompleteBatch > maxCompleteBatch:
		return fmt.Errorf("worker: Options.MaxCompleteBatch %d is outside 1..%d (0 for the default %d)", o.MaxCompleteBatch, maxCompleteBatch, defaultMaxCompleteBatch)
	}
	switch {
	case o.ShutdownGrace == 0:
		o.ShutdownGrace = defaultShutdownGrace
	case o.ShutdownGrace < 0:
		return fmt.Errorf("worker: Options.ShutdownGrace %v is negative; use a small positive value to cancel running tasks at once", o.ShutdownGrace)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	var b [4]byte
	rand.Read(b[:])
	id := host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if len(id) > maxIDBytes {
		id = id[len(id)-maxIDBytes:]
	}
	return id
}

// Worker runs the tasks of its queues: it routes each by its kind to the
// handler registered for it. Create it with New, register its handlers
// (Handle, HandleResult, HandleEffects, HandleRaw, HandleOther), and start
// it with Run.
type Worker struct {
	c       *client.Client
	opts    Options
	codec   client.Codec
	lg      *logger
	started atomic.Bool
	// routes holds the handlers by kind; other, if set, the one for every
	// other kind. Registered before Run, read only after.
	routes map[string]*route
	other  *route
	// middleware is Options.Middleware as one; nil without any.
	middleware Middleware
	// tracer makes the attempts' spans, named spanNames[queue].
	tracer    trace.Tracer
	spanNames map[string]string
	// completions coalesces the tasks' Complete calls; Run runs it.
	completions *completer
	// beats heartbeats the running tasks' leases; Run runs it.
	beats *beater
	// slots counts the task slots for the lease loop.
	slots *slots
}

// New returns a Worker of the queues opts names, with no handler yet.
// Zero options take their defaults; an invalid one is an error naming it.
func New(c *client.Client, opts Options) (*Worker, error) {
	if c == nil {
		return nil, errors.New("worker: the client is nil; create one with client.New")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	queues := strings.Join(opts.Queues, ",")
	lg := &logger{base: opts.Logger.With("worker_id", opts.WorkerID, "namespace", opts.Namespace, "queue", queues)}
	spanNames := make(map[string]string, len(opts.Queues))
	for _, q := range opts.Queues {
		spanNames[q] = "process " + q
	}
	return &Worker{c: c, opts: opts, codec: cmp.Or(opts.Codec, c.Codec()), lg: lg, routes: make(map[string]*route),
		middleware:  chain.Of(opts.Middleware), // the first outermost
		tracer:      tracerOf(opts.TracerProvider),
		spanNames:   spanNames,
		completions: newCompleter(c, opts.MaxCompleteBatch, opts.Concurrency, lg),
		beats:       newBeater(c),
		slots:       newSlots(opts.Concurrency)}, nil
}

// errShutdown is the cause of a task context ended by shutdown.
var errShutdown = errors.New("worker: shutting down")

// Run leases and runs tasks until ctx ends, then shuts down gracefully (see
// the package documentation) and returns nil. It returns an error when the
// server rejects the lease request itself (invalid namespace or queue, an
// unknown API), after the same graceful shutdown. Run may be called once,
// after the handlers are registered.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run was already called on this Worker; create a new one")
	}
	if len(w.routes) == 0 && w.other == nil {
		return errors.New("worker: no handler is registered; register one with worker.Handle (or HandleResult, HandleEffects, HandleRaw, HandleOther) before Run")
	}
	// Tasks run under hard, which outlives ctx by up to ShutdownGrace.
	hard, stopTasks := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopTasks(nil)

	var tasks sync.WaitGroup
	// run runs lt, then each task that waited for its slot: on one
	// goroutine, whose stack the tasks before it grew (a new goroutine's
	// would grow again, which costs a handler that decodes JSON more than
	// the decoding).
	run := func(lt *client.LeasedTask) {
		defer tasks.Done()
		for lt != nil {
			a := &attempt{}
			w.runTask(hard, lt, a)
			lt = w.slots.release(a.finishing)
		}
	}
	start := func(lt *client.LeasedTask) {
		tasks.Add(1)
		go run(lt)
	}
	w.slots.start = start
	if w.opts.MaxCompleteBatch > 1 {
		// Each completion call carries the next lease; the lease loop
		// leases when a carried lease came back short, or nothing is
		// finishing.
		w.completions.carry = &carrier{slots: w.slots, live: ctx, next: w.leaseRequest(0, 0)}
	}

	// The completer and the heartbeats outlive every task: they stop after
	// they all ended.
	go w.completions.run(context.WithoutCancel(ctx))
	defer w.completions.stop()
	go w.beats.run()
	defer w.beats.stopRun()

	w.lg.Info("worker started", "concurrency", w.opts.Concurrency, "kinds", w.kinds())
	runErr := w.leaseLoop(ctx, start)

	done := make(chan struct{})
	go func() {
		tasks.Wait()
		close(done)
	}()
	grace := time.NewTimer(w.opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		w.lg.Warn("shutdown grace passed: cancelling running tasks and failing them", "grace", w.opts.ShutdownGrace, "running", w.slots.running())
		stopTasks(errShutdown)
		<-done
	}
	w.lg.Info("worker stopped")
	return runErr
}

// leaseRequest is the worker's lease for max tasks, waiting up to wait
// for them.
func (w *Worker) leaseRequest(max int, wait time.Duration) client.LeaseRequest {
	r := client.LeaseRequest{WorkerID: w.opts.WorkerID, Namespace: w.opts.Namespace, MaxTasks: max, Wait: wait}
	if len(w.opts.Queues) == 1 {
		r.Queue = w.opts.Queues[0]
	} else {
		r.Queues = w.opts.Queues
	}
	return r
}

// leaseLoop leases while ctx lasts and there are free slots (in batches:
// see slots), and hands each leased task, with its slot taken, to start. It
// returns nil when ctx ends.
func (w *Worker) leaseLoop(ctx context.Context, start func(*client.LeasedTask)) error {
	// Failed calls and early empty answers so far in a row: each wait
	// grows with them.
	failures, empties := 0, 0
	// paused is how the queue was paused when the last answer leased
	// nothing for it (nil: not paused), so that a change is logged once.
	var paused *client.QueuePause
	for {
		n := w.slots.take(ctx)
		if n == 0 {
			return nil
		}
		if ctx.Err() != nil {
			// A slot freed as shutdown began: lease nothing more.
			w.slots.put(n)
			return nil
		}
		sent := time.Now()
		wait := w.opts.PollWait
		// Alone (no task runs, no carried lease is out), a worker that
		// stops when empty asks without waiting: an empty answer ends it.
		alone := w.opts.StopWhenEmpty && w.slots.running() == n
		if alone {
			wait = 0
		}
		ans, err := w.c.Lease(ctx, w.leaseRequest(n, wait))
		lts := ans.Tasks
		if len(lts) > n {
			w.lg.Error("the server leased more tasks than asked for; the extra leases will expire", "asked", n, "got", len(lts))
			lts = lts[:n]
		}
		w.slots.put(n - len(lts))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if rejected(err) {
				return fmt.Errorf("worker: the server rejected the lease request, stopping: %w", err)
			}
			wait := retryBackoff.Wait(failures, mrand.Int64N)
			failures++
			w.lg.Error("lease failed; retrying", "err", err, "in", wait)
			if !w.sleep(ctx, wait) {
				return nil
			}
			continue
		}
		failures = 0
		paused = w.notePause(paused, ans)
		for i := range lts {
			start(&lts[i])
		}
		if alone && len(lts) == 0 {
			if paused != nil {
				w.lg.Info("nothing to lease from the paused queue: stopping (StopWhenEmpty)")
				return nil
			}
			w.lg.Info("nothing left to lease: stopping (StopWhenEmpty)")
			return nil
		}
		if len(lts) == 0 && time.Since(sent) < w.opts.PollWait/2 {
			// An empty answer long before the wait ran out: the server ends
			// long-polls early (it is draining for shutdown). Do not spin.
			if !w.sleep(ctx, retryBackoff.Wait(empties, mrand.Int64N)) {
				return nil
			}
			empties++
		} else {
			empties = 0
		}
	}
}

// notePause logs that the queue was paused, when a Lease answers so after
// it was not (was is nil), and that it was resumed, when one leases or
// answers it is not after it was; it returns the pause now in force.
func (w *Worker) notePause(was *client.QueuePause, ans client.LeaseResult) *client.QueuePause {
	now := ans.Paused
	if len(ans.Tasks) > 0 {
		now = nil
	}
	switch {
	case now != nil && was == nil:
		w.lg.Info("the queue is paused: leasing nothing until it is resumed", "paused_by", now.RequestedBy, "reason", now.Reason, "paused_at", now.PausedAt)
	case now == nil && was != nil:
		w.lg.Info("the queue was resumed: leasing again")
	}
	return now
}

// rejected reports whether a failed Lease can never succeed as it is (a bad
// namespace or queue, an API the server lacks, no permission, a TLS
// handshake that fails for good): retrying it would only spin.
func rejected(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnimplemented, connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrTLSRefused)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func (w *Worker) sleep(ctx context.Context, d time.Duration) bool {
	return backoff.Sleep(ctx, d)
}

// reportCtx is the context of a report to the server: it is not ended by
// the task's context (a task cancelled by shutdown must still be failed),
// only bounded in time.
func reportCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
}

// leaseLost reports whether err means this lease has no authority any more:
// it is not the task's current lease, another attempt committed, the task
// is gone, or its state allows nothing more from this attempt.
func leaseLost(err error) bool {
	return errors.Is(err, client.ErrLeaseLost) || errors.Is(err, client.ErrAlreadyCommitted) ||
		errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrWrongState)
}

// attempt holds what runTask needs for one leased attempt, in one
// allocation.
type attempt struct {
	task client.LeasedTask
	lg   logger
	k    keeper // its ctx is the attempt's: it ends when the lease is lost
	// received is when the lease arrived.
	received time.Time
	// finishing is set when the attempt is in its final report (see slots).
	finishing bool
	// span is the attempt's span until runTask ends it.
	span trace.Span
	// hctx is the context of the middleware and the handler (in the
	// attempt, to save an allocation).
	hctx handlerCtx
}

// runTask runs one leased attempt to its end, through the middleware.
func (w *Worker) runTask(hard context.Context, lt *client.LeasedTask, a *attempt) {
	a.received = time.Now()
	t := &a.task
	*t = *lt
	lg := &a.lg
	lg.base, lg.t = w.lg.base, t
	// ctx ends when the lease is lost (cause: errLost) or at shutdown past
	// the grace (cause: errShutdown).
	ctx, lose := context.WithCancelCause(hard)
	defer lose(nil)
	k := &a.k
	w.keepLease(k, ctx, lose, t, a.received, lg)
	defer k.stop()
	// The middleware's and the handler's context carries the attempt's
	// span and its keeper (for ReportProgress).
	a.hctx = handlerCtx{Context: w.startSpan(ctx, a), k: k}
	var f Finish
	if w.middleware == nil {
		f = w.attempt(&a.hctx, a)
	} else {
		f = w.middleware(&a.hctx, t, func(ctx context.Context) Finish { return w.attempt(ctx, a) })
	}
	endSpan(a, f)
}

// attempt runs a's handler (on a finalisation lease, its effects) under
// ctx, and reports how it ended. ctx is the attempt's, or one a middleware
// made from it: its values go with the reports, but only the attempt's own
// (a.k.ctx) says that the lease was lost.
func (w *Worker) attempt(ctx context.Context, a *attempt) Finish {
	t, k, lg := &a.task, &a.k, &a.lg
	r := w.routeOf(t.Kind)
	if t.Committed {
		return w.finalise(ctx, a, r)
	}
	if r == nil {
		k.stop()
		return w.fail(ctx, a, Permanent(w.unknownKind(t.Kind)))
	}
	if w.opts.ReportStart {
		if err := w.c.Start(ctx, client.StartRequest{TaskID: t.ID, LeaseID: t.LeaseID}); err != nil {
			if leaseLost(err) {
				lg.Warn("lease lost before the handler started; skipping the task", "err", err)
				return w.finished(a, Finish{Outcome: OutcomeLost, Err: err})
			}
			lg.Debug("reporting the start failed; running the task anyway", "err", err)
		}
	}
	lg.Debug("running task")
	result, herr := w.callHandler(ctx, r, t, lg)
	if own := k.ctx; own.Err() != nil {
		k.stop()
		cause := context.Cause(own)
		if !errors.Is(cause, errShutdown) {
			lg.Warn("lease lost while the handler ran: result discarded, nothing committed", "cause", cause, "handler_err", herr)
			return w.finished(a, Finish{Outcome: OutcomeLost, Err: cause})
		}
		f := w.fail(ctx, a, errShutdown)
		if f.Outcome != OutcomeUnreported && f.Outcome != OutcomeLost {
			lg.Info("task failed at shutdown; it will be retried", "handler_err", herr)
		}
		return f
	}
	var snoozed *SnoozeError
	if errors.As(herr, &snoozed) {
		k.stop()
		return w.snooze(ctx, a, snoozed)
	}
	if herr != nil {
		k.stop()
		return w.fail(ctx, a, herr)
	}
	if r.apply == nil {
		k.stop()
		return w.complete(ctx, a, result)
	}
	rctx, cancel := reportCtx(ctx)
	tok, err := w.c.Commit(rctx, client.CommitRequest{TaskID: t.ID, LeaseID: t.LeaseID, Result: result, Spawn: k.takeSpawn()})
	cancel()
	if err != nil {
		k.stop()
		if leaseLost(err) {
			lg.Warn("commit refused: another attempt owns the task; effects not applied", "err", err)
			return w.finished(a, Finish{Outcome: OutcomeLost, Err: err})
		}
		lg.Error("commit failed; effects not applied (if the commit did land, a later lease applies them)", "err", err)
		return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: err})
	}
	return w.effectsAndComplete(ctx, a, r, result, tok)
}

// fail reports the attempt failed because of cause: for good if cause is
// Permanent, else retried per the task's policy. errShutdown is reported
// with the reason "worker shutting down".
func (w *Worker) fail(ctx context.Context, a *attempt, cause error) Finish {
	t, lg := &a.task, &a.lg
	permanent := isPermanent(cause)
	why := reason(cause)
	if errors.Is(cause, errShutdown) {
		why = "worker shutting down"
	}
	w.finishing(a)
	rctx, cancel := reportCtx(ctx)
	defer cancel()
	res, err := w.c.Fail(rctx, client.FailRequest{TaskID: t.ID, LeaseID: t.LeaseID, Reason: why, Permanent: permanent})
	switch {
	case err != nil && errors.Is(cause, errShutdown):
		lg.Error("failing the task at shutdown failed; its lease will expire", "err", err)
	case err != nil:
		lg.Error("reporting the handler's failure failed; the lease will expire and the task be retried", "handler_err", cause, "err", err)
	case errors.Is(cause, errShutdown):
	case w.middleware != nil:
		// The middleware hears (and logs) the outcome: one line per
		// attempt is theirs.
		lg.Debug("task attempt failed", "err", cause, "permanent", permanent, "state", res.State.String())
	default:
		lg.Info("task attempt failed", "err", cause, "permanent", permanent, "state", res.State.String())
	}
	return w.failed(a, cause, res, err)
}

// finishing marks a as being in its final report: the lease loop may wait
// for its slot to come back to lease for it together with others.
func (w *Worker) finishing(a *attempt) {
	a.finishing = true
	w.slots.finish()
}

// finalise finishes a task that an earlier attempt committed: its effects
// are applied again (idempotently) and it is completed; the handler does
// not run. r is the handler of its kind (nil: none).
func (w *Worker) finalise(ctx context.Context, a *attempt, r *route) Finish {
	t, k, lg := &a.task, &a.k, &a.lg
	if r == nil {
		// Completing it would skip effects its kind's handler may have:
		// leave it to a worker that knows the kind.
		k.stop()
		err := w.unknownKind(t.Kind)
		lg.Error("a committed task of a kind this worker does not handle: left committed (its lease expires) for a worker that handles it", "err", err)
		return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: err})
	}
	lg.Info("finalising a task committed by an earlier attempt")
	if r.apply == nil {
		k.stop()
		return w.complete(ctx, a, nil)
	}
	tok := FencingToken{TaskID: t.ID, Attempt: t.Attempt}
	if task, err := w.c.GetTask(ctx, client.GetTaskRequest{TaskID: t.ID}); err != nil {
		lg.Warn("could not read the committing attempt; the fencing token carries this lease's attempt", "err", err)
	} else {
		for _, e := range task.Executions {
			if !e.CommittedAt.IsZero() {
				tok.Attempt = e.Attempt
				break
			}
		}
	}
	return w.effectsAndComplete(ctx, a, r, t.CommittedResult, tok)
}

// effectsAndComplete runs the effects of r (while the keeper heartbeats),
// then completes the committed task. If they keep failing the task is left
// COMMITTED: its lease expires and a finalisation lease tries again.
func (w *Worker) effectsAndComplete(ctx context.Context, a *attempt, r *route, result []byte, tok FencingToken) Finish {
	t, k, lg := &a.task, &a.k, &a.lg
	for try := 1; ; try++ {
		err := w.callEffects(ctx, r, t, result, tok, lg)
		if err == nil {
			break
		}
		if try >= effectsTries || ctx.Err() != nil {
			k.stop()
			lg.Error("effects failed; the task stays committed and a later lease applies them again", "tries", try, "err", err, "cause", context.Cause(ctx))
			return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: err})
		}
		wait := retryBackoff.Wait(try-1, mrand.Int64N)
		lg.Warn("effects failed; retrying", "try", try, "err", err, "in", wait)
		if !w.sleep(ctx, wait) {
			k.stop()
			lg.Error("lease lost while retrying effects; a later lease applies them again", "cause", context.Cause(ctx))
			return w.finished(a, Finish{Outcome: OutcomeLost, Err: context.Cause(ctx)})
		}
	}
	k.stop()
	return w.complete(ctx, a, nil)
}

// complete reports the task done. ctx only carries values: the report is
// made even when ctx has ended. A coalesced completion waits for the
// completer's answer without a bound of its own: the completer bounds each
// of its calls by callTimeout and answers every completion it was given.
func (w *Worker) complete(ctx context.Context, a *attempt, result []byte) Finish {
	t, lg := &a.task, &a.lg
	w.finishing(a)
	var rctx context.Context
	if w.opts.MaxCompleteBatch == 1 {
		var cancel context.CancelFunc
		rctx, cancel = reportCtx(ctx)
		defer cancel()
	} else {
		rctx = context.WithoutCancel(ctx)
	}
	if err := w.completions.complete(rctx, client.CompleteRequest{TaskID: t.ID, LeaseID: t.LeaseID, Result: result, Spawn: a.k.takeSpawn()}); err != nil {
		if leaseLost(err) {
			lg.Warn("complete refused: the lease was lost", "err", err)
			return w.finished(a, Finish{Outcome: OutcomeLost, Err: err})
		}
		lg.Error("complete failed; the lease will expire", "err", err)
		return w.finished(a, Finish{Outcome: OutcomeUnreported, Err: err})
	}
	lg.Debug("task completed")
	return w.finished(a, Finish{Outcome: OutcomeCompleted})
}

func (w *Worker) callHandler(ctx context.Context, r *route, t *client.LeasedTask, lg *logger) (result []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: debug.Stack()}
			lg.Error("handler panicked", "panic", v, "stack", string(p.Stack))
			result, err = nil, p
		}
	}()
	return r.run(ctx, t)
}

func (w *Worker) callEffects(ctx context.Context, r *route, t *client.LeasedTask, result []byte, tok FencingToken, lg *logger) (err error) {
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: debug.Stack()}
			lg.Error("effects panicked", "panic", v, "stack", string(p.Stack))
			err = p
		}
	}()
	return r.apply(ctx, t, result, tok)
}

// PanicError is the error of a handler (or effects) that panicked: the
// attempt fails with it, and is retried (not Permanent). Middleware sees
// it in Finish.Err, with the panic's value and stack.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("worker: handler panicked: %v", e.Value) }

// reason is err's message cut to the API's limit on a reason.
func reason(err error) string { return cut(err.Error()) }

// cut is s cut to the API's limit on a reason, on a valid UTF-8 boundary.
func cut(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	s = s[:maxReasonBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// permanentError marks an error that fails the task without retries.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the task fails for good (no retries) when a
// handler returns it. errors.Is and errors.As see through the wrapper.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
