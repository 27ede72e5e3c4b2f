package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/state"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Backend is what the API serves: one coordinator in embedded mode, a
// router over partitions in cluster mode.
type Backend interface {
	Submit(ctx context.Context, req coordinator.SubmitRequest) (coordinator.SubmitResult, error)
	SubmitBatch(ctx context.Context, reqs []coordinator.SubmitRequest) ([]coordinator.SubmitResult, error)
	Get(ctx context.Context, taskID string) (*state.Task, error)
	List(ctx context.Context, f coordinator.ListFilter) ([]*state.Task, uint64, error)
	Kill(ctx context.Context, taskID, reason string) error
	History(ctx context.Context, taskID string) ([]coordinator.HistoryEntry, error)
	Lease(ctx context.Context, req coordinator.LeaseRequest) ([]coordinator.Lease, error)
	Start(ctx context.Context, taskID, leaseID string) error
	Heartbeat(ctx context.Context, taskID, leaseID string) (time.Time, error)
	Commit(ctx context.Context, taskID, leaseID string, result []byte) (coordinator.FencingToken, error)
	Complete(ctx context.Context, taskID, leaseID string, result []byte) error
	// CompleteBatch answers one error per item, in order; the error of the
	// call is for the batch as a whole (see coordinator.CompleteBatch).
	CompleteBatch(ctx context.Context, items []coordinator.CompleteItem) ([]error, error)
	Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (coordinator.FailResult, error)
	// Err is non-nil once the backend stopped serving.
	Err() error
}

// Options configure the API.
type Options struct {
	// MaxRequestBytes caps one request body (default 16 MiB). Payloads have
	// their own, smaller limit in the coordinator.
	MaxRequestBytes int
	Logger          *slog.Logger
}

// Server answers the tenure.v1 API over Connect, gRPC and gRPC-Web, with
// protobuf or JSON bodies.
type Server struct {
	b     Backend
	opts  Options
	drain context.Context
	stop  context.CancelFunc
}

// New returns a Server over b.
func New(b Backend, opts Options) *Server {
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	drain, stop := context.WithCancel(context.Background())
	return &Server{b: b, opts: opts, drain: drain, stop: stop}
}

// Drain ends every long-poll at once (they answer with no task) so that a
// graceful shutdown need not wait for them.
func (s *Server) Drain() { s.stop() }

// Handler returns the HTTP handler for the API and GET /healthz.
func (s *Server) Handler() http.Handler {
	opts := []connect.HandlerOption{
		connect.WithCodec(strictJSON{}),
		connect.WithReadMaxBytes(s.opts.MaxRequestBytes),
		// Compressing small answers costs more CPU than it saves on the
		// wire (gzip resets ~600 KB of tables per message): the profile of
		// `tenure bench` showed a fifth of all CPU in it. Large answers
		// (task lists, histories) are still compressed.
		connect.WithCompressMinBytes(64 << 10),
		connect.WithInterceptors(s.logErrors()),
	}
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewTaskServiceHandler(taskService{s}, opts...))
	mux.Handle(tenurev1connect.NewWorkerServiceHandler(workerService{s}, opts...))
	mux.Handle(tenurev1connect.NewAdminServiceHandler(adminService{s}, opts...))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.b.Err(); err != nil {
			http.Error(w, "not serving: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return withForwarded(mux)
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

type taskService struct{ s *Server }

func (h taskService) Submit(ctx context.Context, req *connect.Request[tenurev1.SubmitRequest]) (*connect.Response[tenurev1.SubmitResponse], error) {
	r, err := submitRequest("", req.Msg)
	if err != nil {
		return nil, apiError(err)
	}
	res, err := h.s.b.Submit(ctx, r)
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.SubmitResponse{Task: task(res.Task), Duplicate: res.Duplicate}), nil
}

func (h taskService) SubmitBatch(ctx context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	reqs := make([]coordinator.SubmitRequest, len(req.Msg.GetRequests()))
	for i, r := range req.Msg.GetRequests() {
		var err error
		if reqs[i], err = submitRequest(fmt.Sprintf("requests[%d].", i), r); err != nil {
			return nil, apiError(err)
		}
	}
	res, err := h.s.b.SubmitBatch(ctx, reqs)
	if err != nil {
		return nil, apiError(err)
	}
	out := &tenurev1.SubmitBatchResponse{Responses: make([]*tenurev1.SubmitResponse, len(res))}
	idsOnly := req.Msg.GetIdsOnly()
	for i, r := range res {
		t := &tenurev1.Task{TaskId: r.Task.ID}
		if !idsOnly {
			t = task(r.Task)
		}
		out.Responses[i] = &tenurev1.SubmitResponse{Task: t, Duplicate: r.Duplicate}
	}
	return connect.NewResponse(out), nil
}

func (h taskService) GetTask(ctx context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	t, err := h.s.b.Get(ctx, req.Msg.GetTaskId())
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.GetTaskResponse{Task: task(t)}), nil
}

func (h taskService) ListTasks(ctx context.Context, req *connect.Request[tenurev1.ListTasksRequest]) (*connect.Response[tenurev1.ListTasksResponse], error) {
	f := coordinator.ListFilter{Namespace: req.Msg.GetNamespace(), Queue: req.Msg.GetQueue(), Limit: int(req.Msg.GetPageSize())}
	st, ok := TaskState(req.Msg.GetState())
	if !ok {
		return nil, apiError(&coordinator.FieldError{Field: "state", Problem: "unknown task state"})
	}
	f.State = st
	if tok := req.Msg.GetPageToken(); tok != "" {
		after, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, apiError(&coordinator.FieldError{Field: "page_token", Problem: "not a token this server issued; pass next_page_token from the previous page"})
		}
		f.After = after
	}
	tasks, next, err := h.s.b.List(ctx, f)
	if err != nil {
		return nil, apiError(err)
	}
	out := &tenurev1.ListTasksResponse{Tasks: make([]*tenurev1.Task, len(tasks))}
	for i, t := range tasks {
		out.Tasks[i] = task(t)
	}
	if next != 0 {
		out.NextPageToken = strconv.FormatUint(next, 10)
	}
	return connect.NewResponse(out), nil
}

func (h taskService) KillTask(ctx context.Context, req *connect.Request[tenurev1.KillTaskRequest]) (*connect.Response[tenurev1.KillTaskResponse], error) {
	if err := h.s.b.Kill(ctx, req.Msg.GetTaskId(), req.Msg.GetReason()); err != nil {
		return nil, apiError(err)
	}
	t, err := h.s.b.Get(ctx, req.Msg.GetTaskId())
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.KillTaskResponse{Task: task(t)}), nil
}

func (h taskService) GetTaskHistory(ctx context.Context, req *connect.Request[tenurev1.GetTaskHistoryRequest]) (*connect.Response[tenurev1.GetTaskHistoryResponse], error) {
	hist, err := h.s.b.History(ctx, req.Msg.GetTaskId())
	if err != nil {
		return nil, apiError(err)
	}
	out := &tenurev1.GetTaskHistoryResponse{Entries: make([]*tenurev1.HistoryEntry, len(hist))}
	for i, e := range hist {
		out.Entries[i] = historyEntry(e)
	}
	return connect.NewResponse(out), nil
}

type workerService struct{ s *Server }

func (h workerService) Lease(ctx context.Context, req *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
	wait, err := duration("wait", req.Msg.GetWait())
	if err != nil {
		return nil, apiError(err)
	}
	// A draining server ends long-polls at once with no task.
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.s.drain, cancel)()
	ls, err := h.s.b.Lease(pollCtx, coordinator.LeaseRequest{
		WorkerID:  req.Msg.GetWorkerId(),
		Namespace: req.Msg.GetNamespace(),
		Queue:     req.Msg.GetQueue(),
		MaxTasks:  int(req.Msg.GetMaxTasks()),
		Wait:      wait,
	})
	if err != nil && h.s.drain.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil {
		return nil, apiError(err)
	}
	out := &tenurev1.LeaseResponse{Tasks: make([]*tenurev1.LeasedTask, len(ls))}
	for i, l := range ls {
		out.Tasks[i] = leasedTask(l)
	}
	return connect.NewResponse(out), nil
}

func (h workerService) Start(ctx context.Context, req *connect.Request[tenurev1.StartRequest]) (*connect.Response[tenurev1.StartResponse], error) {
	if err := h.s.b.Start(ctx, req.Msg.GetTaskId(), req.Msg.GetLeaseId()); err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.StartResponse{}), nil
}

func (h workerService) Heartbeat(ctx context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	exp, err := h.s.b.Heartbeat(ctx, req.Msg.GetTaskId(), req.Msg.GetLeaseId())
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.HeartbeatResponse{LeaseExpiry: timestamppb.New(exp)}), nil
}

func (h workerService) Commit(ctx context.Context, req *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
	tok, err := h.s.b.Commit(ctx, req.Msg.GetTaskId(), req.Msg.GetLeaseId(), req.Msg.GetResult())
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.CommitResponse{FencingToken: &tenurev1.FencingToken{TaskId: tok.TaskID, Attempt: tok.Attempt}}), nil
}

func (h workerService) Complete(ctx context.Context, req *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	if err := h.s.b.Complete(ctx, req.Msg.GetTaskId(), req.Msg.GetLeaseId(), req.Msg.GetResult()); err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.CompleteResponse{}), nil
}

func (h workerService) CompleteBatch(ctx context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	in := req.Msg.GetItems()
	items := make([]coordinator.CompleteItem, len(in))
	for i, r := range in {
		items[i] = coordinator.CompleteItem{TaskID: r.GetTaskId(), LeaseID: r.GetLeaseId(), Result: r.GetResult()}
	}
	errs, err := h.s.b.CompleteBatch(ctx, items)
	if err != nil {
		return nil, apiError(err)
	}
	if len(errs) != len(items) {
		return nil, apiError(fmt.Errorf("CompleteBatch: the backend answered %d results for %d items", len(errs), len(items)))
	}
	results := make([]tenurev1.CompleteResult, len(items))
	out := &tenurev1.CompleteBatchResponse{Results: make([]*tenurev1.CompleteResult, len(items))}
	for i, e := range errs {
		r := &results[i]
		r.TaskId = items[i].TaskID
		if e != nil {
			ce := apiError(e).(*connect.Error)
			r.Code, r.Message, r.Detail = ce.Code().String(), ce.Message(), detailOf(ce)
		}
		out.Results[i] = r
	}
	return connect.NewResponse(out), nil
}

func (h workerService) Fail(ctx context.Context, req *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	res, err := h.s.b.Fail(ctx, req.Msg.GetTaskId(), req.Msg.GetLeaseId(), req.Msg.GetReason(), req.Msg.GetPermanent())
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.FailResponse{State: taskStates[res.State], RetryAt: stdTS(res.RetryAt)}), nil
}
