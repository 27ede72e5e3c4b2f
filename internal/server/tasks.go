package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

type taskService struct{ s *Server }

// taskPlacement is what Router.Place hashes to find a new task's
// partition: its key's placement, so that every task of a key is in one
// partition and the key's limits hold there whole (docs/design/keys.md);
// otherwise its request id, so that a retry meets its first try.
func taskPlacement(r *coordinator.SubmitRequest) string {
	if r.Key == "" {
		return r.RequestID
	}
	return keyPlacement(r.Key)
}

// keyPlacement is the placement of a key: derived from the key alone, and
// always a valid request id.
func keyPlacement(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "key." + hex.EncodeToString(sum[:16])
}

func (h taskService) Submit(ctx context.Context, req *connect.Request[tenurev1.SubmitRequest]) (*connect.Response[tenurev1.SubmitResponse], error) {
	s := h.s
	r, err := submitRequest(req.Msg)
	if err != nil {
		return nil, s.apiError(err)
	}
	p, err := s.r.Place(ctx, r.Namespace, r.Queue, taskPlacement(&r))
	if err != nil {
		return nil, s.apiError(err)
	}
	if r.Remote, err = s.remoteDeps(ctx, p, r.Namespace, "depends_on", r.DependsOn, false); err != nil {
		return nil, s.apiError(err)
	}
	return one(s, ctx, p, false, req, route.Peer.Submit, func(c *coordinator.Coordinator) (*tenurev1.SubmitResponse, error) {
		res, err := c.Submit(ctx, r)
		if err != nil {
			return nil, err
		}
		return &tenurev1.SubmitResponse{Task: task(res.TaskView), Duplicate: res.Duplicate}, nil
	})
}

func (h taskService) SubmitBatch(ctx context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	out, err := h.s.submitBatch(ctx, req.Header(), req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(out), nil
}

func (h taskService) GetTask(ctx context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	id := req.Msg.GetTaskId()
	return byTask(h.s, ctx, id, true, req, route.Peer.GetTask, func(c *coordinator.Coordinator) (*tenurev1.GetTaskResponse, error) {
		t, err := c.View(ctx, id)
		if err != nil {
			return nil, err
		}
		return &tenurev1.GetTaskResponse{Task: task(t)}, nil
	})
}

func (h taskService) ListTasks(ctx context.Context, req *connect.Request[tenurev1.ListTasksRequest]) (*connect.Response[tenurev1.ListTasksResponse], error) {
	out, err := h.s.list(ctx, req.Msg)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(out), nil
}

func (h taskService) KillTask(ctx context.Context, req *connect.Request[tenurev1.KillTaskRequest]) (*connect.Response[tenurev1.KillTaskResponse], error) {
	id := req.Msg.GetTaskId()
	// The answer shows the task after the kill: a read, so it is confirmed.
	return byTask(h.s, ctx, id, true, req, route.Peer.KillTask, func(c *coordinator.Coordinator) (*tenurev1.KillTaskResponse, error) {
		if err := c.Kill(ctx, id, coordinator.Actor{By: req.Msg.GetRequestedBy(), Reason: req.Msg.GetReason()}); err != nil {
			return nil, err
		}
		t, err := c.View(ctx, id)
		if err != nil {
			return nil, err
		}
		return &tenurev1.KillTaskResponse{Task: task(t)}, nil
	})
}

func (h taskService) RetryTask(ctx context.Context, req *connect.Request[tenurev1.RetryTaskRequest]) (*connect.Response[tenurev1.RetryTaskResponse], error) {
	id := req.Msg.GetTaskId()
	// As KillTask: the answer shows the task after the retry, confirmed.
	return byTask(h.s, ctx, id, true, req, route.Peer.RetryTask, func(c *coordinator.Coordinator) (*tenurev1.RetryTaskResponse, error) {
		if err := c.Retry(ctx, id, coordinator.Actor{By: req.Msg.GetRequestedBy(), Reason: req.Msg.GetReason()}); err != nil {
			return nil, err
		}
		t, err := c.View(ctx, id)
		if err != nil {
			return nil, err
		}
		return &tenurev1.RetryTaskResponse{Task: task(t)}, nil
	})
}

func (h taskService) RetryTasks(ctx context.Context, req *connect.Request[tenurev1.RetryTasksRequest]) (*connect.Response[tenurev1.RetryTasksResponse], error) {
	m := req.Msg
	res, err := bulk(h.s, ctx, req, coordinator.BulkRetry, m.GetFilter(), m.GetReason(), m.GetRequestedBy(), route.Peer.RetryTasks)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tenurev1.RetryTasksResponse{Changed: res.changed, Skipped: res.skipped}), nil
}

func (h taskService) KillTasks(ctx context.Context, req *connect.Request[tenurev1.KillTasksRequest]) (*connect.Response[tenurev1.KillTasksResponse], error) {
	m := req.Msg
	res, err := bulk(h.s, ctx, req, coordinator.BulkKill, m.GetFilter(), m.GetReason(), m.GetRequestedBy(), route.Peer.KillTasks)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tenurev1.KillTasksResponse{Changed: res.changed, Skipped: res.skipped}), nil
}

func (h taskService) PurgeTasks(ctx context.Context, req *connect.Request[tenurev1.PurgeTasksRequest]) (*connect.Response[tenurev1.PurgeTasksResponse], error) {
	m := req.Msg
	res, err := bulk(h.s, ctx, req, coordinator.BulkPurge, m.GetFilter(), m.GetReason(), m.GetRequestedBy(), route.Peer.PurgeTasks)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tenurev1.PurgeTasksResponse{Changed: res.changed, Skipped: res.skipped}), nil
}

func (h taskService) WaitTask(ctx context.Context, req *connect.Request[tenurev1.WaitTaskRequest]) (*connect.Response[tenurev1.WaitTaskResponse], error) {
	id := req.Msg.GetTaskId()
	wait, leave, err := h.s.enterWait(req.Msg.GetWait())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	defer leave()
	return byTask(h.s, ctx, id, true, req, route.Peer.WaitTask, func(c *coordinator.Coordinator) (*tenurev1.WaitTaskResponse, error) {
		v, done, err := c.WaitTask(ctx, id, wait)
		if err != nil {
			return nil, err
		}
		return &tenurev1.WaitTaskResponse{Task: task(v), Done: done}, nil
	})
}

func (h taskService) GetTaskHistory(ctx context.Context, req *connect.Request[tenurev1.GetTaskHistoryRequest]) (*connect.Response[tenurev1.GetTaskHistoryResponse], error) {
	id := req.Msg.GetTaskId()
	return byTask(h.s, ctx, id, true, req, route.Peer.GetTaskHistory, func(c *coordinator.Coordinator) (*tenurev1.GetTaskHistoryResponse, error) {
		hist, err := c.History(ctx, id)
		if err != nil {
			return nil, err
		}
		out := &tenurev1.GetTaskHistoryResponse{Entries: make([]*tenurev1.HistoryEntry, len(hist))}
		for i, e := range hist {
			out.Entries[i] = historyEntryOf(id, e)
		}
		return out, nil
	})
}
