package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
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
}

// Client calls a tenure server. It is safe for concurrent use.
type Client struct {
	tasks      tenurev1connect.TaskServiceClient
	workers    tenurev1connect.WorkerServiceClient
	maxRetries int
	backoff    time.Duration
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
	var copts []connect.ClientOption
	switch opts.Protocol {
	case "", ProtocolConnect:
		opts.Protocol = ProtocolConnect
	case ProtocolJSON:
		copts = append(copts, connect.WithProtoJSON())
	case ProtocolGRPC:
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
	hc := opts.HTTPClient
	if hc == nil {
		hc = DefaultHTTPClient(opts.Protocol)
	}
	base := u.String()
	return &Client{
		tasks:      tenurev1connect.NewTaskServiceClient(hc, base, copts...),
		workers:    tenurev1connect.NewWorkerServiceClient(hc, base, copts...),
		maxRetries: opts.MaxRetries,
		backoff:    opts.RetryBackoff,
	}, nil
}

// DefaultHTTPClient returns the HTTP client New uses when Options.HTTPClient
// is nil: a transport of its own with enough idle connections for a busy
// worker, and, for protocol "grpc", h2c over http://. Start from it to wrap
// the transport (for metrics or tracing) without losing those settings.
func DefaultHTTPClient(protocol string) *http.Client {
	grpc := protocol == ProtocolGRPC
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 100
	if grpc {
		// Without HTTP1 in the set, http:// URLs use unencrypted HTTP/2;
		// https:// URLs negotiate HTTP/2 over TLS.
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
	}
	return &http.Client{Transport: t}
}

// call runs one RPC, retrying it while it fails with unavailable.
func call[Req, Resp any](ctx context.Context, c *Client, name string,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req) (*Resp, error) {
	for attempt := 0; ; attempt++ {
		resp, err := fn(ctx, connect.NewRequest(msg))
		if err == nil {
			return resp.Msg, nil
		}
		if connect.CodeOf(err) != connect.CodeUnavailable {
			return nil, fmt.Errorf("client: %s: %w", name, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("client: %s: %w; stopped retrying: %w", name, err, context.Cause(ctx))
		}
		if attempt >= c.maxRetries {
			return nil, fmt.Errorf("client: %s failed %d times with unavailable (the server is down, restarting or overloaded; try again later): %w", name, attempt+1, err)
		}
		t := time.NewTimer(c.wait(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: %s: %w; stopped retrying: %w", name, err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// wait is the backoff before retry number attempt+1: RetryBackoff doubled
// per earlier retry, capped at 5s, with "equal jitter" (half fixed, half
// random) so that many clients do not retry in step.
func (c *Client) wait(attempt int) time.Duration {
	d := maxRetryBackoff
	if attempt < 30 {
		d = min(c.backoff<<attempt, maxRetryBackoff)
	}
	half := d / 2
	return half + mrand.N(d-half+1)
}

// RetryPolicy decides what a failed or expired attempt leads to; a zero
// field takes the server's default (3 attempts, 1s initial backoff,
// multiplier 2). The wait before attempt n+1 is InitialBackoff *
// Multiplier^(n-1), capped at MaxBackoff.
type RetryPolicy struct {
	MaxAttempts    uint32
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
}

// SubmitRequest describes one task. Zero fields take the server's defaults
// (see task.proto): namespace "default", a 30s execution window, the
// default retry policy, leasable at once, priority 0.
type SubmitRequest struct {
	Namespace string
	Queue     string // required
	Payload   []byte
	// RequestID makes the submission idempotent within the namespace. Empty:
	// the SDK generates a random one, which covers the SDK's own retries
	// only.
	RequestID       string
	ExecutionWindow time.Duration
	Retry           *RetryPolicy
	NotBefore       time.Time
	Priority        int32
}

// SubmitResult is the task Submit created or found.
type SubmitResult struct {
	Task *tenurev1.Task
	// Duplicate: the request id was used before; nothing was created and
	// Task is the existing task.
	Duplicate bool
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

func (r SubmitRequest) proto() *tenurev1.SubmitRequest {
	out := &tenurev1.SubmitRequest{
		Namespace: r.Namespace,
		Queue:     r.Queue,
		Payload:   r.Payload,
		RequestId: r.RequestID,
		Priority:  r.Priority,
	}
	if out.RequestId == "" {
		out.RequestId = newRequestID()
	}
	if r.ExecutionWindow != 0 {
		out.ExecutionWindow = durationpb.New(r.ExecutionWindow)
	}
	if p := r.Retry; p != nil {
		out.RetryPolicy = &tenurev1.RetryPolicy{MaxAttempts: p.MaxAttempts, BackoffMultiplier: p.Multiplier}
		if p.InitialBackoff != 0 {
			out.RetryPolicy.InitialBackoff = durationpb.New(p.InitialBackoff)
		}
		if p.MaxBackoff != 0 {
			out.RetryPolicy.MaxBackoff = durationpb.New(p.MaxBackoff)
		}
	}
	if !r.NotBefore.IsZero() {
		out.NotBefore = timestamppb.New(r.NotBefore)
	}
	return out
}

// Submit creates one task, durable when Submit returns. If req.RequestID is
// empty a random one is generated first, so retries of this call never
// create a second task.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	resp, err := call(ctx, c, "Submit", c.tasks.Submit, req.proto())
	if err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{Task: resp.GetTask(), Duplicate: resp.GetDuplicate()}, nil
}

// SubmitBatch creates up to 1000 tasks (the server's default limit) in one
// call; results come in the order of reqs. Each request without a
// RequestID gets a random one, as in Submit. If the call fails, some tasks
// may exist: retry with the same request ids to learn which.
func (c *Client) SubmitBatch(ctx context.Context, reqs []SubmitRequest) ([]SubmitResult, error) {
	resp, err := c.submitBatch(ctx, reqs, false)
	if err != nil {
		return nil, err
	}
	out := make([]SubmitResult, len(reqs))
	for i, r := range resp {
		out[i] = SubmitResult{Task: r.GetTask(), Duplicate: r.GetDuplicate()}
	}
	return out, nil
}

// submitBatch calls SubmitBatch and checks that the answer has one
// response per request.
func (c *Client) submitBatch(ctx context.Context, reqs []SubmitRequest, idsOnly bool) ([]*tenurev1.SubmitResponse, error) {
	msg := &tenurev1.SubmitBatchRequest{Requests: make([]*tenurev1.SubmitRequest, len(reqs)), IdsOnly: idsOnly}
	for i, r := range reqs {
		msg.Requests[i] = r.proto()
	}
	resp, err := call(ctx, c, "SubmitBatch", c.tasks.SubmitBatch, msg)
	if err != nil {
		return nil, err
	}
	if len(resp.GetResponses()) != len(reqs) {
		return nil, fmt.Errorf("client: SubmitBatch: the server answered %d results for %d requests (a server bug; the tasks may exist, retry with the same request ids)", len(resp.GetResponses()), len(reqs))
	}
	return resp.GetResponses(), nil
}

// SubmittedID is the answer of SubmitBatchIDs for one task.
type SubmittedID struct {
	TaskID string
	// Duplicate: the request id was used before; nothing was created and
	// TaskID is the existing task's.
	Duplicate bool
}

// SubmitBatchIDs is SubmitBatch answered with the task ids only: the server
// does not send every task (its payload included) back, which saves a
// good part of the CPU of a large batch on both sides. Use it when the ids
// are all the caller needs; GetTask returns a full task.
func (c *Client) SubmitBatchIDs(ctx context.Context, reqs []SubmitRequest) ([]SubmittedID, error) {
	resp, err := c.submitBatch(ctx, reqs, true)
	if err != nil {
		return nil, err
	}
	out := make([]SubmittedID, len(reqs))
	for i, r := range resp {
		out[i] = SubmittedID{TaskID: r.GetTask().GetTaskId(), Duplicate: r.GetDuplicate()}
	}
	return out, nil
}

// GetTask returns a task with its executions.
func (c *Client) GetTask(ctx context.Context, taskID string) (*tenurev1.Task, error) {
	resp, err := call(ctx, c, "GetTask", c.tasks.GetTask, &tenurev1.GetTaskRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	return resp.GetTask(), nil
}

// ListOptions select the tasks of ListTasks. Zero fields: all namespaces,
// all queues, any state, the server's default page size (100).
type ListOptions struct {
	Namespace string
	Queue     string
	State     tenurev1.TaskState
	PageSize  int
	// PageToken is the nextPageToken of the previous page, with the same
	// filters; empty for the first page.
	PageToken string
}

// ListTasks returns one page of tasks in creation order and the token of
// the next page ("" on the last page).
func (c *Client) ListTasks(ctx context.Context, opts ListOptions) (tasks []*tenurev1.Task, nextPageToken string, err error) {
	if opts.PageSize < 0 || opts.PageSize > math.MaxInt32 {
		return nil, "", fmt.Errorf("client: ListTasks: PageSize %d is out of range; use 0 (default) up to the server's limit (1000)", opts.PageSize)
	}
	resp, err := call(ctx, c, "ListTasks", c.tasks.ListTasks, &tenurev1.ListTasksRequest{
		Namespace: opts.Namespace,
		Queue:     opts.Queue,
		State:     opts.State,
		PageSize:  int32(opts.PageSize),
		PageToken: opts.PageToken,
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetTasks(), resp.GetNextPageToken(), nil
}

// KillTask moves a task that is not terminal to DEAD; its current lease, if
// any, loses its authority at once.
func (c *Client) KillTask(ctx context.Context, taskID, reason string) error {
	_, err := call(ctx, c, "KillTask", c.tasks.KillTask, &tenurev1.KillTaskRequest{TaskId: taskID, Reason: reason})
	return err
}

// TaskHistory returns the log records that touched a task, oldest first.
func (c *Client) TaskHistory(ctx context.Context, taskID string) ([]*tenurev1.HistoryEntry, error) {
	resp, err := call(ctx, c, "GetTaskHistory", c.tasks.GetTaskHistory, &tenurev1.GetTaskHistoryRequest{TaskId: taskID})
	if err != nil {
		return nil, err
	}
	return resp.GetEntries(), nil
}

// LeaseRequest asks for tasks of one queue.
type LeaseRequest struct {
	WorkerID  string // required; stable and unique per worker process
	Namespace string // default "default"
	Queue     string // required
	MaxTasks  int    // default (0) 1; the server's limit is 1000 unless configured otherwise
	// Wait is how long to long-poll when no task is ready (0: answer at
	// once; the server caps it at 30s).
	Wait time.Duration
}

// Lease grants up to MaxTasks tasks of a queue. With Wait it long-polls
// and answers as soon as one task is leased, or with none when Wait ran
// out. A Lease retried after an unavailable answer may have granted a lease
// whose answer was lost: that lease expires unused after the task's window.
func (c *Client) Lease(ctx context.Context, req LeaseRequest) ([]*tenurev1.LeasedTask, error) {
	if req.MaxTasks < 0 || req.MaxTasks > math.MaxInt32 {
		return nil, fmt.Errorf("client: Lease: MaxTasks %d is negative or too large", req.MaxTasks)
	}
	if req.Wait < 0 {
		return nil, fmt.Errorf("client: Lease: Wait %v is negative; use 0 to answer at once", req.Wait)
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
	resp, err := call(ctx, c, "Lease", c.workers.Lease, msg)
	if err != nil {
		return nil, err
	}
	return resp.GetTasks(), nil
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
// token. IsLeaseLost or IsAlreadyCommitted errors mean: apply no effects.
func (c *Client) Commit(ctx context.Context, taskID, leaseID string, result []byte) (*tenurev1.FencingToken, error) {
	resp, err := call(ctx, c, "Commit", c.workers.Commit, &tenurev1.CommitRequest{TaskId: taskID, LeaseId: leaseID, Result: result})
	if err != nil {
		return nil, err
	}
	return resp.GetFencingToken(), nil
}

// Complete finishes the task: from LEASED it commits result and completes
// in one step; from COMMITTED it finalises the committed result (result is
// then ignored).
func (c *Client) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := call(ctx, c, "Complete", c.workers.Complete, &tenurev1.CompleteRequest{TaskId: taskID, LeaseId: leaseID, Result: result})
	return err
}

// CompleteItem is one completion of CompleteBatch: the arguments of
// Complete.
type CompleteItem struct {
	TaskID  string
	LeaseID string
	Result  []byte
}

// CompleteBatch completes up to 1000 tasks (the server's default limit) in
// one call, each as Complete would. errs[i] is item i's own answer: nil when
// it completed (durable when CompleteBatch returns), else an error that
// IsLeaseLost, IsAlreadyCommitted, IsNotFound and connect.CodeOf classify as
// they would Complete's. One item's failure does not affect the others.
//
// err is for the call as a whole (no items or too many, or the server could
// not answer even after the client's retries); errs is then nil and no
// item's outcome is known. Retrying the call is safe: the same lease
// completing a task again gets the same answer, and the client itself
// retries a call answered with unavailable.
func (c *Client) CompleteBatch(ctx context.Context, items []CompleteItem) (errs []error, err error) {
	msg := &tenurev1.CompleteBatchRequest{Items: make([]*tenurev1.CompleteRequest, len(items))}
	reqs := make([]tenurev1.CompleteRequest, len(items))
	for i, it := range items {
		reqs[i] = tenurev1.CompleteRequest{TaskId: it.TaskID, LeaseId: it.LeaseID, Result: it.Result}
		msg.Items[i] = &reqs[i]
	}
	resp, err := call(ctx, c, "CompleteBatch", c.workers.CompleteBatch, msg)
	if err != nil {
		return nil, err
	}
	if len(resp.GetResults()) != len(items) {
		return nil, fmt.Errorf("client: CompleteBatch: the server answered %d results for %d items (a server bug; retry the call: completions are idempotent)", len(resp.GetResults()), len(items))
	}
	errs = make([]error, len(items))
	for i, r := range resp.GetResults() {
		if r.GetCode() == "" {
			continue
		}
		var code connect.Code
		if code.UnmarshalText([]byte(r.GetCode())) != nil {
			code = connect.CodeUnknown
		}
		errs[i] = fmt.Errorf("client: CompleteBatch: task %s: %w", items[i].TaskID, connect.NewError(code, errors.New(r.GetMessage())))
	}
	return errs, nil
}

// Fail ends an attempt that failed before commit: the task is retried per
// its policy, or FAILED if permanent or out of attempts.
func (c *Client) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (*tenurev1.FailResponse, error) {
	return call(ctx, c, "Fail", c.workers.Fail, &tenurev1.FailRequest{TaskId: taskID, LeaseId: leaseID, Reason: reason, Permanent: permanent})
}

// IsLeaseLost reports whether err means the lease lost its authority
// (expired, superseded, killed, or the task's state forbids the call):
// stop working on the task and apply no effects. Code failed_precondition.
func IsLeaseLost(err error) bool { return connect.CodeOf(err) == connect.CodeFailedPrecondition }

// IsAlreadyCommitted reports whether another attempt committed the task
// first: apply no effects. Code already_exists.
func IsAlreadyCommitted(err error) bool { return connect.CodeOf(err) == connect.CodeAlreadyExists }

// IsNotFound reports whether the task does not exist (or left after the
// server's retention). Code not_found.
func IsNotFound(err error) bool { return connect.CodeOf(err) == connect.CodeNotFound }

// IsUnavailable reports whether the server could not serve the call (down,
// restarting, reopening its log), even after the client's retries. Code
// unavailable.
func IsUnavailable(err error) bool { return connect.CodeOf(err) == connect.CodeUnavailable }
