package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

type workerService struct{ s *Server }

func (h workerService) Lease(ctx context.Context, req *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
	leave, err := h.enterLongPoll(req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	defer leave()
	lr, err := h.s.leaseRequest(req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	out, err := h.lease(ctx, lr)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(out), nil
}

// enterLongPoll counts a lease that may long-poll toward its worker's
// limit of them (Server.enterLongPoll) until leave is called.
func (h workerService) enterLongPoll(msg *tenurev1.LeaseRequest) (leave func(), err error) {
	if msg.GetWait().AsDuration() <= 0 {
		return func() {}, nil
	}
	return h.s.enterLongPoll(msg.GetWorkerId())
}

// lease is a Lease call's answer, for Lease and for the lease a
// CompleteBatch carries: a draining server ends a long poll at once with
// no task.
func (h workerService) lease(ctx context.Context, req leaseRequest) (*tenurev1.LeaseResponse, error) {
	pollCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.s.drain, cancel)()
	out, err := h.s.lease(pollCtx, req)
	if err != nil && h.s.drain.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return &tenurev1.LeaseResponse{}, nil
	}
	return out, err
}

func (h workerService) Start(ctx context.Context, req *connect.Request[tenurev1.StartRequest]) (*connect.Response[tenurev1.StartResponse], error) {
	m := req.Msg
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Start, func(c *coordinator.Coordinator) (*tenurev1.StartResponse, error) {
		return &tenurev1.StartResponse{}, c.Start(ctx, m.GetTaskId(), m.GetLeaseId())
	})
}

func (h workerService) Heartbeat(ctx context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	m := req.Msg
	report := progressReport(m.GetProgress())
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Heartbeat, func(c *coordinator.Coordinator) (*tenurev1.HeartbeatResponse, error) {
		exp, err := c.HeartbeatReport(ctx, m.GetTaskId(), m.GetLeaseId(), report)
		if err != nil {
			return nil, err
		}
		return &tenurev1.HeartbeatResponse{LeaseExpiry: timestamppb.New(exp)}, nil
	})
}

func (h workerService) Commit(ctx context.Context, req *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
	m := req.Msg
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Commit, func(c *coordinator.Coordinator) (*tenurev1.CommitResponse, error) {
		spawn, err := h.s.spawnRequests(ctx, c, m.GetTaskId(), m.GetSpawn())
		if err != nil {
			return nil, err
		}
		tok, ids, err := c.CommitSpawn(ctx, m.GetTaskId(), m.GetLeaseId(), m.GetResult(), spawn)
		if err != nil {
			return nil, err
		}
		return &tenurev1.CommitResponse{FencingToken: &tenurev1.FencingToken{TaskId: tok.TaskID, Attempt: tok.Attempt}, SpawnedTaskIds: ids}, nil
	})
}

func (h workerService) Complete(ctx context.Context, req *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	m := req.Msg
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Complete, func(c *coordinator.Coordinator) (*tenurev1.CompleteResponse, error) {
		spawn, err := h.s.spawnRequests(ctx, c, m.GetTaskId(), m.GetSpawn())
		if err != nil {
			return nil, err
		}
		ids, err := c.CompleteSpawn(ctx, m.GetTaskId(), m.GetLeaseId(), m.GetResult(), spawn)
		if err != nil {
			return nil, err
		}
		return &tenurev1.CompleteResponse{SpawnedTaskIds: ids}, nil
	})
}

// spawnRequests converts what a commit or completion of task id spawns,
// and refuses one outside the caller's scope (a spawn submits a task); a
// spawned task without a namespace is in the task's. c serves the task.
func (s *Server) spawnRequests(ctx context.Context, c *coordinator.Coordinator, id string, in []*tenurev1.SubmitRequest) ([]coordinator.SubmitRequest, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]coordinator.SubmitRequest, len(in))
	for i, r := range in {
		var err error
		if out[i], err = submitRequest(r); err != nil {
			return nil, spawnItemError(err, i)
		}
	}
	t, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.placeSpawn(ctx, id, t.Namespace, out); err != nil {
		return nil, err
	}
	cl, _ := ctx.Value(callerKey{}).(*caller)
	if cl == nil || !cl.checkTask {
		return out, nil
	}
	for _, r := range out {
		if err := auth.CheckSpawn(cl.p, cl.call, auth.Target{Namespace: cmp.Or(r.Namespace, t.Namespace), Queue: r.Queue}); err != nil {
			return nil, s.refuse(ctx, connect.CodePermissionDenied, cl.call, cl.peer, cl.p, err)
		}
	}
	return out, nil
}

// spawnItemError names item i of a spawn in err's field.
func spawnItemError(err error, i int) error {
	var fe *coordinator.FieldError
	if errors.As(err, &fe) {
		return &coordinator.FieldError{Field: fmt.Sprintf("spawn[%d].%s", i, fe.Field), Problem: fe.Problem}
	}
	return err
}

// CompleteBatch completes the items and then, with lease set, leases as
// Lease would. The lease request is checked first, with the worker's
// limit of long polls (its scope was decided with the call's:
// auth.Decide), so that a refused one applies nothing.
func (h workerService) CompleteBatch(ctx context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	next := req.Msg.GetLease()
	var lr leaseRequest
	if next != nil {
		var err error
		if lr, err = h.s.leaseRequest(next); err != nil {
			return nil, h.s.apiError(err)
		}
		leave, err := h.enterLongPoll(next)
		if err != nil {
			return nil, h.s.apiError(err)
		}
		defer leave()
	}
	// The completions' wait for durability is the lease's: one wait, and
	// most often one fsync, for both.
	var later *durables
	if next != nil {
		later = new(durables)
	}
	out, err := h.s.completeBatch(ctx, req.Msg, later)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	if next != nil {
		got, err := h.lease(ctx, lr)
		if werr := later.wait(ctx); werr != nil {
			return nil, h.s.apiError(werr)
		}
		if err != nil {
			return nil, h.s.apiError(err)
		}
		out.Leased = got.GetTasks()
	}
	return connect.NewResponse(out), nil
}

func (h workerService) Fail(ctx context.Context, req *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	m := req.Msg
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Fail, func(c *coordinator.Coordinator) (*tenurev1.FailResponse, error) {
		res, err := c.Fail(ctx, m.GetTaskId(), m.GetLeaseId(), m.GetReason(), m.GetPermanent())
		if err != nil {
			return nil, err
		}
		return &tenurev1.FailResponse{State: taskStates[res.State], RetryAt: stdTS(res.RetryAt)}, nil
	})
}

func (h workerService) Snooze(ctx context.Context, req *connect.Request[tenurev1.SnoozeRequest]) (*connect.Response[tenurev1.SnoozeResponse], error) {
	m := req.Msg
	delay, err := duration("delay", m.GetDelay())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return byTask(h.s, ctx, m.GetTaskId(), false, req, route.Peer.Snooze, func(c *coordinator.Coordinator) (*tenurev1.SnoozeResponse, error) {
		until, err := c.Snooze(ctx, m.GetTaskId(), m.GetLeaseId(), delay, m.GetReason())
		if err != nil {
			return nil, err
		}
		return &tenurev1.SnoozeResponse{NotBefore: stdTS(until)}, nil
	})
}
