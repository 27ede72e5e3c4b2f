package remote

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
)

// Backend serves the server.Backend interface by calling the tenure.v1 API
// of another node. It is safe for concurrent use.
type Backend struct {
	node    string
	tasks   tenurev1connect.TaskServiceClient
	workers tenurev1connect.WorkerServiceClient
}

var _ server.Backend = (*Backend)(nil)

// New returns a Backend that calls the node at baseURL (e.g.
// "http://10.0.0.7:7070") through hc (http.DefaultClient if nil), marking
// every request as forwarded by the node with id from. hc must not time out
// a Lease long-poll: calls end with their ctx, whose deadline the far node
// also sees.
func New(baseURL string, hc connect.HTTPClient, from string) *Backend {
	if hc == nil {
		hc = http.DefaultClient
	}
	opts := []connect.ClientOption{connect.WithInterceptors(forwardedBy(from))}
	return &Backend{
		node:    baseURL,
		tasks:   tenurev1connect.NewTaskServiceClient(hc, baseURL, opts...),
		workers: tenurev1connect.NewWorkerServiceClient(hc, baseURL, opts...),
	}
}

// forwardedBy sets server.ForwardedHeader on every request.
func forwardedBy(from string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(server.ForwardedHeader, from)
			return next(ctx, req)
		}
	}
}

// Node returns the base URL of the node the Backend calls.
func (b *Backend) Node() string { return b.node }

// Err is always nil: whether the far node serves shows in each call.
func (b *Backend) Err() error { return nil }

func (b *Backend) err(ctx context.Context, err error) error { return apiError(ctx, b.node, err) }

// bad is an answer that the far node should not have given.
func (b *Backend) bad(format string, args ...any) error {
	return fmt.Errorf("tenure node %s answered something this node cannot read: %s", b.node, fmt.Sprintf(format, args...))
}

func (b *Backend) Submit(ctx context.Context, req coordinator.SubmitRequest) (coordinator.SubmitResult, error) {
	resp, err := b.tasks.Submit(ctx, connect.NewRequest(submitRequest(req)))
	if err != nil {
		return coordinator.SubmitResult{}, b.err(ctx, err)
	}
	t, err := task(resp.Msg.GetTask())
	if err != nil {
		return coordinator.SubmitResult{}, b.bad("%v", err)
	}
	return coordinator.SubmitResult{Task: t, Duplicate: resp.Msg.GetDuplicate()}, nil
}

// SubmitBatch asks for whole tasks (not ids_only): a SubmitResult holds the
// task.
func (b *Backend) SubmitBatch(ctx context.Context, reqs []coordinator.SubmitRequest) ([]coordinator.SubmitResult, error) {
	in := &tenurev1.SubmitBatchRequest{Requests: make([]*tenurev1.SubmitRequest, len(reqs))}
	for i, r := range reqs {
		in.Requests[i] = submitRequest(r)
	}
	resp, err := b.tasks.SubmitBatch(ctx, connect.NewRequest(in))
	if err != nil {
		return nil, b.err(ctx, err)
	}
	res := resp.Msg.GetResponses()
	if len(res) != len(reqs) {
		return nil, b.bad("SubmitBatch: %d results for %d requests", len(res), len(reqs))
	}
	out := make([]coordinator.SubmitResult, len(res))
	for i, r := range res {
		t, err := task(r.GetTask())
		if err != nil {
			return nil, b.bad("SubmitBatch: result %d: %v", i, err)
		}
		out[i] = coordinator.SubmitResult{Task: t, Duplicate: r.GetDuplicate()}
	}
	return out, nil
}

func (b *Backend) Get(ctx context.Context, taskID string) (*state.Task, error) {
	resp, err := b.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: taskID}))
	if err != nil {
		return nil, b.err(ctx, err)
	}
	t, err := task(resp.Msg.GetTask())
	if err != nil {
		return nil, b.bad("%v", err)
	}
	return t, nil
}

// List sends f.After as the page token and reads the next page's back from
// the answer's, both decimal, as package server writes and reads them.
func (b *Backend) List(ctx context.Context, f coordinator.ListFilter) ([]*state.Task, uint64, error) {
	req := &tenurev1.ListTasksRequest{
		Namespace: f.Namespace,
		Queue:     f.Queue,
		// Out of range, the far node refuses it as it refuses any too
		// large page.
		PageSize: int32(max(min(f.Limit, math.MaxInt32), math.MinInt32)),
	}
	if f.State != 0 {
		st, ok := apiTaskStates[f.State]
		if !ok {
			return nil, 0, &coordinator.FieldError{Field: "state", Problem: "unknown task state"}
		}
		req.State = st
	}
	if f.After != 0 {
		req.PageToken = strconv.FormatUint(f.After, 10)
	}
	resp, err := b.tasks.ListTasks(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, 0, b.err(ctx, err)
	}
	var next uint64
	if tok := resp.Msg.GetNextPageToken(); tok != "" {
		if next, err = strconv.ParseUint(tok, 10, 64); err != nil || next == 0 {
			return nil, 0, b.bad("ListTasks: next page token %q is not a number above 0", tok)
		}
	}
	var out []*state.Task
	for i, p := range resp.Msg.GetTasks() {
		t, err := task(p)
		if err != nil {
			return nil, 0, b.bad("ListTasks: task %d: %v", i, err)
		}
		out = append(out, t)
	}
	return out, next, nil
}

func (b *Backend) Kill(ctx context.Context, taskID, reason string) error {
	_, err := b.tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: taskID, Reason: reason}))
	return b.err(ctx, err)
}

// History reads the task's history, then the task: the API summarises each
// record, and the task holds what the summaries leave out (see the package
// comment).
func (b *Backend) History(ctx context.Context, taskID string) ([]coordinator.HistoryEntry, error) {
	resp, err := b.tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: taskID}))
	if err != nil {
		return nil, b.err(ctx, err)
	}
	t, err := b.Get(ctx, taskID)
	if err != nil {
		return nil, err
	}
	out, err := history(resp.Msg.GetEntries(), t)
	if err != nil {
		return nil, b.bad("GetTaskHistory: %v", err)
	}
	return out, nil
}

func (b *Backend) Lease(ctx context.Context, req coordinator.LeaseRequest) ([]coordinator.Lease, error) {
	if req.MaxTasks < 0 {
		return nil, &coordinator.FieldError{Field: "max_tasks", Problem: fmt.Sprintf("%d is negative", req.MaxTasks)}
	}
	resp, err := b.workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{
		WorkerId:  req.WorkerID,
		Namespace: req.Namespace,
		Queue:     req.Queue,
		MaxTasks:  uint32(min(int64(req.MaxTasks), math.MaxUint32)),
		Wait:      optDuration(req.Wait),
	}))
	if err != nil {
		return nil, b.err(ctx, err)
	}
	var out []coordinator.Lease
	for _, l := range resp.Msg.GetTasks() {
		// The coordinator grants every lease to the requesting worker.
		out = append(out, lease(l, req.WorkerID))
	}
	return out, nil
}

func (b *Backend) Start(ctx context.Context, taskID, leaseID string) error {
	_, err := b.workers.Start(ctx, connect.NewRequest(&tenurev1.StartRequest{TaskId: taskID, LeaseId: leaseID}))
	return b.err(ctx, err)
}

func (b *Backend) Heartbeat(ctx context.Context, taskID, leaseID string) (time.Time, error) {
	resp, err := b.workers.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: taskID, LeaseId: leaseID}))
	if err != nil {
		return time.Time{}, b.err(ctx, err)
	}
	return stdTime(resp.Msg.GetLeaseExpiry()), nil
}

func (b *Backend) Commit(ctx context.Context, taskID, leaseID string, result []byte) (coordinator.FencingToken, error) {
	resp, err := b.workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: taskID, LeaseId: leaseID, Result: result}))
	if err != nil {
		return coordinator.FencingToken{}, b.err(ctx, err)
	}
	tok := resp.Msg.GetFencingToken()
	return coordinator.FencingToken{TaskID: tok.GetTaskId(), Attempt: tok.GetAttempt()}, nil
}

func (b *Backend) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := b.workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: taskID, LeaseId: leaseID, Result: result}))
	return b.err(ctx, err)
}

// CompleteBatch reads each item's answer back from its code and message,
// as package server writes them.
func (b *Backend) CompleteBatch(ctx context.Context, items []coordinator.CompleteItem) ([]error, error) {
	in := &tenurev1.CompleteBatchRequest{Items: make([]*tenurev1.CompleteRequest, len(items))}
	for i, it := range items {
		in.Items[i] = &tenurev1.CompleteRequest{TaskId: it.TaskID, LeaseId: it.LeaseID, Result: it.Result}
	}
	resp, err := b.workers.CompleteBatch(ctx, connect.NewRequest(in))
	if err != nil {
		return nil, b.err(ctx, err)
	}
	res := resp.Msg.GetResults()
	if len(res) != len(items) {
		return nil, b.bad("CompleteBatch: %d results for %d items", len(res), len(items))
	}
	errs := make([]error, len(items))
	for i, r := range res {
		if r.GetTaskId() != items[i].TaskID {
			return nil, b.bad("CompleteBatch: result %d is for task %q, not %q", i, r.GetTaskId(), items[i].TaskID)
		}
		errs[i] = itemError(b.node, r.GetCode(), r.GetMessage())
	}
	return errs, nil
}

func (b *Backend) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (coordinator.FailResult, error) {
	resp, err := b.workers.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: taskID, LeaseId: leaseID, Reason: reason, Permanent: permanent}))
	if err != nil {
		return coordinator.FailResult{}, b.err(ctx, err)
	}
	st, err := taskState(resp.Msg.GetState())
	if err != nil {
		return coordinator.FailResult{}, b.bad("Fail: %v", err)
	}
	return coordinator.FailResult{State: st, RetryAt: stdTime(resp.Msg.GetRetryAt())}, nil
}
