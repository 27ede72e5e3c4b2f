package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// Schedules (docs/design/state-machine.md, "Schedules"). A schedule lives in one
// partition of its queue, the one Router.Place gives for the schedule's
// placement key (schedulePlacement): every call about one schedule goes
// there, here or forwarded to the node that serves it. ListSchedules asks
// every partition of its scope and merges the answers.

type scheduleService struct{ s *Server }

// schedulePlacement is the key Router.Place hashes to find a schedule's
// partition: derived from the name alone, so that it is the same partition
// every time, and always a valid request id (a name may be as long as a
// request id may be), which no task's placement depends on.
func schedulePlacement(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "schedule." + hex.EncodeToString(sum[:16])
}

// checkScheduleKey fills in the default namespace of k and checks its
// names as the coordinator will, before the call is routed.
func (s *Server) checkScheduleKey(k *state.ScheduleKey) error {
	k.Namespace = cmp.Or(k.Namespace, coordinator.DefaultNamespace)
	if k.Name == "" {
		if err := s.opts.Limits.CheckNames(k.Namespace, k.Queue, ""); err != nil {
			return err
		}
		return &coordinator.FieldError{Field: "name", Problem: "required"}
	}
	// The name is an identifier with the rules of a request id.
	err := s.opts.Limits.CheckNames(k.Namespace, k.Queue, k.Name)
	var fe *coordinator.FieldError
	if errors.As(err, &fe) && fe.Field == "request_id" {
		return &coordinator.FieldError{Field: "name", Problem: fe.Problem}
	}
	var le *coordinator.LimitError
	if errors.As(err, &le) && le.Field == "request_id" {
		return &coordinator.LimitError{Field: "name", Size: le.Size, Limit: le.Limit}
	}
	return err
}

// schedulePartition returns the partition of schedule k (checked). Unless
// create is set, a queue without partitions has no schedule: NOT_FOUND,
// and no queue is created for a call that only names one.
func (s *Server) schedulePartition(ctx context.Context, k *state.ScheduleKey, create bool) (route.Partition, error) {
	if err := s.checkScheduleKey(k); err != nil {
		return nil, err
	}
	if !create {
		scope, err := s.r.Scope(ctx, k.Namespace, k.Queue)
		if err != nil {
			return nil, err
		}
		if len(scope) == 0 {
			return nil, coordinator.ScheduleNotFound(*k)
		}
	}
	return s.r.Place(ctx, k.Namespace, k.Queue, schedulePlacement(k.Name))
}

// scheduleFields are the fields that CreateScheduleRequest and
// UpdateScheduleRequest share: a schedule's whole definition.
type scheduleFields interface {
	GetNamespace() string
	GetQueue() string
	GetName() string
	GetCron() string
	GetTimeZone() string
	GetOverlap() tenurev1.OverlapPolicy
	GetCatchUpWindow() *durationpb.Duration
	GetPayload() []byte
	GetExecutionWindow() *durationpb.Duration
	GetRetryPolicy() *tenurev1.RetryPolicy
	GetPriority() int32
	GetKind() string
	GetRequestedBy() string
}

// scheduleRequest converts a schedule's definition and checks it as the
// coordinator will (Limits.CheckSchedule), so that a bad one is refused
// before anything is routed or created. The request keeps its unset
// fields: the coordinator fills in its own defaults.
func (s *Server) scheduleRequest(m scheduleFields, reason string) (coordinator.ScheduleRequest, error) {
	sub, err := submitRequest(&tenurev1.SubmitRequest{Namespace: m.GetNamespace(), Queue: m.GetQueue(), Payload: m.GetPayload(),
		ExecutionWindow: m.GetExecutionWindow(), RetryPolicy: m.GetRetryPolicy(), Priority: m.GetPriority(), Kind: m.GetKind()})
	if err != nil {
		return coordinator.ScheduleRequest{}, err
	}
	overlap, ok := overlaps[m.GetOverlap()]
	if !ok {
		return coordinator.ScheduleRequest{}, &coordinator.FieldError{Field: "overlap", Problem: "unknown overlap policy (SKIP, ALLOW or BUFFER_ONE)"}
	}
	catchUp, err := duration("catch_up_window", m.GetCatchUpWindow())
	if err != nil {
		return coordinator.ScheduleRequest{}, err
	}
	req := coordinator.ScheduleRequest{
		Namespace: cmp.Or(m.GetNamespace(), coordinator.DefaultNamespace), Queue: m.GetQueue(), Name: m.GetName(),
		Cron: m.GetCron(), TimeZone: m.GetTimeZone(), Overlap: overlap, CatchUp: catchUp,
		Payload: sub.Payload, ExecutionWindow: sub.ExecutionWindow, Retry: sub.Retry, Priority: sub.Priority, Kind: sub.Kind,
		Actor: coordinator.Actor{By: m.GetRequestedBy(), Reason: reason},
	}
	k := state.ScheduleKey{Namespace: req.Namespace, Queue: req.Queue, Name: req.Name}
	if err := s.checkScheduleKey(&k); err != nil {
		return coordinator.ScheduleRequest{}, err
	}
	checked := req
	if err := s.opts.Limits.CheckSchedule(&checked, s.opts.Clock.Now()); err != nil {
		return coordinator.ScheduleRequest{}, err
	}
	return req, nil
}

func (h scheduleService) CreateSchedule(ctx context.Context, req *connect.Request[tenurev1.CreateScheduleRequest]) (*connect.Response[tenurev1.CreateScheduleResponse], error) {
	s := h.s
	r, err := s.scheduleRequest(req.Msg, "")
	if err != nil {
		return nil, s.apiError(err)
	}
	p, err := s.schedulePartition(ctx, &state.ScheduleKey{Namespace: r.Namespace, Queue: r.Queue, Name: r.Name}, true)
	if err != nil {
		return nil, s.apiError(err)
	}
	return one(s, ctx, p, false, req, route.Peer.CreateSchedule, func(c *coordinator.Coordinator) (*tenurev1.CreateScheduleResponse, error) {
		v, created, err := c.CreateSchedule(ctx, r)
		if err != nil {
			return nil, err
		}
		return &tenurev1.CreateScheduleResponse{Schedule: scheduleMessage(v), Created: created}, nil
	})
}

func (h scheduleService) UpdateSchedule(ctx context.Context, req *connect.Request[tenurev1.UpdateScheduleRequest]) (*connect.Response[tenurev1.UpdateScheduleResponse], error) {
	s := h.s
	r, err := s.scheduleRequest(req.Msg, req.Msg.GetReason())
	if err != nil {
		return nil, s.apiError(err)
	}
	p, err := s.schedulePartition(ctx, &state.ScheduleKey{Namespace: r.Namespace, Queue: r.Queue, Name: r.Name}, false)
	if err != nil {
		return nil, s.apiError(err)
	}
	return one(s, ctx, p, false, req, route.Peer.UpdateSchedule, func(c *coordinator.Coordinator) (*tenurev1.UpdateScheduleResponse, error) {
		v, err := c.UpdateSchedule(ctx, r)
		if err != nil {
			return nil, err
		}
		return &tenurev1.UpdateScheduleResponse{Schedule: scheduleMessage(v)}, nil
	})
}

// scheduleNames is what every call about one schedule names.
type scheduleNames interface {
	GetNamespace() string
	GetQueue() string
	GetName() string
}

// bySchedule is one for the partition of the schedule m names, with the
// schedule's key (default namespace filled in) given to local.
func bySchedule[Req interface {
	scheduleNames
	*M
}, M, Resp any](s *Server, ctx context.Context, req *connect.Request[M], read bool,
	forward func(route.Peer, context.Context, *connect.Request[M]) (*connect.Response[Resp], error),
	local func(*coordinator.Coordinator, state.ScheduleKey) (*Resp, error)) (*connect.Response[Resp], error) {
	m := Req(req.Msg)
	k := state.ScheduleKey{Namespace: m.GetNamespace(), Queue: m.GetQueue(), Name: m.GetName()}
	p, err := s.schedulePartition(ctx, &k, false)
	if err != nil {
		return nil, s.apiError(err)
	}
	return one(s, ctx, p, read, req, forward, func(c *coordinator.Coordinator) (*Resp, error) { return local(c, k) })
}

func (h scheduleService) GetSchedule(ctx context.Context, req *connect.Request[tenurev1.GetScheduleRequest]) (*connect.Response[tenurev1.GetScheduleResponse], error) {
	return bySchedule(h.s, ctx, req, true, route.Peer.GetSchedule, func(c *coordinator.Coordinator, k state.ScheduleKey) (*tenurev1.GetScheduleResponse, error) {
		vs, err := c.Schedules(ctx, k.Namespace, k.Queue, k.Name)
		if err != nil {
			return nil, err
		}
		if len(vs) != 1 {
			return nil, coordinator.ScheduleNotFound(k)
		}
		return &tenurev1.GetScheduleResponse{Schedule: scheduleMessage(vs[0])}, nil
	})
}

func (h scheduleService) PauseSchedule(ctx context.Context, req *connect.Request[tenurev1.PauseScheduleRequest]) (*connect.Response[tenurev1.PauseScheduleResponse], error) {
	return scheduleControl(h.s, ctx, req, route.Peer.PauseSchedule, (*coordinator.Coordinator).PauseSchedule,
		func(changed bool, sc *tenurev1.Schedule) *tenurev1.PauseScheduleResponse {
			return &tenurev1.PauseScheduleResponse{Changed: changed, Schedule: sc}
		})
}

func (h scheduleService) ResumeSchedule(ctx context.Context, req *connect.Request[tenurev1.ResumeScheduleRequest]) (*connect.Response[tenurev1.ResumeScheduleResponse], error) {
	return scheduleControl(h.s, ctx, req, route.Peer.ResumeSchedule, (*coordinator.Coordinator).ResumeSchedule,
		func(changed bool, sc *tenurev1.Schedule) *tenurev1.ResumeScheduleResponse {
			return &tenurev1.ResumeScheduleResponse{Changed: changed, Schedule: sc}
		})
}

// controlRequest is a pause or resume: a schedule, who asks and why.
type controlRequest interface {
	scheduleNames
	GetReason() string
	GetRequestedBy() string
}

// scheduleControl runs op (a pause or a resume) on the schedule req names
// and answers what it changed and the schedule afterwards.
func scheduleControl[Req interface {
	controlRequest
	*M
}, M, Resp any](s *Server, ctx context.Context, req *connect.Request[M],
	forward func(route.Peer, context.Context, *connect.Request[M]) (*connect.Response[Resp], error),
	op func(*coordinator.Coordinator, context.Context, state.ScheduleKey, coordinator.Actor) (coordinator.ScheduleView, bool, error),
	answer func(changed bool, sc *tenurev1.Schedule) *Resp) (*connect.Response[Resp], error) {
	m := Req(req.Msg)
	a := coordinator.Actor{By: m.GetRequestedBy(), Reason: m.GetReason()}
	return bySchedule[Req](s, ctx, req, false, forward, func(c *coordinator.Coordinator, k state.ScheduleKey) (*Resp, error) {
		v, changed, err := op(c, ctx, k, a)
		if err != nil {
			return nil, err
		}
		return answer(changed, scheduleMessage(v)), nil
	})
}

func (h scheduleService) DeleteSchedule(ctx context.Context, req *connect.Request[tenurev1.DeleteScheduleRequest]) (*connect.Response[tenurev1.DeleteScheduleResponse], error) {
	a := coordinator.Actor{By: req.Msg.GetRequestedBy(), Reason: req.Msg.GetReason()}
	return bySchedule(h.s, ctx, req, false, route.Peer.DeleteSchedule, func(c *coordinator.Coordinator, k state.ScheduleKey) (*tenurev1.DeleteScheduleResponse, error) {
		if err := c.DeleteSchedule(ctx, k, a); err != nil {
			return nil, err
		}
		return &tenurev1.DeleteScheduleResponse{}, nil
	})
}

func (h scheduleService) BackfillSchedule(ctx context.Context, req *connect.Request[tenurev1.BackfillScheduleRequest]) (*connect.Response[tenurev1.BackfillScheduleResponse], error) {
	s, m := h.s, req.Msg
	from, err := timestamp("start", m.GetStart())
	if err != nil {
		return nil, s.apiError(err)
	}
	to, err := timestamp("end", m.GetEnd())
	if err != nil {
		return nil, s.apiError(err)
	}
	a := coordinator.Actor{By: m.GetRequestedBy()}
	return bySchedule(s, ctx, req, false, route.Peer.BackfillSchedule, func(c *coordinator.Coordinator, k state.ScheduleKey) (*tenurev1.BackfillScheduleResponse, error) {
		res, err := c.Backfill(ctx, k, from, to, a)
		if err != nil {
			return nil, err
		}
		out := &tenurev1.BackfillScheduleResponse{AlreadyFired: uint32(res.AlreadyFired)}
		for _, f := range res.Fired {
			fm := fireMessage(f, nil)
			fm.TaskState = tenurev1.TaskState_TASK_STATE_WAITING
			out.Fired = append(out.Fired, fm)
		}
		return out, nil
	})
}

func (h scheduleService) ListSchedules(ctx context.Context, req *connect.Request[tenurev1.ListSchedulesRequest]) (*connect.Response[tenurev1.ListSchedulesResponse], error) {
	s := h.s
	ns, q := req.Msg.GetNamespace(), req.Msg.GetQueue()
	scope, err := s.scope(ctx, req.Header(), ns, q)
	if err != nil {
		return nil, s.apiError(err)
	}
	all, err := concat(fanout.Each(ctx, fanout.Parallel, scope, true, func(_ int, c *coordinator.Coordinator) ([]*tenurev1.Schedule, error) {
		vs, err := c.Schedules(ctx, ns, q, "")
		if err != nil {
			return nil, err
		}
		out := make([]*tenurev1.Schedule, len(vs))
		for i, v := range vs {
			out[i] = scheduleMessage(v)
		}
		return out, nil
	}, func(i int, peer route.Peer) ([]*tenurev1.Schedule, error) {
		resp, err := peer.ListSchedules(ctx, fanout.Request(req.Msg, scope[i]))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetSchedules(), nil
	}))
	if err != nil {
		return nil, s.apiError(err)
	}
	slices.SortFunc(all, func(a, b *tenurev1.Schedule) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetQueue(), b.GetQueue()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return connect.NewResponse(&tenurev1.ListSchedulesResponse{Schedules: all}), nil
}

var overlaps = map[tenurev1.OverlapPolicy]state.Overlap{
	tenurev1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED: 0,
	tenurev1.OverlapPolicy_OVERLAP_POLICY_SKIP:        state.OverlapSkip,
	tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW:       state.OverlapAllow,
	tenurev1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:  state.OverlapBufferOne,
}

// overlapMessage converts an overlap policy to the API's.
func overlapMessage(o state.Overlap) tenurev1.OverlapPolicy {
	for k, v := range overlaps {
		if v == o && v != 0 {
			return k
		}
	}
	return tenurev1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED
}

var outcomes = map[state.Outcome]tenurev1.FireOutcome{
	state.Fired:      tenurev1.FireOutcome_FIRE_OUTCOME_FIRED,
	state.Skipped:    tenurev1.FireOutcome_FIRE_OUTCOME_SKIPPED,
	state.Held:       tenurev1.FireOutcome_FIRE_OUTCOME_HELD,
	state.Backfilled: tenurev1.FireOutcome_FIRE_OUTCOME_BACKFILLED,
}

// scheduleMessage converts a schedule as the coordinator shows it.
func scheduleMessage(v coordinator.ScheduleView) *tenurev1.Schedule {
	sc, d := v.Schedule, &v.Def
	m := &tenurev1.Schedule{
		Namespace:       sc.Key.Namespace,
		Queue:           sc.Key.Queue,
		Name:            sc.Key.Name,
		Cron:            d.Cron,
		TimeZone:        d.TimeZone,
		Overlap:         overlapMessage(d.Overlap),
		CatchUpWindow:   durationpb.New(d.CatchUp),
		Payload:         d.Payload,
		ExecutionWindow: durationpb.New(d.Window),
		RetryPolicy:     retryPolicyMessage(d.Retry),
		Priority:        d.Priority,
		Kind:            d.Kind,
		CreatedAt:       ts(sc.CreatedAt),
		CreatedBy:       sc.CreatedBy,
		UpdatedAt:       ts(sc.UpdatedAt),
		HeldTick:        ts(sc.HeldTick),
	}
	if v.WaitingFor != "" {
		m.WaitingForTask, m.WaitingSince = v.WaitingFor, timestamppb.New(v.WaitingSince)
	}
	if p := sc.Paused; p != nil {
		m.Paused = true
		m.Pause = &tenurev1.QueuePause{RequestedBy: p.By, Reason: p.Reason, PausedAt: ts(p.At)}
	}
	for _, t := range v.NextFires {
		m.NextFires = append(m.NextFires, timestamppb.New(t))
	}
	for _, f := range sc.Recent {
		m.Recent = append(m.Recent, fireMessage(f, v.TaskStates))
	}
	return m
}

// fireMessage converts one decision; states holds the states of the tasks
// the partition still has.
func fireMessage(f state.Fire, states map[string]state.TaskState) *tenurev1.ScheduleFire {
	m := &tenurev1.ScheduleFire{Tick: ts(f.Tick), Until: ts(f.Until), Outcome: outcomes[f.Outcome], Reason: f.Reason, TaskId: f.TaskID, At: ts(f.At)}
	if st, ok := states[f.TaskID]; ok && f.TaskID != "" {
		m.TaskState = taskStates[st]
	}
	return m
}
