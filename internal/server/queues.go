package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// Queue statistics, pause and resume: calls that cover every partition of
// a queue (or of every queue). Each partition is asked on its own, here or
// on the node that serves it (fanout.Each, with route.PartitionHeader
// naming it), and the answers are added up here.

type queueService struct{ s *Server }

// scope returns the partitions a call about namespace and queue covers: the
// one a forwarding node named, or every one of the queue.
func (s *Server) scope(ctx context.Context, h interface{ Get(string) string }, namespace, queue string) ([]route.Partition, error) {
	if _, fw := route.Forwarded(ctx); fw {
		if v := h.Get(route.PartitionHeader); v != "" {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, &coordinator.FieldError{Field: route.PartitionHeader, Problem: "not a partition id"}
			}
			p, err := s.r.Partition(ctx, id)
			if err != nil {
				return nil, err
			}
			return []route.Partition{p}, nil
		}
	}
	return s.r.Scope(ctx, namespace, queue)
}

// queues gathers the statistics of the queues of scope, added up over
// partitions, each with up to topKeys of its keys with the most waiting
// tasks.
func (s *Server) queues(ctx context.Context, scope []route.Partition, namespace, queue string, topKeys int) ([]*tenurev1.Queue, error) {
	msg := &tenurev1.ListQueuesRequest{Namespace: namespace, Queue: queue, TopKeys: uint32(topKeys)}
	all, err := concat(fanout.Each(ctx, fanout.Parallel, scope, true, func(_ int, c *coordinator.Coordinator) ([]*tenurev1.Queue, error) {
		qs, err := c.Queues(ctx, namespace, queue)
		if err != nil {
			return nil, err
		}
		out := make([]*tenurev1.Queue, len(qs))
		for i := range qs {
			out[i] = queueMessage(&qs[i])
			if topKeys > 0 && qs[i].Keys != nil {
				k := qs[i].Key
				top, err := c.TopKeys(ctx, k.Namespace, k.Queue, topKeys)
				if err != nil {
					return nil, err
				}
				out[i].Keys.Top = keySummaries(top)
			}
		}
		return out, nil
	}, func(i int, peer route.Peer) ([]*tenurev1.Queue, error) {
		resp, err := peer.ListQueues(ctx, fanout.Request(msg, scope[i]))
		if err != nil {
			return nil, err
		}
		var out []*tenurev1.Queue
		for _, q := range resp.Msg.GetQueues() {
			if queue == "" || q.GetQueue() == queue {
				out = append(out, q)
			}
		}
		return out, nil
	}))
	if err != nil {
		return nil, err
	}
	return mergeQueues(all, topKeys), nil
}

// concat joins the answers of every partition, or returns the first
// error.
func concat[T any](rs []fanout.Result[[]T]) ([]T, error) {
	if err := fanout.FirstErr(rs); err != nil {
		return nil, err
	}
	var out []T
	for _, r := range rs {
		out = append(out, r.Value...)
	}
	return out, nil
}

// anyChanged reports whether a change made on several partitions at once
// changed any of them, or returns the first error.
func anyChanged(rs []fanout.Result[bool]) (bool, error) {
	changed := false
	for _, r := range rs {
		changed = changed || r.Value
	}
	return changed, fanout.FirstErr(rs)
}

func (h queueService) ListQueues(ctx context.Context, req *connect.Request[tenurev1.ListQueuesRequest]) (*connect.Response[tenurev1.ListQueuesResponse], error) {
	s := h.s
	ns, q, top := req.Msg.GetNamespace(), req.Msg.GetQueue(), int(req.Msg.GetTopKeys())
	if q != "" && ns == "" {
		return nil, s.apiError(&coordinator.FieldError{Field: "namespace", Problem: "required with queue: a queue is named within its namespace"})
	}
	if top > coordinator.MaxTopKeys {
		return nil, s.apiError(&coordinator.FieldError{Field: "top_keys", Problem: fmt.Sprintf("%d is over the limit of %d", top, coordinator.MaxTopKeys)})
	}
	scope, err := s.scope(ctx, req.Header(), ns, q)
	if err != nil {
		return nil, s.apiError(err)
	}
	qs, err := s.queues(ctx, scope, ns, q, top)
	if err != nil {
		return nil, s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.ListQueuesResponse{Queues: qs}), nil
}

// getQueueTopKeys is how many keys GetQueue lists.
const getQueueTopKeys = 10

// oneQueue returns the statistics of one queue, or QueueNotFound.
func (s *Server) oneQueue(ctx context.Context, scope []route.Partition, namespace, queue string) (*tenurev1.Queue, error) {
	qs, err := s.queues(ctx, scope, namespace, queue, getQueueTopKeys)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, coordinator.QueueNotFound(namespace, queue)
	}
	return qs[0], nil
}

func (h queueService) GetQueue(ctx context.Context, req *connect.Request[tenurev1.GetQueueRequest]) (*connect.Response[tenurev1.GetQueueResponse], error) {
	s := h.s
	ns, q := cmp.Or(req.Msg.GetNamespace(), coordinator.DefaultNamespace), req.Msg.GetQueue()
	if err := s.opts.Limits.CheckNames(ns, q, ""); err != nil {
		return nil, s.apiError(err)
	}
	scope, err := s.r.Scope(ctx, ns, q)
	if err != nil {
		return nil, s.apiError(err)
	}
	out, err := s.oneQueue(ctx, scope, ns, q)
	if err != nil {
		return nil, s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.GetQueueResponse{Queue: out}), nil
}

func (h queueService) PauseQueue(ctx context.Context, req *connect.Request[tenurev1.PauseQueueRequest]) (*connect.Response[tenurev1.PauseQueueResponse], error) {
	m := req.Msg
	changed, q, err := h.s.setPaused(ctx, req.Header(), true, m.GetNamespace(), m.GetQueue(), coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()})
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.PauseQueueResponse{Changed: changed, Queue: q}), nil
}

func (h queueService) ResumeQueue(ctx context.Context, req *connect.Request[tenurev1.ResumeQueueRequest]) (*connect.Response[tenurev1.ResumeQueueResponse], error) {
	m := req.Msg
	changed, q, err := h.s.setPaused(ctx, req.Header(), false, m.GetNamespace(), m.GetQueue(), coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()})
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.ResumeQueueResponse{Changed: changed, Queue: q}), nil
}

// setPaused pauses or resumes a queue in every partition it has: a queue no
// partition knows is refused, and nothing is written. It answers the
// queue as it is afterwards.
func (s *Server) setPaused(ctx context.Context, h interface{ Get(string) string }, pause bool, namespace, queue string, a coordinator.Actor) (bool, *tenurev1.Queue, error) {
	namespace = cmp.Or(namespace, coordinator.DefaultNamespace)
	if err := s.opts.Limits.CheckNames(namespace, queue, ""); err != nil {
		return false, nil, err
	}
	scope, err := s.scope(ctx, h, namespace, queue)
	if err != nil {
		return false, nil, err
	}
	if _, fw := route.Forwarded(ctx); !fw {
		// Only a queue that exists: one with a task, a pause or a recent
		// event somewhere (cluster mode: one with partitions).
		if _, err := s.oneQueue(ctx, scope, namespace, queue); err != nil {
			return false, nil, err
		}
	}
	req := coordinator.PauseRequest{Namespace: namespace, Queue: queue, Actor: a}
	changed, err := anyChanged(fanout.Each(ctx, fanout.Parallel, scope, false, func(_ int, c *coordinator.Coordinator) (bool, error) {
		if pause {
			return c.Pause(ctx, req)
		}
		return c.Resume(ctx, req)
	}, func(i int, peer route.Peer) (bool, error) {
		if pause {
			resp, err := peer.PauseQueue(ctx, fanout.Request(&tenurev1.PauseQueueRequest{Namespace: namespace, Queue: queue, Reason: a.Reason, RequestedBy: a.By}, scope[i]))
			return err == nil && resp.Msg.GetChanged(), err
		}
		resp, err := peer.ResumeQueue(ctx, fanout.Request(&tenurev1.ResumeQueueRequest{Namespace: namespace, Queue: queue, Reason: a.Reason, RequestedBy: a.By}, scope[i]))
		return err == nil && resp.Msg.GetChanged(), err
	}))
	if err != nil {
		return false, nil, err
	}
	if _, fw := route.Forwarded(ctx); fw {
		// The node that forwarded it adds up the queue afterwards; this
		// partition may not know the queue any more (a resume leaves a
		// partition without a task of it with nothing to report).
		return changed, nil, nil
	}
	q, err := s.oneQueue(ctx, scope, namespace, queue)
	if err != nil {
		return false, nil, err
	}
	return changed, q, nil
}

// queueMessage converts one partition's statistics of a queue.
func queueMessage(q *state.QueueStats) *tenurev1.Queue {
	m := &tenurev1.Queue{
		Namespace:     q.Key.Namespace,
		Queue:         q.Key.Queue,
		Tasks:         taskCounts(q.Tasks),
		ActiveLeases:  uint64(q.Leases),
		LastMinute:    queueEvents(q.LastMinute),
		Last_5Minutes: queueEvents(q.Last5Minutes),
		LastHour:      queueEvents(q.LastHour),
		Partitions:    1,
	}
	if q.OldestDue != 0 {
		m.OldestWaitingAge = durationpb.New(q.Now.Std().Sub(q.OldestDue.Std()))
	}
	if p := q.Paused; p != nil {
		m.Paused, m.PausedPartitions = true, 1
		m.Pause = &tenurev1.QueuePause{RequestedBy: p.By, Reason: p.Reason, PausedAt: ts(p.At)}
	}
	if l := q.Limits; l != nil || len(q.KeyWeights) > 0 {
		m.Limits, m.LimitedPartitions = queueLimitsMessage(l, q.KeyWeights), 1
	}
	if k := q.Keys; k != nil {
		m.Keys = &tenurev1.QueueKeys{Keys: uint64(k.Keys), HeldByConcurrency: uint64(k.Held[state.HoldConcurrency]),
			HeldByRate: uint64(k.Held[state.HoldRate]), HeldByOrder: uint64(k.Held[state.HoldOrder])}
	}
	for _, c := range q.PerMinute {
		m.PerMinute = append(m.PerMinute, queueEvents(c))
	}
	return m
}

func queueEvents(c state.EventCounts) *tenurev1.QueueEvents {
	return &tenurev1.QueueEvents{
		Submitted:    c[state.EventSubmitted],
		Completed:    c[state.EventCompleted],
		Failed:       c[state.EventFailed],
		LeaseExpired: c[state.EventLeaseExpired],
	}
}

// keySummaries converts a partition's top keys.
func keySummaries(ks []state.KeyStats) []*tenurev1.KeySummary {
	out := make([]*tenurev1.KeySummary, len(ks))
	for i, k := range ks {
		out[i] = &tenurev1.KeySummary{Key: k.Key, Waiting: uint64(k.Waiting), Leased: uint64(k.Leased)}
		if k.Held != state.HoldNone {
			out[i].Held = k.Held.String()
		}
	}
	return out
}

// mergeKeys adds the keys of q's partition to m's: the counts add up (a
// key's tasks are all in one partition, so keys do not repeat), and the
// top keys are the first topKeys of both lists by waiting, leased, name.
func mergeKeys(m, q *tenurev1.Queue, topKeys int) {
	k := q.GetKeys()
	if k == nil {
		return
	}
	if m.Keys == nil {
		m.Keys = &tenurev1.QueueKeys{}
	}
	m.Keys.Keys += k.GetKeys()
	m.Keys.HeldByConcurrency += k.GetHeldByConcurrency()
	m.Keys.HeldByRate += k.GetHeldByRate()
	m.Keys.HeldByOrder += k.GetHeldByOrder()
	top := append(m.Keys.Top, k.GetTop()...)
	slices.SortFunc(top, func(a, b *tenurev1.KeySummary) int {
		return cmp.Or(cmp.Compare(b.GetWaiting(), a.GetWaiting()), cmp.Compare(b.GetLeased(), a.GetLeased()), cmp.Compare(a.GetKey(), b.GetKey()))
	})
	m.Keys.Top = top[:min(len(top), topKeys)]
}

// mergeQueues adds up the statistics of the same queue from several
// partitions, and orders the queues by namespace and queue.
func mergeQueues(in []*tenurev1.Queue, topKeys int) []*tenurev1.Queue {
	type key struct{ ns, q string }
	byKey := map[key]*tenurev1.Queue{}
	var out []*tenurev1.Queue
	for _, q := range in {
		k := key{q.GetNamespace(), q.GetQueue()}
		m := byKey[k]
		if m == nil {
			byKey[k] = q
			out = append(out, q)
			continue
		}
		addCounts(m.Tasks, q.GetTasks())
		m.ActiveLeases += q.GetActiveLeases()
		if a := q.GetOldestWaitingAge(); a != nil && (m.OldestWaitingAge == nil || a.AsDuration() > m.OldestWaitingAge.AsDuration()) {
			m.OldestWaitingAge = a
		}
		if p := q.GetPause(); p != nil && (m.Pause == nil || p.GetPausedAt().AsTime().Before(m.Pause.GetPausedAt().AsTime())) {
			m.Pause = p
		}
		if l := q.GetLimits(); l != nil && (m.Limits == nil || l.GetSetAt().AsTime().After(m.Limits.GetSetAt().AsTime())) {
			m.Limits = l
		}
		mergeKeys(m, q, topKeys)
		m.Partitions += q.GetPartitions()
		m.PausedPartitions += q.GetPausedPartitions()
		m.LimitedPartitions += q.GetLimitedPartitions()
		m.Paused = m.PausedPartitions == m.Partitions
		addEvents(m.LastMinute, q.GetLastMinute())
		addEvents(m.Last_5Minutes, q.GetLast_5Minutes())
		addEvents(m.LastHour, q.GetLastHour())
		for i, e := range q.GetPerMinute() {
			if i < len(m.PerMinute) {
				addEvents(m.PerMinute[i], e)
			}
		}
	}
	slices.SortFunc(out, func(a, b *tenurev1.Queue) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetQueue(), b.GetQueue()))
	})
	return out
}

func addCounts(m, q *tenurev1.TaskCounts) {
	m.Waiting += q.GetWaiting()
	m.Leased += q.GetLeased()
	m.Committed += q.GetCommitted()
	m.Completed += q.GetCompleted()
	m.Failed += q.GetFailed()
	m.Dead += q.GetDead()
	m.Blocked += q.GetBlocked()
}

// taskCounts converts counts by state.
func taskCounts(c [state.NumStates]int) *tenurev1.TaskCounts {
	return &tenurev1.TaskCounts{
		Waiting:   uint64(c[state.Waiting]),
		Leased:    uint64(c[state.Leased]),
		Committed: uint64(c[state.Committed]),
		Completed: uint64(c[state.Completed]),
		Failed:    uint64(c[state.Failed]),
		Dead:      uint64(c[state.Dead]),
		Blocked:   uint64(c[state.Blocked]),
	}
}

func addEvents(m, q *tenurev1.QueueEvents) {
	m.Submitted += q.GetSubmitted()
	m.Completed += q.GetCompleted()
	m.Failed += q.GetFailed()
	m.LeaseExpired += q.GetLeaseExpired()
}
