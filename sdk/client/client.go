package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/internal/backoff"
	"github.com/tenurehq/tenure/sdk/internal/chain"
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
	// PurgeTasks, PauseQueue, ResumeQueue, SetQueueLimits, CancelWorkflow,
	// RetryWorkflow and the schedule calls that change one) whose request does not say it itself: it is
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
	// Interceptors run around every call the client makes, the first
	// outermost (see Interceptor).
	Interceptors []Interceptor
	// Codec encodes typed tasks (SubmitRequest.Args) as their payloads,
	// and a worker of this client decodes them (and encodes their results)
	// with it. Nil: JSON. Protobuf is the other one the SDK has.
	Codec Codec
}

// Client calls a tenure server. It is safe for concurrent use.
type Client struct {
	tasks       tenurev1connect.TaskServiceClient
	workers     tenurev1connect.WorkerServiceClient
	queues      tenurev1connect.QueueServiceClient
	schedules   tenurev1connect.ScheduleServiceClient
	events      tenurev1connect.EventServiceClient
	workflows   tenurev1connect.WorkflowServiceClient
	maxRetries  int
	backoff     backoff.Policy
	requestedBy string
	// intercept runs a call through Options.Interceptors; nil without any.
	intercept Interceptor
	codec     Codec
}

// Codec returns the codec of the client's typed tasks (Options.Codec).
func (c *Client) Codec() Codec { return c.codec }

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
	for i, in := range opts.Interceptors {
		if in == nil {
			return nil, fmt.Errorf("client: Options.Interceptors[%d] is nil", i)
		}
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
		events:      tenurev1connect.NewEventServiceClient(d, base, copts...),
		workflows:   tenurev1connect.NewWorkflowServiceClient(d, base, copts...),
		maxRetries:  opts.MaxRetries,
		backoff:     backoff.Policy{Initial: opts.RetryBackoff, Max: maxRetryBackoff},
		requestedBy: opts.RequestedBy,
		intercept:   chain.Of(opts.Interceptors), // the first outermost
		codec:       cmp.Or(opts.Codec, JSON),
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

// call runs one RPC through the client's interceptors, retrying it while
// it fails with unavailable. Its errors are *Error, wrapped with what the
// retries did.
func call[Req, Resp any](ctx context.Context, c *Client, op string,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req) (*Resp, error) {
	if c.intercept == nil {
		return tries(ctx, c, op, fn, msg, nil)
	}
	var resp *Resp
	cl := &Call{Op: op, Header: make(http.Header)}
	err := c.intercept(ctx, cl, func(ctx context.Context) error {
		var err error
		resp, err = tries(ctx, c, op, fn, msg, cl.Header)
		if err == nil {
			cl.Reply, _ = any(resp).(proto.Message)
		}
		return err
	})
	return resp, err
}

// tries makes the tries of one call, each with the headers h.
func tries[Req, Resp any](ctx context.Context, c *Client, op string,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), msg *Req, h http.Header) (*Resp, error) {
	for attempt := 0; ; attempt++ {
		r := connect.NewRequest(msg)
		for k, v := range h {
			r.Header()[k] = v
		}
		resp, err := fn(ctx, r)
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
