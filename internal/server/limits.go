package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// What one client may hold of a server is bounded, so that hostile or
// broken clients cannot exhaust it (docs/guides/limits.md): connections
// (Serve's listener), the time to send headers and bodies and to take answers,
// the size of each request body and the bytes of bodies being read at once
// (bodies.go), the size of a request's headers and the bytes read of a
// request refused unread (conns.go), and the Lease calls long-polling at
// once, per server and per worker id (below). Each limit hit is counted by
// Metrics.LimitHit under one of these names.
const (
	LimitConnections        = "connections"
	LimitHeaderReadTimeout  = "header_read_timeout"
	LimitBodyReadTimeout    = "body_read_timeout"
	LimitWriteTimeout       = "write_timeout"
	LimitRequestBytes       = "request_bytes"
	LimitInflightBytes      = "inflight_request_bytes"
	LimitLongPolls          = "long_polls"
	LimitLongPollsPerWorker = "long_polls_per_worker"
	LimitWaiters            = "waiters"
	LimitHeaderBytes        = "header_bytes"
	LimitDiscardBytes       = "discard_bytes"
	LimitEventStreams       = "event_streams"
	// LimitMemory counts the writes refused by the node's memory budget
	// (coordinator.MemoryBudget).
	LimitMemory = "memory"
)

// LoadLimits bound what clients can hold of a server at once. Zero fields
// take their defaults (DefaultLoadLimits).
type LoadLimits struct {
	// MaxConnections caps the connections open at once; Serve closes
	// every connection accepted past it at once.
	MaxConnections int
	// ReadHeaderTimeout, IdleTimeout and WriteTimeout are for the
	// http.Server of Serve (http.Server fields of the same names), which
	// counts header and write timeouts.
	// WriteTimeout runs from the end of a request's headers to the end of
	// its answer, so it must exceed BodyReadTimeout plus the longest
	// long-poll (coordinator.Limits.MaxWait).
	ReadHeaderTimeout, IdleTimeout, WriteTimeout time.Duration
	// BodyReadTimeout bounds the time from a request's headers to the end
	// of its body: a client that stalls mid-body is answered
	// deadline_exceeded and its connection (HTTP/1.1) or stream (HTTP/2)
	// closed.
	BodyReadTimeout time.Duration
	// MaxInflightBodyBytes caps the request body bytes being read at once
	// over all requests (raised so that the largest body one call may have
	// fits), an eighth of it kept for bodies of at most 64 KiB (byteBudget).
	// A body that does not fit waits up to a second for room, then is
	// answered unavailable: retry.
	MaxInflightBodyBytes int64
	// MaxLongPolls caps the Lease calls waiting for tasks at once;
	// MaxLongPollsPerWorker those of one worker id. A Lease past either is
	// answered resource_exhausted at once.
	MaxLongPolls, MaxLongPollsPerWorker int
	// MaxWaiters caps the WaitTask and WaitWorkflow calls waiting at once;
	// one past it is answered resource_exhausted at once.
	MaxWaiters int
	// MaxHeaderBytes caps a request's headers (the http.Server field of
	// the same name): net/http refuses more with 431, which Serve's
	// connections answer as the API's resource_exhausted.
	MaxHeaderBytes int
	// MaxDiscardBytes caps what the server reads and throws away of a
	// request it refused before reading it in full (the rest of its body
	// or headers), so that a client that sends its whole request before
	// it reads the answer gets the answer rather than a reset (conns.go,
	// lingerClose).
	MaxDiscardBytes int64
	// MaxEventStreams caps the WatchEvents streams open at once; a call
	// past it is answered resource_exhausted at once.
	MaxEventStreams int
}

// DefaultLoadLimits are the limits a zero LoadLimits stands for, and the
// defaults of `tenure server`'s flags.
var DefaultLoadLimits = LoadLimits{
	MaxConnections:        4096,
	ReadHeaderTimeout:     10 * time.Second,
	IdleTimeout:           2 * time.Minute,
	WriteTimeout:          2 * time.Minute,
	BodyReadTimeout:       30 * time.Second,
	MaxInflightBodyBytes:  64 << 20,
	MaxLongPolls:          4096,
	MaxLongPollsPerWorker: 16,
	MaxWaiters:            10_000,
	MaxHeaderBytes:        64 << 10,
	MaxDiscardBytes:       128 << 20,
	MaxEventStreams:       256,
}

// WithDefaults returns l with every zero (or negative) field set to its
// default.
func (l LoadLimits) WithDefaults() LoadLimits {
	d := DefaultLoadLimits
	pos(&l.MaxConnections, d.MaxConnections)
	pos(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pos(&l.IdleTimeout, d.IdleTimeout)
	pos(&l.WriteTimeout, d.WriteTimeout)
	pos(&l.BodyReadTimeout, d.BodyReadTimeout)
	pos(&l.MaxInflightBodyBytes, d.MaxInflightBodyBytes)
	pos(&l.MaxLongPolls, d.MaxLongPolls)
	pos(&l.MaxLongPollsPerWorker, d.MaxLongPollsPerWorker)
	pos(&l.MaxWaiters, d.MaxWaiters)
	pos(&l.MaxHeaderBytes, d.MaxHeaderBytes)
	pos(&l.MaxDiscardBytes, d.MaxDiscardBytes)
	pos(&l.MaxEventStreams, d.MaxEventStreams)
	return l
}

// pos sets *v to def unless it is positive.
func pos[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// limitError is a request refused by one of this server's limits. It
// wraps coordinator.ErrTooLarge (resource_exhausted) or ErrUnavailable,
// and its field, size and limit become the answer's ErrorDetail.
type limitError struct {
	kind        error
	field       string
	size, limit int64
	msg         string
}

func (e *limitError) Error() string { return e.msg }
func (e *limitError) Unwrap() error { return e.kind }

// hit counts one hit of the limit named (a Limit constant).
func (s *Server) hit(limit string) {
	if s.opts.Metrics != nil {
		s.opts.Metrics.LimitHit(limit)
	}
}

// Body caps. Every call's body is capped by what its fields can hold
// under the coordinator's limits: a payload or result as base64 in JSON
// (4/3 of its bytes) and otherSlack for the rest. A batch is capped by
// Options.MaxRequestBytes instead.
const otherSlack = 64 << 10

// bodyCap is the largest body one procedure accepts, and why, for the
// message that refuses a larger one.
type bodyCap struct {
	limit int64
	why   string
}

// base64Len is the length of n bytes in base64.
func base64Len(n int) int64 { return int64(n+2) / 3 * 4 }

// bodyCaps returns the body cap of each procedure that carries a payload
// or a result, and the cap of every other request.
func bodyCaps(l coordinator.Limits, maxRequest int) (map[string]bodyCap, bodyCap) {
	payload := cmp.Or(l.MaxPayloadBytes, coordinator.DefaultLimits.MaxPayloadBytes)
	result := cmp.Or(l.MaxResultBytes, coordinator.DefaultLimits.MaxResultBytes)
	sub := bodyCap{base64Len(payload) + otherSlack,
		fmt.Sprintf("room for a payload of %d bytes (the payload limit, --max-payload-bytes) as base64, and %d KiB for the other fields", payload, otherSlack>>10)}
	res := bodyCap{base64Len(result) + otherSlack,
		fmt.Sprintf("room for a result of %d bytes (the result limit) as base64, and %d KiB for the other fields", result, otherSlack>>10)}
	batch := bodyCap{max(int64(maxRequest), sub.limit, res.limit),
		"the limit of a batch (--max-request-bytes): split it into smaller batches"}
	// A commit may carry the tasks it spawns: as much as a batch.
	spawn := bodyCap{batch.limit, "the limit of a batch (--max-request-bytes), for a result and the tasks it spawns: spawn fewer, or smaller, tasks"}
	// A delivery holds tasks of one record (docs/design/workflows.md,
	// "Cluster mode").
	atomic := cmp.Or(l.MaxAtomicBytes, coordinator.DefaultLimits.MaxAtomicBytes)
	deliver := bodyCap{max(int64(atomic)+otherSlack, batch.limit), "the limit of one record's tasks (--max-atomic-bytes)"}
	return map[string]bodyCap{
		tenurev1connect.TaskServiceSubmitProcedure:             sub,
		tenurev1connect.ScheduleServiceCreateScheduleProcedure: sub,
		tenurev1connect.ScheduleServiceUpdateScheduleProcedure: sub,
		tenurev1connect.WorkerServiceCommitProcedure:           spawn,
		tenurev1connect.WorkerServiceCompleteProcedure:         spawn,
		tenurev1connect.TaskServiceSubmitBatchProcedure:        batch,
		tenurev1connect.WorkerServiceCompleteBatchProcedure:    batch,
		tenurev1connect.OutboxServiceRelayProcedure:            batch,
		tenurev1connect.OutboxServiceReleaseProcedure:          batch,
		route.DeliverPath: deliver,
		route.WherePath: {2*route.WhereMaxIDBytes + 3*route.WhereMaxTasks + otherSlack,
			fmt.Sprintf("room for %d task ids of %d KiB together (what a node asks at most at once)", route.WhereMaxTasks, route.WhereMaxIDBytes>>10)},
	}, bodyCap{otherSlack, "ample for every field of the call"}
}

// bodyCap returns the cap of a request to path (a procedure).
func (s *Server) bodyCap(path string) bodyCap {
	if c, ok := s.caps[path]; ok {
		return c
	}
	return s.otherCap
}

// byteBudget is the request body bytes being read at once. A body takes
// its share before its first byte is read and gives it back when its
// request ends; one that does not fit waits for room up to budgetWait.
// Whoever fits goes first, and an eighth of the budget is kept for small
// bodies (at most otherSlack): a flood of large bodies does not hold up
// the small calls of normal clients (reads, heartbeats, leases, small
// submits).
type byteBudget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	large int64         // what large bodies may take in all: max less the small bodies' share
	freed chan struct{} // closed (and replaced) whenever bytes are given back
}

// budgetWait is how long a body waits for room in the byte budget before
// it is refused as unavailable.
const budgetWait = time.Second

func newByteBudget(max int64) *byteBudget {
	return &byteBudget{max: max, large: max - max/8, freed: make(chan struct{})}
}

// take takes n bytes (a large body at most what large bodies may take),
// waiting up to wait on clk for room, and returns what it took; without
// room in time, it refuses the body as unavailable.
func (b *byteBudget) take(ctx context.Context, n int64, clk clock.Clock, wait time.Duration) (int64, error) {
	limit := b.max
	if n > otherSlack {
		limit = b.large
	}
	n = min(n, limit)
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= limit {
			b.used += n
			b.mu.Unlock()
			return n, nil
		}
		used, freed := b.used, b.freed
		b.mu.Unlock()
		if timeout == nil {
			t := clk.NewTimer(wait)
			defer t.Stop()
			timeout = t.C()
		}
		select {
		case <-freed:
		case <-timeout:
			return 0, &limitError{kind: coordinator.ErrUnavailable, size: used + n, limit: b.max,
				msg: fmt.Sprintf("%v: server busy: %d bytes of request bodies are being read and this one needs %d more, over the limit of %d (--max-inflight-request-bytes, an eighth of it kept for bodies of at most 64 KiB); retry shortly",
					coordinator.ErrUnavailable, used, n, b.max)}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// give gives n bytes back.
func (b *byteBudget) give(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// longPolls counts the Lease calls waiting for tasks, in all and by
// worker id.
type longPolls struct {
	mu       sync.Mutex
	total    int
	byWorker map[string]int
	// waiters counts the WaitTask and WaitWorkflow calls that wait.
	waiters int
}

// enterLongPoll admits one waiting Lease of worker, or refuses it past
// LoadLimits.MaxLongPolls or MaxLongPollsPerWorker. leave ends it.
func (s *Server) enterLongPoll(worker string) (leave func(), err error) {
	p, l := &s.polls, s.opts.Load
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total >= l.MaxLongPolls {
		return nil, s.tooManyWaiting(LimitLongPolls, p.total, l.MaxLongPolls,
			fmt.Sprintf("too many long-polls: %d Lease calls are waiting for tasks on this server, the limit (--max-long-polls); retry with backoff, or lease with wait 0",
				l.MaxLongPolls))
	}
	if n := p.byWorker[worker]; n >= l.MaxLongPollsPerWorker {
		return nil, s.tooManyWaiting(LimitLongPollsPerWorker, n, l.MaxLongPollsPerWorker,
			fmt.Sprintf("too many long-polls: worker %q has %d Lease calls waiting for tasks, the limit per worker id (--max-long-polls-per-worker); "+
				"wait for one to answer, or lease several tasks per call (max_tasks)", worker, n))
	}
	if p.byWorker == nil {
		p.byWorker = make(map[string]int)
	}
	p.total++
	p.byWorker[worker]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.total--
		if p.byWorker[worker]--; p.byWorker[worker] == 0 {
			delete(p.byWorker, worker)
		}
	}, nil
}

// tooManyWaiting counts a hit of the limit of calls waiting (kind), n of
// limit of them waiting already, and refuses the call: resource_exhausted,
// field wait, with msg.
func (s *Server) tooManyWaiting(kind string, n, limit int, msg string) error {
	s.hit(kind)
	return &limitError{kind: coordinator.ErrTooLarge, field: "wait", size: int64(n) + 1, limit: int64(limit), msg: msg}
}

// enterWait reads the wait of a WaitTask or WaitWorkflow call and admits
// it if it waits, or refuses it past LoadLimits.MaxWaiters. leave ends it.
func (s *Server) enterWait(d *durationpb.Duration) (wait time.Duration, leave func(), err error) {
	if wait, err = duration("wait", d); err != nil || wait == 0 {
		return wait, func() {}, err
	}
	leave, err = s.admitWaiter()
	return wait, leave, err
}

// admitWaiter admits one call that waits, or refuses it past
// LoadLimits.MaxWaiters. leave ends it.
func (s *Server) admitWaiter() (leave func(), err error) {
	p, l := &s.polls, s.opts.Load
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters >= l.MaxWaiters {
		return nil, s.tooManyWaiting(LimitWaiters, p.waiters, l.MaxWaiters,
			fmt.Sprintf("too many waiters: %d calls are waiting for tasks or workflows to end on this server, the limit (--max-waiters); retry with backoff, or ask with wait 0",
				l.MaxWaiters))
	}
	p.waiters++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.waiters--
	}, nil
}

// isLimit reports whether err is a refusal by one of this server's limits,
// and returns it.
func isLimit(err error) (*limitError, bool) {
	var le *limitError
	ok := errors.As(err, &le)
	return le, ok
}
