package server

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// WorkflowService: a workflow's tasks may be in several partitions of its
// namespace (docs/design/workflows.md, "Cluster mode"), so every call asks
// each partition of the namespace (here, or the node that serves it,
// naming the partition: fanout.Each) and adds up their answers.

type workflowService struct{ s *Server }

// workflowParts runs local on every partition of the namespace's scope
// (forward on the node of each one served elsewhere) and returns the
// answers of those that know the workflow; ErrNotFound when none does.
func workflowParts[A any](s *Server, ctx context.Context, h interface{ Get(string) string }, namespace string,
	local func(p route.Partition, c *coordinator.Coordinator) (A, error), forward func(peer route.Peer, p route.Partition) (A, error)) ([]A, []route.Partition, error) {
	scope, err := s.scope(ctx, h, cmp.Or(namespace, coordinator.DefaultNamespace), "")
	if err != nil {
		return nil, nil, err
	}
	rs := fanout.Each(ctx, fanout.Parallel, scope, false, func(i int, c *coordinator.Coordinator) (A, error) {
		return local(scope[i], c)
	}, func(i int, peer route.Peer) (A, error) {
		return forward(peer, scope[i])
	})
	var out []A
	var parts []route.Partition
	var notFound error
	for i, r := range rs {
		switch {
		case errors.Is(r.Err, coordinator.ErrNotFound) || connect.CodeOf(r.Err) == connect.CodeNotFound:
			notFound = r.Err
		case r.Err != nil:
			return nil, nil, r.Err
		default:
			out = append(out, r.Value)
			parts = append(parts, scope[i])
		}
	}
	if len(out) == 0 {
		if notFound == nil {
			notFound = fmt.Errorf("%w: no partition of namespace %q", coordinator.ErrNotFound, namespace)
		}
		return nil, nil, notFound
	}
	return out, parts, nil
}

// workflowMessage converts what one partition knows of a workflow.
func workflowMessage(v coordinator.WorkflowView) *tenurev1.Workflow {
	m := &tenurev1.Workflow{Namespace: v.Key.Namespace, WorkflowId: v.Key.ID, Tasks: taskCounts(v.Counts), Total: uint64(v.Total),
		CreatedAt: ts(v.CreatedAt), UpdatedAt: ts(v.UpdatedAt), Delivering: uint64(v.Delivering)}
	if c := v.Cancelled; c != nil {
		m.Cancelled = &tenurev1.QueuePause{RequestedBy: c.By, Reason: c.Reason, PausedAt: ts(c.At)}
	}
	m.State = workflowState(m)
	return m
}

// workflowState sums up the states of a workflow's tasks.
func workflowState(m *tenurev1.Workflow) tenurev1.WorkflowState {
	c := m.GetTasks()
	switch {
	case m.GetCancelled() != nil:
		return tenurev1.WorkflowState_WORKFLOW_STATE_CANCELLED
	case c.GetCompleted()+c.GetFailed()+c.GetDead() < m.GetTotal() || m.GetDelivering() > 0:
		return tenurev1.WorkflowState_WORKFLOW_STATE_RUNNING
	case c.GetCompleted() == m.GetTotal():
		return tenurev1.WorkflowState_WORKFLOW_STATE_COMPLETED
	}
	return tenurev1.WorkflowState_WORKFLOW_STATE_FAILED
}

// mergeWorkflows adds up what several partitions know of one workflow.
func mergeWorkflows(ms []*tenurev1.Workflow) *tenurev1.Workflow {
	out := &tenurev1.Workflow{Namespace: ms[0].GetNamespace(), WorkflowId: ms[0].GetWorkflowId(), Tasks: &tenurev1.TaskCounts{}}
	for _, m := range ms {
		addCounts(out.Tasks, m.GetTasks())
		out.Total += m.GetTotal()
		out.Delivering += m.GetDelivering()
		if t := m.GetCreatedAt(); t != nil && (out.CreatedAt == nil || t.AsTime().Before(out.CreatedAt.AsTime())) {
			out.CreatedAt = t
		}
		if t := m.GetUpdatedAt(); t != nil && (out.UpdatedAt == nil || t.AsTime().After(out.UpdatedAt.AsTime())) {
			out.UpdatedAt = t
		}
		if c := m.GetCancelled(); c != nil && (out.Cancelled == nil || c.GetPausedAt().AsTime().After(out.Cancelled.GetPausedAt().AsTime())) {
			out.Cancelled = c
		}
	}
	out.State = workflowState(out)
	return out
}

// workflowPage is one partition's answer to GetWorkflow: the workflow as
// it knows it, and a page of its tasks there.
type workflowPage struct {
	wf    *tenurev1.Workflow
	tasks []*tenurev1.Task
	next  string // the partition's own page token
}

func (h workflowService) GetWorkflow(ctx context.Context, req *connect.Request[tenurev1.GetWorkflowRequest]) (*connect.Response[tenurev1.GetWorkflowResponse], error) {
	m := req.Msg
	size := int(m.GetPageSize())
	startID, after, err := parseWorkflowToken(m.GetPageToken())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	// Each partition answers the workflow and, from the partition the
	// token names on, a page of its tasks.
	pages, parts, err := workflowParts(h.s, ctx, req.Header(), m.GetNamespace(), func(p route.Partition, c *coordinator.Coordinator) (workflowPage, error) {
		from := after
		if p.ID() != startID {
			from = state.OrderKey{}
		}
		return h.s.workflowPageHere(ctx, c, m.GetNamespace(), m.GetWorkflowId(), from, size)
	}, func(peer route.Peer, p route.Partition) (workflowPage, error) {
		resp, err := peer.GetWorkflow(ctx, fanout.Request(m, p))
		if err != nil {
			return workflowPage{}, err
		}
		return workflowPage{wf: resp.Msg.GetWorkflow(), tasks: resp.Msg.GetTasks(), next: resp.Msg.GetNextPageToken()}, nil
	})
	if err != nil {
		return nil, h.s.apiError(err)
	}
	out := &tenurev1.GetWorkflowResponse{}
	wfs := make([]*tenurev1.Workflow, len(pages))
	for i, pg := range pages {
		wfs[i] = pg.wf
	}
	out.Workflow = mergeWorkflows(wfs)
	// The tasks: the page of the partition the token names (the first
	// without one), then on to the next partition. A forwarded call names
	// one partition, whose own token it answers.
	for i, pg := range pages {
		if m.GetPageToken() != "" && parts[i].ID() < startID {
			continue
		}
		out.Tasks = pg.tasks
		switch {
		case pg.next != "":
			if _, fw := route.Forwarded(ctx); fw {
				out.NextPageToken = pg.next
			} else {
				_, k, _ := parseWorkflowToken(pg.next)
				out.NextPageToken = workflowToken(parts[i].ID(), k)
			}
		case i+1 < len(pages):
			out.NextPageToken = workflowToken(parts[i+1].ID(), state.OrderKey{})
		}
		break
	}
	return connect.NewResponse(out), nil
}

// workflowPageHere is GetWorkflow on one partition served here.
func (s *Server) workflowPageHere(ctx context.Context, c *coordinator.Coordinator, namespace, id string, after state.OrderKey, size int) (workflowPage, error) {
	v, tasks, next, err := c.Workflow(ctx, namespace, id, after, size)
	if err != nil {
		return workflowPage{}, err
	}
	pg := workflowPage{wf: workflowMessage(v), tasks: make([]*tenurev1.Task, len(tasks))}
	for i, t := range tasks {
		pg.tasks[i] = task(t)
	}
	if next != (state.OrderKey{}) {
		pg.next = workflowToken(0, next)
	}
	return pg, nil
}

// Workflow page tokens name a partition and a task's place in its
// creation order: "partition.lsn.seq" in decimal.
func workflowToken(partition uint64, k state.OrderKey) string {
	return fmt.Sprintf("%d.%d.%d", partition, k.LSN, k.Seq)
}

func parseWorkflowToken(tok string) (partition uint64, k state.OrderKey, err error) {
	if tok == "" {
		return 0, state.OrderKey{}, nil
	}
	bad := &coordinator.FieldError{Field: "page_token", Problem: "not a token this server issued; pass next_page_token from the previous page"}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return 0, state.OrderKey{}, bad
	}
	var n [3]uint64
	for i, p := range parts {
		if n[i], err = strconv.ParseUint(p, 10, 64); err != nil {
			return 0, state.OrderKey{}, bad
		}
	}
	if n[2] > 0xffff {
		return 0, state.OrderKey{}, bad
	}
	return n[0], state.OrderKey{LSN: n[1], Seq: uint16(n[2])}, nil
}

func (h workflowService) ListWorkflows(ctx context.Context, req *connect.Request[tenurev1.ListWorkflowsRequest]) (*connect.Response[tenurev1.ListWorkflowsResponse], error) {
	m := req.Msg
	size := cmp.Or(int(m.GetPageSize()), 100)
	after, err := parseWorkflowKey(m.GetPageToken())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	scope, err := h.s.scope(ctx, req.Header(), m.GetNamespace(), "")
	if err != nil {
		return nil, h.s.apiError(err)
	}
	// Each partition answers its first workflows after the token, and
	// whether it has more.
	type part struct {
		wfs  []*tenurev1.Workflow
		more bool
	}
	rs := fanout.Each(ctx, fanout.Parallel, scope, true, func(_ int, c *coordinator.Coordinator) (part, error) {
		vs, next, err := c.Workflows(ctx, m.GetNamespace(), after, int(m.GetPageSize()))
		if err != nil {
			return part{}, err
		}
		p := part{wfs: make([]*tenurev1.Workflow, len(vs)), more: next != (state.WorkflowKey{})}
		for i, v := range vs {
			p.wfs[i] = workflowMessage(v)
		}
		return p, nil
	}, func(i int, peer route.Peer) (part, error) {
		resp, err := peer.ListWorkflows(ctx, fanout.Request(m, scope[i]))
		if err != nil {
			return part{}, err
		}
		return part{resp.Msg.GetWorkflows(), resp.Msg.GetNextPageToken() != ""}, nil
	})
	var all []*tenurev1.Workflow
	// bound is the least last key of the partitions that have more: past
	// it, one of them may hold a workflow not seen yet.
	var bound *tenurev1.Workflow
	for _, r := range rs {
		if r.Err != nil {
			return nil, h.s.apiError(r.Err)
		}
		all = append(all, r.Value.wfs...)
		if n := len(r.Value.wfs); r.Value.more && n > 0 && (bound == nil || compareWorkflows(r.Value.wfs[n-1], bound) < 0) {
			bound = r.Value.wfs[n-1]
		}
	}
	slices.SortStableFunc(all, compareWorkflows)
	out := &tenurev1.ListWorkflowsResponse{}
	for i := 0; i < len(all); {
		if bound != nil && compareWorkflows(all[i], bound) > 0 || len(out.Workflows) == size {
			break
		}
		j := i + 1
		for j < len(all) && compareWorkflows(all[j], all[i]) == 0 {
			j++
		}
		out.Workflows = append(out.Workflows, mergeWorkflows(all[i:j]))
		i = j
		if i < len(all) && len(out.Workflows) == size || bound != nil {
			last := out.Workflows[len(out.Workflows)-1]
			out.NextPageToken = workflowKeyToken(state.WorkflowKey{Namespace: last.GetNamespace(), ID: last.GetWorkflowId()})
		}
	}
	return connect.NewResponse(out), nil
}

// compareWorkflows orders workflows by namespace and id.
func compareWorkflows(a, b *tenurev1.Workflow) int {
	return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetWorkflowId(), b.GetWorkflowId()))
}

// A listing's page token is the key of the last workflow of the page, in
// base64 (namespace, a NUL, id).
func workflowKeyToken(k state.WorkflowKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.Namespace + "\x00" + k.ID))
}

func parseWorkflowKey(tok string) (state.WorkflowKey, error) {
	if tok == "" {
		return state.WorkflowKey{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	ns, id, ok := strings.Cut(string(b), "\x00")
	if err != nil || !ok {
		return state.WorkflowKey{}, &coordinator.FieldError{Field: "page_token", Problem: "not a token this server issued; pass next_page_token from the previous page"}
	}
	return state.WorkflowKey{Namespace: ns, ID: id}, nil
}

// actedWorkflow is one partition's answer to CancelWorkflow or
// RetryWorkflow: the workflow after it, and how many tasks it changed.
type actedWorkflow struct {
	wf *tenurev1.Workflow
	n  uint64
}

func (h workflowService) CancelWorkflow(ctx context.Context, req *connect.Request[tenurev1.CancelWorkflowRequest]) (*connect.Response[tenurev1.CancelWorkflowResponse], error) {
	m := req.Msg
	a := coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()}
	cancel := func() (*tenurev1.Workflow, uint64, error) {
		return h.act(ctx, req.Header(), m.GetNamespace(), func(c *coordinator.Coordinator) (coordinator.WorkflowView, int, error) {
			return c.CancelWorkflow(ctx, m.GetNamespace(), m.GetWorkflowId(), a)
		}, func(peer route.Peer, p route.Partition) (actedWorkflow, error) {
			resp, err := peer.CancelWorkflow(ctx, fanout.Request(m, p))
			if err != nil {
				return actedWorkflow{}, err
			}
			return actedWorkflow{resp.Msg.GetWorkflow(), resp.Msg.GetCancelled()}, nil
		})
	}
	wf, n, err := cancel()
	if err != nil {
		return nil, err
	}
	if _, node := h.s.r.(route.NodeIdentity); node {
		if _, fw := route.Forwarded(ctx); !fw {
			// In cluster mode, a second round, once every partition has
			// applied the first: a task that its workflow's home delivered
			// to a partition after the first round reached it, and marked
			// delivered before the first round reached the home, exists
			// now, and ends (docs/design/workflows.md, "Cluster mode").
			wf2, n2, err := cancel()
			if err != nil {
				return nil, err
			}
			wf, n = wf2, n+n2
		}
	}
	return connect.NewResponse(&tenurev1.CancelWorkflowResponse{Workflow: wf, Cancelled: n}), nil
}

func (h workflowService) RetryWorkflow(ctx context.Context, req *connect.Request[tenurev1.RetryWorkflowRequest]) (*connect.Response[tenurev1.RetryWorkflowResponse], error) {
	m := req.Msg
	a := coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()}
	wf, n, err := h.act(ctx, req.Header(), m.GetNamespace(), func(c *coordinator.Coordinator) (coordinator.WorkflowView, int, error) {
		return c.RetryWorkflow(ctx, m.GetNamespace(), m.GetWorkflowId(), a)
	}, func(peer route.Peer, p route.Partition) (actedWorkflow, error) {
		resp, err := peer.RetryWorkflow(ctx, fanout.Request(m, p))
		if err != nil {
			return actedWorkflow{}, err
		}
		return actedWorkflow{resp.Msg.GetWorkflow(), resp.Msg.GetRetried()}, nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tenurev1.RetryWorkflowResponse{Workflow: wf, Retried: n}), nil
}

// act runs an operator's action on a workflow in every partition that
// knows it, and adds up the answers.
func (h workflowService) act(ctx context.Context, hd interface{ Get(string) string }, namespace string,
	local func(c *coordinator.Coordinator) (coordinator.WorkflowView, int, error), forward func(route.Peer, route.Partition) (actedWorkflow, error)) (*tenurev1.Workflow, uint64, error) {
	parts, _, err := workflowParts(h.s, ctx, hd, namespace, func(_ route.Partition, c *coordinator.Coordinator) (actedWorkflow, error) {
		v, n, err := local(c)
		if err != nil {
			return actedWorkflow{}, err
		}
		return actedWorkflow{workflowMessage(v), uint64(n)}, nil
	}, forward)
	if err != nil {
		return nil, 0, h.s.apiError(err)
	}
	wfs := make([]*tenurev1.Workflow, len(parts))
	var n uint64
	for i, p := range parts {
		wfs[i], n = p.wf, n+p.n
	}
	return mergeWorkflows(wfs), n, nil
}

func (h workflowService) WaitWorkflow(ctx context.Context, req *connect.Request[tenurev1.WaitWorkflowRequest]) (*connect.Response[tenurev1.WaitWorkflowResponse], error) {
	m := req.Msg
	wait, leave, err := h.s.enterWait(m.GetWait())
	if err != nil {
		return nil, h.s.apiError(err)
	}
	defer leave()
	type waited struct {
		wf   *tenurev1.Workflow
		done bool
	}
	// Every partition waits for its own part; the workflow is done when
	// all are.
	round := func(wait time.Duration) (*tenurev1.Workflow, bool, error) {
		msg := proto.CloneOf(m)
		msg.Wait = durationpb.New(wait)
		parts, _, err := workflowParts(h.s, ctx, req.Header(), m.GetNamespace(), func(_ route.Partition, c *coordinator.Coordinator) (waited, error) {
			v, done, err := c.WaitWorkflow(ctx, m.GetNamespace(), m.GetWorkflowId(), wait)
			if err != nil {
				return waited{}, err
			}
			return waited{workflowMessage(v), done}, nil
		}, func(peer route.Peer, p route.Partition) (waited, error) {
			resp, err := peer.WaitWorkflow(ctx, fanout.Request(msg, p))
			if err != nil {
				return waited{}, err
			}
			return waited{resp.Msg.GetWorkflow(), resp.Msg.GetDone()}, nil
		})
		if err != nil {
			return nil, false, err
		}
		wfs := make([]*tenurev1.Workflow, len(parts))
		done := true
		for i, p := range parts {
			wfs[i], done = p.wf, done && p.done
		}
		return mergeWorkflows(wfs), done, nil
	}
	start := h.s.opts.Clock.Now()
	wf, done, err := round(wait)
	_, fw := route.Forwarded(ctx)
	_, node := h.s.r.(route.NodeIdentity)
	for err == nil && done && node && !fw {
		// In cluster mode a partition that did not have the workflow yet
		// when asked may have it now: tasks delivered to it while the
		// others finished (docs/design/workflows.md, "Cluster mode").
		// Done is confirmed by a look at every partition.
		var again bool
		if wf, again, err = round(0); err != nil || again {
			break
		}
		left := wait - h.s.opts.Clock.Now().Sub(start)
		if left <= 0 {
			done = false
			break
		}
		wf, done, err = round(left)
	}
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.WaitWorkflowResponse{Workflow: wf, Done: done}), nil
}
