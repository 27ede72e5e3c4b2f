package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// Flow control of a queue (docs/design/state-machine.md, "Flow control"). The
// node that takes the call resolves the change against the queue's
// limits, then has every partition of the queue record its share: partition
// i of n records coordinator.SplitLimits(limits, n, i), so the shares add
// up to the limits and their sum is never exceeded. A forwarded call
// carries the resolved limits in full, for the one partition that
// route.PartitionHeader names, with its place in the split in
// route.SplitHeader.

func (h queueService) SetQueueLimits(ctx context.Context, req *connect.Request[tenurev1.SetQueueLimitsRequest]) (*connect.Response[tenurev1.SetQueueLimitsResponse], error) {
	changed, q, err := h.s.setLimits(ctx, req)
	if err != nil {
		return nil, h.s.apiError(err)
	}
	return connect.NewResponse(&tenurev1.SetQueueLimitsResponse{Changed: changed, Queue: q}), nil
}

// limitChange is the change a request asks for.
func limitChange(m *tenurev1.SetQueueLimitsRequest) coordinator.LimitChange {
	return coordinator.LimitChange{
		MaxConcurrency:      m.MaxConcurrency,
		Rate:                m.Rate,
		Burst:               m.Burst,
		ClearMaxConcurrency: m.GetClearMaxConcurrency(),
		ClearRate:           m.GetClearRate(),

		KeyMaxConcurrency:      m.KeyMaxConcurrency,
		KeyRate:                m.KeyRate,
		KeyBurst:               m.KeyBurst,
		ClearKeyMaxConcurrency: m.GetClearKeyMaxConcurrency(),
		ClearKeyRate:           m.GetClearKeyRate(),
		KeyOrdered:             m.KeyOrdered,
		Fair:                   m.Fair,
		KeyWeights:             keyWeightsOf(m.GetKeyWeights()),
		ClearKeyWeights:        m.GetClearKeyWeights(),
	}
}

// keyWeightsOf converts key weights of the API.
func keyWeightsOf(ms []*tenurev1.KeyWeight) []state.KeyWeight {
	var out []state.KeyWeight
	for _, m := range ms {
		out = append(out, state.KeyWeight{Key: m.GetKey(), Weight: m.GetWeight()})
	}
	return out
}

// keyWeightMessages converts key weights to the API's.
func keyWeightMessages(ws []state.KeyWeight) []*tenurev1.KeyWeight {
	var out []*tenurev1.KeyWeight
	for _, w := range ws {
		out = append(out, &tenurev1.KeyWeight{Key: w.Key, Weight: w.Weight})
	}
	return out
}

// resolved is what a change of limits makes of a queue's: its
// queue-wide limits, the limits of its keys and their weights.
type resolved struct {
	limits  state.Limits
	keys    state.KeyLimits
	weights []state.KeyWeight
}

// resolve returns what the change of m makes of current's limits, over
// partitions partitions.
func resolve(m *tenurev1.SetQueueLimitsRequest, current *tenurev1.QueueLimits, partitions int) (resolved, error) {
	ch := limitChange(m)
	var r resolved
	var err error
	if r.limits, err = ch.Resolve(limitsOf(current), partitions); err != nil {
		return r, err
	}
	if r.keys, err = ch.ResolveKeys(keyLimitsOf(current)); err != nil {
		return r, err
	}
	r.weights, err = ch.ResolveWeights(keyWeightsOf(current.GetKeyWeights()))
	return r, err
}

// setLimits sets a queue's limits in every partition it has, creating the
// queue if it does not exist yet, and answers the queue as it is
// afterwards. A bad limit is refused before anything is written.
func (s *Server) setLimits(ctx context.Context, req *connect.Request[tenurev1.SetQueueLimitsRequest]) (bool, *tenurev1.Queue, error) {
	m := req.Msg
	namespace, queue := cmp.Or(m.GetNamespace(), coordinator.DefaultNamespace), m.GetQueue()
	if err := s.opts.Limits.CheckNames(namespace, queue, ""); err != nil {
		return false, nil, err
	}
	a := coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()}
	if _, fw := route.Forwarded(ctx); fw {
		return s.setForwardedLimits(ctx, req, namespace, queue, a)
	}
	scope, err := s.r.Scope(ctx, namespace, queue)
	if err != nil {
		return false, nil, err
	}
	if len(scope) == 0 {
		// The limits of a queue without tasks wait for them: create it
		// (its partitions) as its first submit would, once the request is
		// known to be good for a queue without limits.
		if _, err := resolve(m, nil, 1); err != nil {
			return false, nil, err
		}
		if _, err := s.r.Place(ctx, namespace, queue, ""); err != nil {
			return false, nil, err
		}
		if scope, err = s.r.Scope(ctx, namespace, queue); err != nil {
			return false, nil, err
		}
	}
	if len(scope) == 0 {
		return false, nil, fmt.Errorf("%w: queue %s/%s was created but is not in the partition map yet; retry", coordinator.ErrUnavailable, namespace, queue)
	}
	var current *tenurev1.QueueLimits
	switch q, err := s.oneQueue(ctx, scope, namespace, queue); {
	case err == nil:
		current = q.GetLimits()
	case !errors.Is(err, coordinator.ErrNotFound):
		return false, nil, err
	}
	res, err := resolve(m, current, len(scope))
	if err != nil {
		return false, nil, err
	}
	n := len(scope)
	msg := limitsRequest(namespace, queue, res, a)
	changed, err := anyChanged(fanout.Each(ctx, fanout.Parallel, scope, false, func(i int, c *coordinator.Coordinator) (bool, error) {
		return c.SetLimits(ctx, coordinator.LimitsRequest{Namespace: namespace, Queue: queue, Limits: res.limits, Keys: res.keys, KeyWeights: res.weights,
			Partitions: n, Index: i, Actor: a})
	}, func(i int, peer route.Peer) (bool, error) {
		r := fanout.Request(msg, scope[i])
		r.Header().Set(route.SplitHeader, fmt.Sprintf("%d/%d", i, n))
		resp, err := peer.SetQueueLimits(ctx, r)
		return err == nil && resp.Msg.GetChanged(), err
	}))
	if err != nil {
		return false, nil, err
	}
	q, err := s.oneQueue(ctx, scope, namespace, queue)
	if err != nil {
		return false, nil, err
	}
	return changed, q, nil
}

// setForwardedLimits records the share of the limits that another node
// resolved in the one partition the request names.
func (s *Server) setForwardedLimits(ctx context.Context, req *connect.Request[tenurev1.SetQueueLimitsRequest], namespace, queue string, a coordinator.Actor) (bool, *tenurev1.Queue, error) {
	i, n, err := parseSplit(req.Header().Get(route.SplitHeader))
	if err != nil {
		return false, nil, err
	}
	scope, err := s.scope(ctx, req.Header(), namespace, queue)
	if err != nil {
		return false, nil, err
	}
	if len(scope) != 1 {
		return false, nil, &coordinator.FieldError{Field: route.PartitionHeader, Problem: "a forwarded change of limits names one partition"}
	}
	res, err := resolve(req.Msg, nil, n)
	if err != nil {
		return false, nil, err
	}
	changed, err := fanout.Call(ctx, scope[0], false, func(c *coordinator.Coordinator) (bool, error) {
		return c.SetLimits(ctx, coordinator.LimitsRequest{Namespace: namespace, Queue: queue, Limits: res.limits, Keys: res.keys, KeyWeights: res.weights,
			Partitions: n, Index: i, Actor: a})
	}, func(route.Peer) (bool, error) {
		return false, fmt.Errorf("%w: partition %d is not served here; retry", coordinator.ErrUnavailable, scope[0].ID())
	})
	return changed, nil, err
}

// parseSplit parses route.SplitHeader.
func parseSplit(v string) (i, n int, err error) {
	is, ns, ok := strings.Cut(v, "/")
	if ok {
		i, err = strconv.Atoi(is)
		if err == nil {
			n, err = strconv.Atoi(ns)
		}
	}
	if !ok || err != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, &coordinator.FieldError{Field: route.SplitHeader, Problem: fmt.Sprintf("%q is not i/n with 0 <= i < n", v)}
	}
	return i, n, nil
}

// limitsRequest is the request that sets exactly r (every limit set or
// cleared, the weights replaced): what a partition on another node is
// sent.
func limitsRequest(namespace, queue string, r resolved, a coordinator.Actor) *tenurev1.SetQueueLimitsRequest {
	l, k := r.limits, r.keys
	m := &tenurev1.SetQueueLimitsRequest{Namespace: namespace, Queue: queue, Reason: a.Reason, RequestedBy: a.By}
	m.MaxConcurrency, m.ClearMaxConcurrency, m.Rate, m.Burst, m.ClearRate = setOrClear(&l.MaxConcurrency, l.RateMilli, &l.Burst)
	m.KeyMaxConcurrency, m.ClearKeyMaxConcurrency, m.KeyRate, m.KeyBurst, m.ClearKeyRate = setOrClear(&k.MaxConcurrency, k.RateMilli, &k.Burst)
	m.KeyOrdered, m.Fair = &k.Ordered, &k.Fair
	m.ClearKeyWeights, m.KeyWeights = true, keyWeightMessages(r.weights)
	return m
}

// setOrClear is a concurrency limit and a rate limit as a request's
// fields: each set to its value where it is set (above zero), cleared
// where it is not.
func setOrClear(maxConc *uint32, rateMilli uint64, burst *uint32) (maxSet *uint32, clearMax bool, rate *float64, burstSet *uint32, clearRate bool) {
	if *maxConc > 0 {
		maxSet = maxConc
	} else {
		clearMax = true
	}
	if rateMilli > 0 {
		r := coordinator.RatePerSecond(rateMilli)
		rate, burstSet = &r, burst
	} else {
		clearRate = true
	}
	return maxSet, clearMax, rate, burstSet, clearRate
}

// limitsOf converts the limits of an API message back (zero for none).
func limitsOf(m *tenurev1.QueueLimits) state.Limits {
	return state.Limits{MaxConcurrency: m.GetMaxConcurrency(), RateMilli: uint64(math.Round(m.GetRate() * 1000)), Burst: m.GetBurst()}
}

// keyLimitsOf converts the key limits of an API message back (zero for
// none).
func keyLimitsOf(m *tenurev1.QueueLimits) state.KeyLimits {
	return state.KeyLimits{MaxConcurrency: m.GetKeyMaxConcurrency(), RateMilli: uint64(math.Round(m.GetKeyRate() * 1000)),
		Burst: m.GetKeyBurst(), Ordered: m.GetKeyOrdered(), Fair: m.GetFair()}
}

// queueLimitsMessage is the API's view of a partition's limits (nil:
// none but key weights): the queue-wide ones, as set, and the weights of
// its keys.
func queueLimitsMessage(l *state.QueueLimits, weights []state.KeyWeight) *tenurev1.QueueLimits {
	if l == nil {
		return &tenurev1.QueueLimits{KeyWeights: keyWeightMessages(weights)}
	}
	return &tenurev1.QueueLimits{
		KeyWeights:     keyWeightMessages(weights),
		MaxConcurrency: l.Queue.MaxConcurrency,
		Rate:           coordinator.RatePerSecond(l.Queue.RateMilli),
		Burst:          l.Queue.Burst,
		RequestedBy:    l.By,
		Reason:         l.Reason,
		SetAt:          ts(l.At),

		KeyMaxConcurrency: l.Keys.MaxConcurrency,
		KeyRate:           coordinator.RatePerSecond(l.Keys.RateMilli),
		KeyBurst:          l.Keys.Burst,
		KeyOrdered:        l.Keys.Ordered,
		Fair:              l.Keys.Fair,
	}
}
