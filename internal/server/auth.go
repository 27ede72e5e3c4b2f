package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// Authentication and authorisation (docs/guides/security.md). With
// Options.Auth set, every call of the API, gRPC reflection, GET /metrics
// and /debug/pprof/ needs a bearer token; /healthz, /readyz and the gRPC
// health service stay open, so that probes need no secret.
//
// The decision is made where the client's call arrives, on the request
// message as the client sent it (auth.Decide): the role, and the namespace
// and queue the request names. A call addressed to a task by id learns the
// task's namespace and queue only from the task itself: the interceptor
// puts the caller into the context, and byTask (and CompleteBatch, per
// item) checks the task in the partition's local function, just before
// acting on it (checkTask). A call forwarded to the node that serves the
// partition runs that local function there, so the node that holds the
// task is the one that checks it, with the principal it is given: the
// forwarding node's signature (forwarded.go) vouches for the caller's
// name, and this node authorises that name by its own token file, which
// must be the same on every node.

// Authenticator finds who a request's bearer token names.
type Authenticator interface {
	// Authenticate returns the principal of the Authorization header of h,
	// or an error (unauthenticated) that says what is wrong without
	// repeating the token. The principal must not be modified.
	Authenticate(h http.Header) (*auth.Principal, error)
	// Named returns the principal of the token named name, for a call a
	// node of the cluster forwards for it, or an error (unauthenticated).
	Named(name string) (*auth.Principal, error)
}

// callerKey is the context key of the caller of an authorised call.
type callerKey struct{}

// caller is who made an authorised call and what it may touch.
type caller struct {
	p    *auth.Principal
	call string
	// checkTask: the tasks the call acts on must be checked (checkTask).
	checkTask bool
	peer      string
}

// authorize authenticates a call (its headers h, from peer) and decides
// whether it may proceed (auth.Decide, msg nil beside the API). It
// returns the context of an allowed call, carrying the caller and its
// principal's name (package principal), or a refusal as a Connect error
// that is logged and counted.
func (s *Server) authorize(ctx context.Context, call string, h http.Header, peer string, msg any) (context.Context, *connect.Error) {
	p, ce := s.authenticate(ctx, call, h, peer)
	if ce != nil {
		return ctx, ce
	}
	return s.decide(ctx, p, call, peer, msg)
}

// authenticate finds who makes a call (its headers h, from peer), or
// refuses it as unauthenticated.
func (s *Server) authenticate(ctx context.Context, call string, h http.Header, peer string) (*auth.Principal, *connect.Error) {
	var (
		p   *auth.Principal
		err error
	)
	if _, fw := route.Forwarded(ctx); fw {
		// A node of the cluster forwards the call (its signature was
		// checked: forwarded.go) for the caller it names, whose token it
		// checked; this node authorises that caller by its own file. A
		// node's own call (route.NodeCaller) may only wait for a task.
		if name := principal.From(ctx); name == route.NodeCaller {
			p, err = nodeCaller(call)
		} else {
			p, err = s.opts.Auth.Named(name)
		}
	} else {
		p, err = s.opts.Auth.Authenticate(h)
	}
	if err != nil {
		return nil, s.refuse(ctx, connect.CodeUnauthenticated, call, peer, nil, err)
	}
	return p, nil
}

// decide decides whether p may make call with msg (auth.Decide) and
// returns the context of the allowed call, or the refusal.
func (s *Server) decide(ctx context.Context, p *auth.Principal, call, peer string, msg any) (context.Context, *connect.Error) {
	checkTask, err := auth.Decide(p, call, msg)
	if err != nil {
		return ctx, s.refuse(ctx, connect.CodePermissionDenied, call, peer, p, err)
	}
	ctx = principal.With(ctx, p.Name)
	return context.WithValue(ctx, callerKey{}, &caller{p: p, call: call, checkTask: checkTask, peer: peer}), nil
}

// refuse logs and counts a refusal and returns it as a Connect error. The
// token is never logged: only its name, once it is known.
func (s *Server) refuse(ctx context.Context, code connect.Code, call, peer string, p *auth.Principal, why error) *connect.Error {
	args := []any{"code", code.String(), "call", call, "peer", peer, "why", why.Error()}
	if p != nil {
		args = append(args, "token", p.Name, "role", string(p.Role))
	}
	s.opts.Logger.WarnContext(ctx, "request refused", args...)
	if s.opts.Metrics != nil {
		s.opts.Metrics.AuthFailed(code)
	}
	e := connect.NewError(code, why)
	if code == connect.CodeUnauthenticated {
		e.Meta().Set("WWW-Authenticate", `Bearer realm="tenure"`)
	}
	return e
}

// checkTask refuses, before anything is done to it, a task that the
// caller's scope does not hold, when the call's decision asked for it
// (auth.Decide); without authentication, or for a caller whose scope is
// everything, it does nothing. c serves the task's partition.
func (s *Server) checkTask(ctx context.Context, c *coordinator.Coordinator, taskID string) error {
	cl, _ := ctx.Value(callerKey{}).(*caller)
	if cl == nil || !cl.checkTask {
		return nil
	}
	t, err := c.Get(ctx, taskID)
	if err != nil {
		return err
	}
	if err := auth.CheckTask(cl.p, cl.call, taskID, auth.Target{Namespace: t.Namespace, Queue: t.Queue}); err != nil {
		return s.refuse(ctx, connect.CodePermissionDenied, cl.call, cl.peer, cl.p, err)
	}
	return nil
}

// authInterceptor authorises every call of the handlers it wraps: unary
// calls with their request message, streams (gRPC reflection) by their
// headers alone.
type authInterceptor struct{ s *Server }

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := a.s.authorize(ctx, req.Spec().Procedure, req.Header(), req.Peer().Addr, req.Any())
		if err != nil {
			return nil, forProtocol(err, req.Peer().Protocol)
		}
		return next(ctx, req)
	}
}

func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		call, peer := conn.Spec().Procedure, conn.Peer()
		if !auth.DecidesOnRequest(call) {
			ctx, err := a.s.authorize(ctx, call, conn.RequestHeader(), peer.Addr, nil)
			if err != nil {
				return forProtocol(err, peer.Protocol)
			}
			return next(ctx, conn)
		}
		// A server stream of the API (WatchEvents) is decided on its
		// request message, once it arrives: before the handler sees it.
		p, err := a.s.authenticate(ctx, call, conn.RequestHeader(), peer.Addr)
		if err != nil {
			return forProtocol(err, peer.Protocol)
		}
		ctx = principal.With(ctx, p.Name)
		return next(ctx, &decidingConn{StreamingHandlerConn: conn, s: a.s, ctx: ctx, p: p})
	}
}

// decidingConn decides a stream on the first request message it
// receives.
type decidingConn struct {
	connect.StreamingHandlerConn
	s       *Server
	ctx     context.Context
	p       *auth.Principal
	decided bool
}

func (c *decidingConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if !c.decided {
		if _, err := c.s.decide(c.ctx, c.p, c.Spec().Procedure, c.Peer().Addr, msg); err != nil {
			return forProtocol(err, c.Peer().Protocol)
		}
		c.decided = true
	}
	return nil
}

// forProtocol drops the WWW-Authenticate of a refusal answered over gRPC:
// gRPC sends an error's metadata as HTTP/2 trailers, where that header may
// not go (net/http drops it and logs "ignoring invalid trailer" for every
// refused call); the unauthenticated status says it alone. Connect and
// gRPC-Web answers keep it.
func forProtocol(err error, protocol string) error {
	if ce := new(connect.Error); protocol == connect.ProtocolGRPC && errors.As(err, &ce) {
		ce.Meta().Del("WWW-Authenticate")
	}
	return err
}

// authOptions are the handler options that authorise every call, if the
// server authenticates.
func (s *Server) authOptions() []connect.HandlerOption {
	if s.opts.Auth == nil {
		return nil
	}
	return []connect.HandlerOption{connect.WithInterceptors(authInterceptor{s})}
}

// requireToken serves next only to a request whose token may make call
// (an endpoint beside the API, such as auth.MetricsCall): 401 without a
// valid token, 403 with one that may not. Without authentication it is
// next.
func (s *Server) requireToken(call string, next http.Handler) http.Handler {
	if s.opts.Auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, ce := s.authorize(r.Context(), call, r.Header, r.RemoteAddr, nil)
		if ce != nil {
			status := http.StatusForbidden
			if ce.Code() == connect.CodeUnauthenticated {
				status = http.StatusUnauthorized
				w.Header().Set("WWW-Authenticate", ce.Meta().Get("WWW-Authenticate"))
			}
			http.Error(w, ce.Code().String()+": "+ce.Message(), status)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// nodeCaller is the principal of a node's own forwarded call: a reader
// of every namespace, for WaitTask only (a partition's watcher of remote
// edges: docs/design/workflows.md, "Cluster mode").
func nodeCaller(call string) (*auth.Principal, error) {
	if call != tenurev1connect.TaskServiceWaitTaskProcedure {
		return nil, fmt.Errorf("a node's own call (%q) may only be WaitTask, not %s", route.NodeCaller, call)
	}
	return &auth.Principal{Name: route.NodeCaller, Role: auth.Reader, Namespaces: []string{auth.All}}, nil
}
