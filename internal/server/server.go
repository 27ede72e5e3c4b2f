package server

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// Defaults of Options.
const (
	DefaultMaxRequestBytes = 16 << 20
	DefaultMaxRemotePoll   = 100 * time.Millisecond
	minRemotePoll          = time.Millisecond
)

// Snapshotter takes a snapshot on demand (`tenure admin snapshot`): of
// the one partition of an embedded node, or of every partition a cluster
// node serves.
type Snapshotter interface {
	Snapshot(ctx context.Context) (coordinator.SnapshotResult, error)
}

// Options configure the API.
type Options struct {
	// Nodes checks requests that say they were forwarded by another node
	// (route.ForwardedHeader): in cluster mode the member, which verifies
	// the cluster's signature (nil: the router, if it is a NodeVerifier).
	// None (embedded mode): such a request is refused, since no node
	// forwards to this server.
	Nodes route.NodeVerifier

	// MaxRequestBytes caps the body of a batch, SubmitBatch or
	// CompleteBatch (default 16 MiB, raised to the cap of a single
	// Submit, Commit or Complete if that is larger). Every other call's
	// body has a smaller cap derived from Limits (bodyCaps).
	MaxRequestBytes int
	// Load bounds what clients can hold of the server at once:
	// connections, timeouts, the bytes of bodies being read, long-polls
	// (limits.go). Zero fields take their defaults.
	Load LoadLimits
	// Limits are the coordinators' limits (zero fields: the defaults). The
	// API checks with them what spans partitions as a whole: a batch over
	// several partitions is refused before any part of it is created.
	Limits coordinator.Limits
	// MaxRemotePoll is the longest interval between polls of other nodes'
	// partitions while a Lease long-polls (default 100 ms).
	MaxRemotePoll time.Duration
	// Snapshots answers AdminService.Snapshot (unimplemented if nil).
	Snapshots Snapshotter
	// Pprof serves Go's profiler (net/http/pprof) under /debug/pprof/,
	// to loopback clients only (403 for others); off, /debug/pprof/ is
	// 404. See probes.go.
	Pprof bool
	// Clock times long-polls across partitions (default clock.Real).
	Clock  clock.Clock
	Logger *slog.Logger
	// Reword, if set, rewrites the message of every error this server
	// answers. It exists for tests, which use it to show that no caller —
	// the SDK, the CLI, another node — depends on a message's wording.
	Reword func(message string) string
	// Metrics, if set, is served at GET /metrics and times every call.
	Metrics Metrics
	// Auth, if set, authenticates every call by its bearer token and
	// authorises it (auth.go); nil serves every caller.
	Auth Authenticator
	// Events, if set, serves EventService.WatchEvents from the partitions'
	// feeds (events.go); nil: unimplemented.
	Events EventSource
	// Dashboard, if set, serves the web dashboard (package ui) at GET /
	// and GET /assets/, without a token: the pages are static and every
	// call they make is authorised as any other.
	Dashboard http.Handler
}

// Server answers the tenure.v1 API over Connect, gRPC and gRPC-Web, with
// protobuf or JSON bodies.
type Server struct {
	r     route.Router
	opts  Options
	drain context.Context
	stop  context.CancelFunc

	caps     map[string]bodyCap // by procedure; otherCap for the rest
	otherCap bodyCap
	budget   *byteBudget
	polls    longPolls
	// headersTooLarge is the answer to a request whose headers are over
	// LoadLimits.MaxHeaderBytes, in full (conns.go).
	headersTooLarge []byte
	// leaseTurn rotates the queue a lease from several starts with.
	leaseTurn atomic.Uint64
	// streams counts the event streams open (enterStream).
	streams atomic.Int64
	// outboxes reports the outboxes the process relays (ReportOutboxes);
	// nil: none.
	outboxes atomic.Pointer[func() []*tenurev1.Outbox]
}

// New returns a Server over the partitions r routes to.
func New(r route.Router, opts Options) *Server {
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if opts.MaxRemotePoll <= 0 {
		opts.MaxRemotePoll = DefaultMaxRemotePoll
	}
	opts.MaxRemotePoll = max(opts.MaxRemotePoll, minRemotePoll)
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if v, ok := r.(route.NodeVerifier); ok && opts.Nodes == nil {
		opts.Nodes = v // a cluster member checks its peers' signatures
	}
	opts.Load = opts.Load.WithDefaults()
	s := &Server{r: r, opts: opts}
	s.drain, s.stop = context.WithCancel(context.Background())
	s.caps, s.otherCap = bodyCaps(opts.Limits, opts.MaxRequestBytes)
	largest := s.otherCap.limit
	for _, c := range s.caps {
		largest = max(largest, c.limit)
	}
	// Every body a call may have fits the budget alone, beside the small
	// bodies' share.
	s.budget = newByteBudget(max(opts.Load.MaxInflightBodyBytes, largest+largest/7+1))
	s.headersTooLarge = closingAnswer(http.StatusRequestHeaderFieldsTooLarge, s.apiError(&limitError{
		kind: coordinator.ErrTooLarge, field: "headers", limit: int64(opts.Load.MaxHeaderBytes),
		msg: fmt.Sprintf("%v: the request's headers are over %d bytes, the limit of one request's headers (--max-header-bytes): send fewer or shorter headers",
			coordinator.ErrTooLarge, opts.Load.MaxHeaderBytes)}))
	return s
}

// Drain ends every long-poll at once (they answer with no task) so that a
// graceful shutdown need not wait for them.
func (s *Server) Drain() { s.stop() }

// Handler returns the HTTP handler for the API and for the probes and
// tools pointed at it (mountProbes).
func (s *Server) Handler() http.Handler {
	opts := []connect.HandlerOption{
		connect.WithCodec(strictJSON{}),
		// A compressed body is capped again once decompressed.
		connect.WithConditionalHandlerOptions(func(spec connect.Spec) []connect.HandlerOption {
			return []connect.HandlerOption{connect.WithReadMaxBytes(int(s.bodyCap(spec.Procedure).limit))}
		}),
		// Compressing small answers costs more CPU than it saves on the
		// wire (gzip resets ~600 KB of tables per message): the profile of
		// `tenure bench` showed a fifth of all CPU in it. Large answers
		// (task lists, histories) are still compressed.
		connect.WithCompressMinBytes(64 << 10),
	}
	opts = append(opts, s.metricsOptions()...)
	opts = append(opts, s.authOptions()...)
	opts = append(opts, connect.WithInterceptors(s.logErrors()))
	mux := http.NewServeMux()
	s.mountMetrics(mux)
	mux.Handle(tenurev1connect.NewTaskServiceHandler(taskService{s}, opts...))
	mux.Handle(tenurev1connect.NewWorkerServiceHandler(workerService{s}, opts...))
	mux.Handle(tenurev1connect.NewAdminServiceHandler(adminService{s}, opts...))
	mux.Handle(tenurev1connect.NewQueueServiceHandler(queueService{s}, opts...))
	mux.Handle(tenurev1connect.NewScheduleServiceHandler(scheduleService{s}, opts...))
	// An event stream's answers are not compressed, however large: with
	// ten streams, gzip was two fifths of the server's CPU (the answers of
	// a stream are the same records for every stream, compressed again
	// for each).
	eventsPath, eventsHandler := tenurev1connect.NewEventServiceHandler(eventService{s}, append(opts, connect.WithCompressMinBytes(math.MaxInt32))...)
	mux.Handle(eventsPath, streamDeadlines(eventsHandler))
	mux.Handle(tenurev1connect.NewOutboxServiceHandler(outboxService{s}, opts...))
	mux.Handle(tenurev1connect.NewWorkflowServiceHandler(workflowService{s}, opts...))
	s.mountProbes(mux)
	s.mountNodeProbe(mux)
	s.mountNodeCalls(mux)
	if s.opts.Dashboard != nil {
		// "/{$}" is / alone: the API's paths, the probes and /metrics are
		// never the dashboard's, whatever the order of these lines.
		mux.Handle("GET /{$}", s.opts.Dashboard)
		mux.Handle("GET /assets/", s.opts.Dashboard)
	}
	return s.limitBodies(s.forwarded(unaryAnswers(mux)))
}

// logErrors logs internal and unavailable errors: the ones an operator must
// see. Client mistakes are the client's to log.
func (s *Server) logErrors() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if code := connect.CodeOf(err); code == connect.CodeInternal || code == connect.CodeUnavailable {
				s.opts.Logger.Error("request failed", "procedure", req.Spec().Procedure, "code", code.String(), "err", err)
			}
			return resp, err
		}
	}
}

// strictJSON is Connect's JSON codec without DiscardUnknown: a misspelt
// field is an error the client sees, not a silently ignored value.
type strictJSON struct{}

func (strictJSON) Name() string { return "json" }

func (strictJSON) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("json codec: %T is not a proto message", m)
	}
	return protojson.MarshalOptions{}.Marshal(msg)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("json codec: %T is not a proto message", m)
	}
	if len(b) == 0 {
		b = []byte("{}")
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, msg); err != nil {
		return fmt.Errorf("the request body is not valid JSON for %s (check field names and types; bytes fields are base64): %w", msg.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// one runs a call addressed to one partition: on its coordinator when this
// node serves it (local builds the answer), else forwarded to the node
// that does as the original request, whose answer — or error, with its
// code, message and details — is handed back unchanged.
func one[Req, Resp any](s *Server, ctx context.Context, p route.Partition, read bool, req *connect.Request[Req],
	forward func(route.Peer, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	local func(*coordinator.Coordinator) (*Resp, error)) (*connect.Response[Resp], error) {
	out, err := fanout.Call(ctx, p, read, local, func(peer route.Peer) (*Resp, error) {
		resp, err := forward(peer, ctx, connect.NewRequest(req.Msg))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
	if err != nil {
		return nil, s.apiError(err)
	}
	return connect.NewResponse(out), nil
}

// byTask is one for the partition that holds taskID; the task is checked
// against the caller's scope (checkTask) before local acts on it.
func byTask[Req, Resp any](s *Server, ctx context.Context, taskID string, read bool, req *connect.Request[Req],
	forward func(route.Peer, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	local func(*coordinator.Coordinator) (*Resp, error)) (*connect.Response[Resp], error) {
	p, err := s.r.Task(ctx, taskID)
	if err != nil {
		return nil, s.apiError(err)
	}
	return one(s, ctx, p, read, req, forward, func(c *coordinator.Coordinator) (*Resp, error) {
		if err := s.checkTask(ctx, c, taskID); err != nil {
			return nil, err
		}
		return local(c)
	})
}
