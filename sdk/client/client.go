package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/internal/backoff"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Protocols a Client can speak.
const (
	ProtocolConnect = "connect"
	ProtocolJSON    = "json"
	ProtocolGRPC    = "grpc"
)

// Limits of the retry configuration.
const (
	defaultMaxRetries   = 5
	maxMaxRetries       = 100
	defaultRetryBackoff = 100 * time.Millisecond
	maxRetryBackoff     = 5 * time.Second
)

// Options configure a Client. The zero value works.
type Options struct {
	// HTTPClient sends the requests. Default: a client of its own with
	// unencrypted HTTP/2 (h2c) when Protocol is "grpc", HTTP/1.1 and HTTP/2
	// over TLS otherwise. It must not time out a Lease long-poll: give it a
	// timeout above the longest Lease wait, or none (calls end with their
	// ctx).
	HTTPClient *http.Client
	// TLSConfig configures TLS for an https:// base URL (nil: the system's
	// roots, no client certificate): the CA to trust, a client certificate.
	// LoadTLSConfig makes one from PEM files. It applies to the default HTTP
	// client; with HTTPClient set, configure TLS on its transport instead.
	TLSConfig *tls.Config
	// Protocol is "connect" (default: Connect with protobuf bodies), "json"
	// (Connect with JSON bodies) or "grpc".
	Protocol string
	// MaxRetries is how often a call that failed with unavailable is
	// retried (default 5, at most 100; negative: never). Only unavailable is
	// retried.
	MaxRetries int
	// RetryBackoff is the wait before the first retry (default 100ms); it
	// doubles for each further retry, with jitter, up to 5s.
	RetryBackoff time.Duration
	// RequestedBy says who asks, for the calls that change something on an
	// operator's behalf (KillTask, RetryTask, RetryTasks, KillTasks,
	// PurgeTasks, PauseQueue, ResumeQueue, SetQueueLimits and the schedule
	// calls that change one) whose request does not say it itself: it is
	// kept in the records they write (the task's history, the queue's pause
	// and limits, the schedule's creator and pause). The tenure CLI sends user@host. It is what the
	// caller declares: a server with authentication on records the token's
	// name instead. At most 256 bytes.
	RequestedBy string
	// Token, if set, is sent with every call as its bearer token (the
	// header Authorization: Bearer <Token>; gRPC metadata alike), for a
	// server that authenticates callers (`tenure server --auth-file`).
	// `tenure token create` makes one. A refused token fails calls with
	// ErrUnauthenticated or ErrPermissionDenied.
	Token string
}

// Client calls a tenure server. It is safe for concurrent use.
type Client struct {
	tasks       tenurev1connect.TaskServiceClient
	workers     tenurev1connect.WorkerServiceClient
	queues      tenurev1connect.QueueServiceClient
	schedules   tenurev1connect.ScheduleServiceClient
	maxRetries  int
	backoff     backoff.Policy
	requestedBy string
}

// New returns a Client for the server at baseURL, e.g.
// "http://127.0.0.1:7070". It does not connect: the first call does.
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL %q is not a URL: %w; give it as http://host:port", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: base URL %q must start with http:// or https:// (e.g. http://127.0.0.1:7070)", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q has no host; give it as http://host:port", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: base URL %q must not carry a query, fragment or user info; give it as http://host:port[/path]", baseURL)
	}
	if opts.TLSConfig != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("client: Options.TLSConfig is set but base URL %q is not https://; give it as https://host:port", baseURL)
	}
	if opts.TLSConfig != nil && opts.HTTPClient != nil {
		return nil, errors.New("client: Options.TLSConfig and Options.HTTPClient are both set; configure TLS on the HTTPClient's transport (TLSClientConfig), or leave HTTPClient nil")
	}
	var copts []connect.ClientOption
	switch opts.Protocol {
	case "", ProtocolConnect:
		opts.Protocol = ProtocolConnect
	case ProtocolJSON:
		copts = append(copts, connect.WithProtoJSON())
	case ProtocolGRPC:
		if u.Scheme == "http" && opts.HTTPClient == nil && !h2c {
			return nil, fmt.Errorf("client: Options.Protocol %q over http:// needs unencrypted HTTP/2, which net/http has from Go 1.24: build with Go 1.24 or newer, use an https:// URL, the %q protocol, or an Options.HTTPClient that speaks h2c", ProtocolGRPC, ProtocolConnect)
		}
		copts = append(copts, connect.WithGRPC())
	default:
		return nil, fmt.Errorf("client: Options.Protocol %q is unknown; use %q, %q or %q", opts.Protocol, ProtocolConnect, ProtocolJSON, ProtocolGRPC)
	}
	switch {
	case opts.MaxRetries == 0:
		opts.MaxRetries = defaultMaxRetries
	case opts.MaxRetries < 0:
		opts.MaxRetries = 0
	case opts.MaxRetries > maxMaxRetries:
		return nil, fmt.Errorf("client: Options.MaxRetries %d is above the limit of %d", opts.MaxRetries, maxMaxRetries)
	}
	switch {
	case opts.RetryBackoff == 0:
		opts.RetryBackoff = defaultRetryBackoff
	case opts.RetryBackoff < 0 || opts.RetryBackoff > maxRetryBackoff:
		return nil, fmt.Errorf("client: Options.RetryBackoff %v is outside 0..%v (0 for the default %v)", opts.RetryBackoff, maxRetryBackoff, defaultRetryBackoff)
	}
	if opts.Token != "" {
		if strings.IndexFunc(opts.Token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
			return nil, fmt.Errorf("client: Options.Token holds a space or a character that is not printable ASCII: pass the token as `tenure token create` printed it")
		}
		copts = append(copts, connect.WithInterceptors(bearer("Bearer "+opts.Token)))
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = DefaultHTTPClient(opts.Protocol)
		if opts.TLSConfig != nil {
			hc.Transport.(*http.Transport).TLSClientConfig = opts.TLSConfig.Clone()
		}
	}
	base := u.String()
	d := inMemoryBodies{hc}
	return &Client{
		tasks:       tenurev1connect.NewTaskServiceClient(d, base, copts...),
		workers:     tenurev1connect.NewWorkerServiceClient(d, base, copts...),
		queues:      tenurev1connect.NewQueueServiceClient(d, base, copts...),
		schedules:   tenurev1connect.NewScheduleServiceClient(d, base, copts...),
		maxRetries:  opts.MaxRetries,
		backoff:     backoff.Policy{Initial: opts.RetryBackoff, Max: maxRetryBackoff},
		requestedBy: opts.RequestedBy,
	}, nil
}

// bearer sets the Authorization header, its value, on every call.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// DefaultHTTPClient returns the HTTP client New uses when Options.HTTPClient
// is nil: a transport of its own with enough idle connections for a busy
// worker, a 16 KiB write buffer (a call's headers and a body of up to
// about that go out in one write) and a 16 KiB read buffer (an answer of
// up to about that comes in with one read), and, for protocol "grpc",
// HTTP/2 only: h2c over http:// (built with Go 1.24 or newer). (New sets its
// transport's TLSClientConfig to Options.TLSConfig.) Start from it to wrap
// the transport (for metrics or tracing) without losing those settings;
// set TLS on it as New does: Transport.(*http.Transport).TLSClientConfig.
func DefaultHTTPClient(protocol string) *http.Client {
	grpc := protocol == ProtocolGRPC
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 100
	t.WriteBufferSize = writeBufferSize
	t.ReadBufferSize = readBufferSize
	if grpc {
		// http:// URLs use unencrypted HTTP/2 (where the Go release has
		// it); https:// URLs negotiate HTTP/2 over TLS.
		http2Only(t)
	}
	return &http.Client{Transport: t}
}

// call runs one RPC, retrying it while it fails with unavailable. Its
// errors are *Error, wrapped with what the retries did.
func call[Req, Resp any](ctx context.Context, c *Client, op string,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req) (*Resp, error) {
	for attempt := 0; ; attempt++ {
		resp, err := fn(ctx, connect.NewRequest(msg))
		if err == nil {
			return resp.Msg, nil
		}
		e := newError(op, err)
		if e.Code != connect.CodeUnavailable || e.tlsRefused {
			return nil, e
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w; stopped retrying: %w", e, context.Cause(ctx))
		}
		if attempt >= c.maxRetries {
			if attempt == 0 {
				return nil, e
			}
			return nil, fmt.Errorf("%w (tried %d times: the server is down, restarting or overloaded; try again later)", e, attempt+1)
		}
		if !backoff.Sleep(ctx, c.backoff.Wait(attempt, mrand.Int64N)) {
			return nil, fmt.Errorf("%w; stopped retrying: %w", e, context.Cause(ctx))
		}
	}
}

// Submit creates one task, durable when Submit returns, and answers it
// whole (SubmitResult.Task). If req.RequestID is empty a random one is
// generated first, so the client's retries of this call never create a
// second task.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	resp, err := call(ctx, c, "Submit", c.tasks.Submit, req.proto())
	if err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{TaskID: resp.GetTask().GetTaskId(), Duplicate: resp.GetDuplicate(), Task: taskPtr(resp.GetTask())}, nil
}

// SubmitBatch creates up to 1000 tasks (the server's default limit) in one
// call; results come in the order of req.Requests, with each task's id
// (and the whole task with req.ReturnTasks). Every request is checked
// before any task is created: an invalid one fails the whole call,
// ErrInvalidArgument naming it (e.g. "requests[3].queue"). Each request
// without a RequestID gets a random one, as in Submit. If the call fails
// after that check, some tasks may exist: retry with the same request ids
// to learn which.
func (c *Client) SubmitBatch(ctx context.Context, req SubmitBatchRequest) ([]SubmitResult, error) {
	msg := &tenurev1.SubmitBatchRequest{Requests: make([]*tenurev1.SubmitRequest, len(req.Requests)), IdsOnly: !req.ReturnTasks, CompactIds: !req.ReturnTasks}
	held, reqs := pooled[tenurev1.SubmitRequest](&submitMessages, len(req.Requests))
	for i := range req.Requests {
		req.Requests[i].fill(&reqs[i])
		msg.Requests[i] = &reqs[i]
	}
	resp, err := call(ctx, c, "SubmitBatch", c.tasks.SubmitBatch, msg)
	unpool(&submitMessages, held, reqs) // sent
	if err != nil {
		return nil, err
	}
	out := make([]SubmitResult, len(req.Requests))
	if ids, dups := resp.GetTaskIds(), resp.GetDuplicates(); len(resp.GetResponses()) == 0 && len(ids) == len(out) && len(dups) == len(out) {
		for i := range out {
			out[i] = SubmitResult{TaskID: ids[i], Duplicate: dups[i]}
		}
		return out, nil
	}
	// A server older than compact_ids answers responses.
	if len(resp.GetResponses()) != len(req.Requests) {
		return nil, fmt.Errorf("client: SubmitBatch: the server answered %d results for %d requests (a server bug; the tasks may exist, retry with the same request ids)", max(len(resp.GetResponses()), len(resp.GetTaskIds())), len(req.Requests))
	}
	for i, r := range resp.GetResponses() {
		out[i] = SubmitResult{TaskID: r.GetTask().GetTaskId(), Duplicate: r.GetDuplicate()}
		if req.ReturnTasks {
			out[i].Task = taskPtr(r.GetTask())
		}
	}
	return out, nil
}

// submitMessages and completeMessages keep the request messages of a
// SubmitBatch (160 bytes per task) and of a CompleteBatch (80) from call to
// call: the call has encoded them when it returns.
var (
	submitMessages   = sync.Pool{New: func() any { return new([]tenurev1.SubmitRequest) }}
	completeMessages = sync.Pool{New: func() any { return new([]tenurev1.CompleteRequest) }}
)

// pooled returns n zero elements from p, a pool of *[]T, and the pointer to
// give back to unpool.
func pooled[T any](p *sync.Pool, n int) (*[]T, []T) {
	held := p.Get().(*[]T)
	if cap(*held) < n {
		return held, make([]T, n)
	}
	return held, (*held)[:n]
}

// unpool clears s (it lets go of what its elements point at) and puts it
// back in p.
func unpool[T any](p *sync.Pool, held *[]T, s []T) {
	clear(s)
	*held = s[:0]
	p.Put(held)
}

// GetTask returns a task with its executions.
func (c *Client) GetTask(ctx context.Context, taskID string) (*Task, error) {
	resp, err := call(ctx, c, "GetTask", c.tasks.GetTask, &tenurev1.GetTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	if resp.GetTask() == nil {
		return nil, errors.New("client: GetTask: the server answered without a task (a server bug)")
	}
	return taskPtr(resp.GetTask()), nil
}

// ListTasks returns one page of tasks in creation order and the token of
// the next page ("" on the last page).
func (c *Client) ListTasks(ctx context.Context, req ListTasksRequest) (tasks []Task, nextPageToken string, err error) {
	if req.PageSize < 0 || req.PageSize > math.MaxInt32 {
		return nil, "", invalid("ListTasks", "PageSize", fmt.Sprintf("PageSize %d is out of range; use 0 (default) up to the server's limit (1000)", req.PageSize))
	}
	resp, err := call(ctx, c, "ListTasks", c.tasks.ListTasks, &tenurev1.ListTasksRequest{
		Namespace: req.Namespace,
		Queue:     req.Queue,
		State:     tenurev1.TaskState(req.State),
		PageSize:  int32(req.PageSize),
		PageToken: req.PageToken,
	})
	if err != nil {
		return nil, "", err
	}
	if len(resp.GetTasks()) > 0 {
		tasks = make([]Task, len(resp.GetTasks()))
		for i, t := range resp.GetTasks() {
			tasks[i] = taskOf(t)
		}
	}
	return tasks, resp.GetNextPageToken(), nil
}

// KillTask moves a task that is not terminal to DEAD; its current lease, if
// any, loses its authority at once. reason becomes the task's
// FailureReason; Options.RequestedBy is kept as who asked. A task already
// COMPLETED, FAILED or DEAD is refused with ErrWrongState.
func (c *Client) KillTask(ctx context.Context, taskID, reason string) error {
	_, err := call(ctx, c, "KillTask", c.tasks.KillTask, &tenurev1.KillTaskRequest{TaskId: taskID, Reason: reason, RequestedBy: c.requestedBy})
	return err
}

// RetryTask returns a FAILED or DEAD task to WAITING, due at once, with a
// fresh budget of attempts, and answers it. Its earlier executions stay in
// its history. A COMPLETED task (submit a new one to run it again), a task
// not finished, and one an attempt committed before it was killed (its
// effect may have been applied) are refused with ErrWrongState.
func (c *Client) RetryTask(ctx context.Context, req RetryTaskRequest) (*Task, error) {
	resp, err := call(ctx, c, "RetryTask", c.tasks.RetryTask, &tenurev1.RetryTaskRequest{
		TaskId: req.TaskID, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return nil, err
	}
	if resp.GetTask() == nil {
		return nil, errors.New("client: RetryTask: the server answered without a task (a server bug); GetTask shows whether it was retried")
	}
	return taskPtr(resp.GetTask()), nil
}

// RetryTasks retries every FAILED or DEAD task req.Filter selects, as
// RetryTask would, and counts them; the others it selects are Skipped. A
// filter with nothing set and without All, or All with another field, is
// refused with ErrInvalidArgument. The server works in bounded steps and
// selects no task created after the call began; if the call fails part
// way, the tasks it changed stay changed: call it again to continue.
func (c *Client) RetryTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "RetryTasks", c.tasks.RetryTasks, &tenurev1.RetryTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// KillTasks kills every unfinished task req.Filter selects, as KillTask
// would, and counts them; those already finished are Skipped. The filter
// and a failure part way are as for RetryTasks.
func (c *Client) KillTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "KillTasks", c.tasks.KillTasks, &tenurev1.KillTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// PurgeTasks deletes every finished (COMPLETED, FAILED or DEAD) task
// req.Filter selects now rather than at the server's retention, and counts
// them; those not finished are Skipped. GetTask then answers ErrNotFound
// for them, and their request ids may be used again. The filter and a
// failure part way are as for RetryTasks.
func (c *Client) PurgeTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "PurgeTasks", c.tasks.PurgeTasks, &tenurev1.PurgeTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// bulkResult is the result of a bulk action's answer.
func bulkResult(resp interface {
	GetChanged() uint64
	GetSkipped() uint64
}, err error) (BulkResult, error) {
	if err != nil {
		return BulkResult{}, err
	}
	return BulkResult{Changed: resp.GetChanged(), Skipped: resp.GetSkipped()}, nil
}

// by is who asks for an operator's action: requestedBy, or the client's
// Options.RequestedBy.
func (c *Client) by(requestedBy string) string {
	return cmp.Or(requestedBy, c.requestedBy)
}

// GetTaskHistory returns the log records that touched a task, oldest
// first: what happened to it, and why it ran twice.
func (c *Client) GetTaskHistory(ctx context.Context, taskID string) ([]HistoryEntry, error) {
	resp, err := call(ctx, c, "GetTaskHistory", c.tasks.GetTaskHistory, &tenurev1.GetTaskHistoryRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	out := make([]HistoryEntry, len(resp.GetEntries()))
	for i, e := range resp.GetEntries() {
		out[i] = historyEntryOf(e)
	}
	return out, nil
}

// Lease grants up to MaxTasks tasks of a queue. With Wait it long-polls
// and answers as soon as one task is leased, or with none when Wait ran
// out. A Lease retried after an unavailable answer may have granted a lease
// whose answer was lost: that lease expires unused after the task's window.
func (c *Client) Lease(ctx context.Context, req LeaseRequest) ([]LeasedTask, error) {
	msg, err := leaseMessage("Lease", req)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c, "Lease", c.workers.Lease, msg)
	if err != nil {
		return nil, err
	}
	return leasedTasksOf(resp.GetTasks()), nil
}

// leaseMessage is req on the wire, checked for call op.
func leaseMessage(op string, req LeaseRequest) (*tenurev1.LeaseRequest, error) {
	if req.MaxTasks < 0 || req.MaxTasks > math.MaxInt32 {
		return nil, invalid(op, "MaxTasks", fmt.Sprintf("MaxTasks %d is negative or too large; use 0 (one task) up to the server's limit (1000)", req.MaxTasks))
	}
	if req.Wait < 0 {
		return nil, invalid(op, "Wait", fmt.Sprintf("Wait %v is negative; use 0 to answer at once", req.Wait))
	}
	msg := &tenurev1.LeaseRequest{
		WorkerId:  req.WorkerID,
		Namespace: req.Namespace,
		Queue:     req.Queue,
		MaxTasks:  uint32(req.MaxTasks),
	}
	if req.Wait > 0 {
		msg.Wait = durationpb.New(req.Wait)
	}
	return msg, nil
}

// leasedTasksOf converts leased tasks from the wire (nil for none).
func leasedTasksOf(ts []*tenurev1.LeasedTask) []LeasedTask {
	if len(ts) == 0 {
		return nil
	}
	out := make([]LeasedTask, len(ts))
	for i, t := range ts {
		out[i] = leasedTaskOf(t)
	}
	return out
}

// Start reports that work on a leased task began (optional; the execution
// shows IN_PROGRESS).
func (c *Client) Start(ctx context.Context, taskID, leaseID string) error {
	_, err := call(ctx, c, "Start", c.workers.Start, &tenurev1.StartRequest{TaskId: taskID, LeaseId: leaseID})
	return err
}

// Heartbeat extends the lease by the task's execution window from now and
// returns the new expiry.
func (c *Client) Heartbeat(ctx context.Context, taskID, leaseID string) (leaseExpiry time.Time, err error) {
	resp, err := call(ctx, c, "Heartbeat", c.workers.Heartbeat, &tenurev1.HeartbeatRequest{TaskId: taskID, LeaseId: leaseID})
	if err != nil {
		return time.Time{}, err
	}
	if resp.GetLeaseExpiry() == nil {
		return time.Time{}, errors.New("client: Heartbeat: the server answered without a lease expiry (a server bug); treat the lease as lost")
	}
	return resp.GetLeaseExpiry().AsTime(), nil
}

// Commit records result as the task's one committed result. Only after it
// succeeds may the caller apply the external effects, keyed by the fencing
// token. ErrLeaseLost or ErrAlreadyCommitted mean: apply no effects.
func (c *Client) Commit(ctx context.Context, taskID, leaseID string, result []byte) (FencingToken, error) {
	resp, err := call(ctx, c, "Commit", c.workers.Commit, &tenurev1.CommitRequest{TaskId: taskID, LeaseId: leaseID, Result: result})
	if err != nil {
		return FencingToken{}, err
	}
	tok := resp.GetFencingToken()
	return FencingToken{TaskID: tok.GetTaskId(), Attempt: tok.GetAttempt()}, nil
}

// Complete finishes the task: from LEASED it commits result and completes
// in one step; from COMMITTED it finalises the committed result (result is
// then ignored).
func (c *Client) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := call(ctx, c, "Complete", c.workers.Complete, &tenurev1.CompleteRequest{TaskId: taskID, LeaseId: leaseID, Result: result})
	return err
}

// CompleteBatch completes up to 1000 tasks (the server's default limit) in
// one call, each as Complete would. errs[i] is item i's own answer: nil when
// it completed (durable when CompleteBatch returns), else an *Error that
// errors.Is classifies (ErrLeaseLost, ErrAlreadyCommitted, ErrNotFound,
// ...) as it would Complete's. One item's failure does not affect the
// others.
//
// err is for the call as a whole (no items or too many, or the server could
// not answer even after the client's retries); errs is then nil and no
// item's outcome is known. Retrying the call is safe: the same lease
// completing a task again gets the same answer, and the client itself
// retries a call answered with unavailable.
func (c *Client) CompleteBatch(ctx context.Context, items []CompleteItem) (errs []error, err error) {
	resp, err := c.completeBatch(ctx, "CompleteBatch", items, nil)
	if err != nil {
		return nil, err
	}
	return itemErrors(resp, items)
}

// CompleteAndLease is CompleteBatch followed by Lease(next), in one call:
// once the items are applied, the server leases as Lease would (with
// next.Wait, it long-polls) and answers both when both are durable. A
// worker that completes a batch and then wants the next one saves a round
// trip; on a server that serves many small calls, most of the cost of a
// call is the call itself (BENCHMARKS.md, "Issue 15: where it stands", 28
// November).
//
// next is checked before any item is applied: an invalid one, or one the
// caller's token may not lease from, fails the call with nothing done.
// Otherwise errs and err are as CompleteBatch's, and err also holds a
// lease that failed after the items were applied; retrying the call is
// then safe, as for CompleteBatch (and, as for Lease, a lease whose
// answer was lost expires unused). A server older than this call ignores
// next and leases nothing: a worker that gets no task calls Lease, as it
// would after any empty answer.
func (c *Client) CompleteAndLease(ctx context.Context, items []CompleteItem, next LeaseRequest) (errs []error, leased []LeasedTask, err error) {
	msg, err := leaseMessage("CompleteAndLease", next)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.completeBatch(ctx, "CompleteAndLease", items, msg)
	if err != nil {
		return nil, nil, err
	}
	if errs, err = itemErrors(resp, items); err != nil {
		return nil, nil, err
	}
	return errs, leasedTasksOf(resp.GetLeased()), nil
}

// completeBatch sends a CompleteBatch call of items, with lease if set,
// for call op.
func (c *Client) completeBatch(ctx context.Context, op string, items []CompleteItem, lease *tenurev1.LeaseRequest) (*tenurev1.CompleteBatchResponse, error) {
	msg := &tenurev1.CompleteBatchRequest{Items: make([]*tenurev1.CompleteRequest, len(items)), FailedOnly: true, Lease: lease}
	held, reqs := pooled[tenurev1.CompleteRequest](&completeMessages, len(items))
	for i, it := range items {
		reqs[i] = tenurev1.CompleteRequest{TaskId: it.TaskID, LeaseId: it.LeaseID, Result: it.Result}
		msg.Items[i] = &reqs[i]
	}
	resp, err := call(ctx, c, op, c.workers.CompleteBatch, msg)
	unpool(&completeMessages, held, reqs) // sent
	return resp, err
}

// itemErrors is each item's answer in a CompleteBatch response.
func itemErrors(resp *tenurev1.CompleteBatchResponse, items []CompleteItem) (errs []error, err error) {
	errs = make([]error, len(items))
	if len(resp.GetResults()) == 0 {
		// failed_only: the items not named succeeded.
		for _, r := range resp.GetFailed() {
			i := int(r.GetIndex())
			if i >= len(items) || r.GetTaskId() != items[i].TaskID || r.GetCode() == "" {
				return nil, fmt.Errorf("client: CompleteBatch: the server answered a failure of item %d (task %q, code %q) that does not fit the %d items (a server bug; retry the call: completions are idempotent)", i, r.GetTaskId(), r.GetCode(), len(items))
			}
			errs[i] = itemError(r)
		}
		return errs, nil
	}
	// A server older than failed_only answers a result per item.
	if len(resp.GetResults()) != len(items) {
		return nil, fmt.Errorf("client: CompleteBatch: the server answered %d results for %d items (a server bug; retry the call: completions are idempotent)", len(resp.GetResults()), len(items))
	}
	for i, r := range resp.GetResults() {
		if r.GetCode() != "" {
			errs[i] = itemError(r)
		}
	}
	return errs, nil
}

// Fail ends an attempt that failed before commit: the task is retried per
// its policy, or FAILED if permanent or out of attempts. A committed task
// cannot fail (ErrWrongState): finish it with Complete.
func (c *Client) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (FailResult, error) {
	resp, err := call(ctx, c, "Fail", c.workers.Fail, &tenurev1.FailRequest{TaskId: taskID, LeaseId: leaseID, Reason: reason, Permanent: permanent})
	if err != nil {
		return FailResult{}, err
	}
	return FailResult{State: TaskState(resp.GetState()), RetryAt: timeOf(resp.GetRetryAt())}, nil
}
