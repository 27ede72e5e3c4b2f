package coordinator

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// Schedules: each tick of a schedule is decided by one record — fired
// (the task created in the same record), skipped or held — written by the
// coordinator that serves the schedule's partition, from its own clock
// (docs/design/state-machine.md, "Schedules").

// Defaults and bounds of a schedule.
const (
	// DefaultCatchUp is how late a tick may fire when none is given.
	DefaultCatchUp = time.Hour
	// MinCatchUp and MaxCatchUp bound the catch-up window.
	MinCatchUp = time.Second
	MaxCatchUp = 366 * 24 * time.Hour
	// MaxBackfillTicks caps the ticks one backfill fires.
	MaxBackfillTicks = 1000
	// MaxDecisionsPerPass caps the records one FireDue writes; the next
	// pass follows at once.
	MaxDecisionsPerPass = 1000
	// NextFires is how many upcoming fire times a ScheduleView lists.
	NextFires = 5
)

// ScheduleRequest creates or updates a schedule. Zero fields take their
// defaults, as in a submit.
type ScheduleRequest struct {
	Namespace string // default "default"
	Queue     string
	Name      string
	// Cron and TimeZone say when it fires (ParseCron).
	Cron     string
	TimeZone string
	Overlap  state.Overlap // default OverlapSkip
	CatchUp  time.Duration // default DefaultCatchUp
	// The task each fire submits.
	Payload         []byte
	ExecutionWindow time.Duration
	Retry           state.RetryPolicy
	Priority        int32
	// Kind is the kind of the tasks it submits ("" for none).
	Kind string
	Actor
}

// ScheduleView is a copy of a schedule with what its readers want beside
// it.
type ScheduleView struct {
	*state.Schedule
	// NextFires lists the next fire times (none while paused): from the
	// cursor on, or from now while due ticks wait for the last task.
	NextFires []time.Time
	// TaskStates gives the state of each task of Recent that the partition
	// still holds.
	TaskStates map[string]state.TaskState
	// WaitingFor is set while due ticks wait for the task of the last fire
	// to finish, as the overlap policy says (state.Waiting): that task;
	// WaitingSince is the first tick that waits. Nothing is decided
	// meanwhile, so without them a schedule held back looks like one whose
	// next fire keeps moving.
	WaitingFor   string
	WaitingSince time.Time
}

// ScheduleError is a refusal about a schedule: errors.Is matches its Kind
// (ErrNotFound, ErrAlreadyExists, ErrWrongState).
type ScheduleError struct {
	Kind error
	Key  state.ScheduleKey
	msg  string
}

func (e *ScheduleError) Error() string { return e.msg }

func (e *ScheduleError) Unwrap() error { return e.Kind }

// ScheduleNotFound refuses an action on a schedule that does not exist.
func ScheduleNotFound(k state.ScheduleKey) error {
	return &ScheduleError{Kind: ErrNotFound, Key: k,
		msg: fmt.Sprintf("schedule not found: no schedule %q for queue %q in namespace %q; `tenure schedule list` lists them", k.Name, k.Queue, k.Namespace)}
}

// checkSchedule fills in the defaults of req and checks it; it returns the
// definition and its parsed expression.
func (l Limits) checkSchedule(req *ScheduleRequest, now time.Time) (state.ScheduleDef, Cron, error) {
	sub := SubmitRequest{Namespace: req.Namespace, Queue: req.Queue, Payload: req.Payload,
		ExecutionWindow: req.ExecutionWindow, Retry: req.Retry, Priority: req.Priority, Kind: req.Kind}
	if err := l.validateSubmit(&sub, now); err != nil {
		return state.ScheduleDef{}, Cron{}, err
	}
	req.Namespace, req.ExecutionWindow, req.Retry = sub.Namespace, sub.ExecutionWindow, sub.Retry
	if err := l.checkID("name", req.Name, true); err != nil {
		return state.ScheduleDef{}, Cron{}, err
	}
	if err := l.checkActor(req.Actor); err != nil {
		return state.ScheduleDef{}, Cron{}, err
	}
	if req.Overlap == 0 {
		req.Overlap = state.OverlapSkip
	}
	if req.Overlap > state.OverlapBufferOne {
		return state.ScheduleDef{}, Cron{}, fieldErr("overlap", "%d is not an overlap policy (SKIP, ALLOW or BUFFER_ONE)", req.Overlap)
	}
	if req.CatchUp == 0 {
		req.CatchUp = DefaultCatchUp
	}
	if req.CatchUp < MinCatchUp || req.CatchUp > MaxCatchUp {
		return state.ScheduleDef{}, Cron{}, fieldErr("catch_up_window", "%v is outside %v..%v", req.CatchUp, MinCatchUp, MaxCatchUp)
	}
	cr, err := ParseCron(req.Cron, req.TimeZone)
	if err != nil {
		return state.ScheduleDef{}, Cron{}, err
	}
	if cr.Next(state.TimeOf(now)) == 0 {
		return state.ScheduleDef{}, Cron{}, fieldErr("cron", "%q never fires in the next five years", req.Cron)
	}
	def := state.ScheduleDef{Cron: req.Cron, TimeZone: req.TimeZone, Overlap: req.Overlap, CatchUp: req.CatchUp,
		Payload: req.Payload, Window: req.ExecutionWindow, Retry: req.Retry, Priority: req.Priority, Kind: req.Kind}
	return def, cr, nil
}

// CheckSchedule fills in the defaults of req and checks it as
// CreateSchedule would, against these limits (zero fields: the defaults).
func (l Limits) CheckSchedule(req *ScheduleRequest, now time.Time) error {
	_, _, err := l.withDefaults().checkSchedule(req, now)
	return err
}

func (req *ScheduleRequest) key() state.ScheduleKey {
	return state.ScheduleKey{Namespace: req.Namespace, Queue: req.Queue, Name: req.Name}
}

// CreateSchedule creates a schedule (one ScheduleCreated record); its first
// tick is the first after now. Creating it again with the same definition
// returns it (created false); with another definition it is refused with
// ErrAlreadyExists.
func (c *Coordinator) CreateSchedule(ctx context.Context, req ScheduleRequest) (view ScheduleView, created bool, err error) {
	nowT := c.cfg.Clock.Now()
	def, cr, err := c.cfg.Limits.checkSchedule(&req, nowT)
	if err != nil {
		return ScheduleView{}, false, err
	}
	if err := c.lock(); err != nil {
		return ScheduleView{}, false, err
	}
	k, now := req.key(), state.TimeOf(nowT)
	if sc := c.st.Schedule(k); sc != nil {
		view := c.viewLocked(sc)
		if err := c.writeAndWait(ctx); err != nil {
			return ScheduleView{}, false, err
		}
		if !reflect.DeepEqual(sc.Def, def) {
			return ScheduleView{}, false, &ScheduleError{Kind: ErrAlreadyExists, Key: k,
				msg: fmt.Sprintf("schedule %q already exists for queue %q in namespace %q with another definition; update it, or delete it first", k.Name, k.Queue, k.Namespace)}
		}
		return view, false, nil
	}
	if err := c.admitLocked(state.NewScheduleHeldBytes(k, def, req.By)); err != nil {
		c.mu.Unlock()
		return ScheduleView{}, false, err
	}
	r := &state.ScheduleCreated{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Def: def, Next: cr.Next(now), By: req.By, At: now}
	return c.scheduleWrite(ctx, k, r)
}

// scheduleWrite writes r, and answers with the view of schedule k after
// it once it is durable; c.mu must be held and is released.
func (c *Coordinator) scheduleWrite(ctx context.Context, k state.ScheduleKey, recs ...state.Record) (ScheduleView, bool, error) {
	attribute(ctx, recs)
	last, err := c.write(recs...)
	var view ScheduleView
	if err == nil {
		if sc := c.st.Schedule(k); sc != nil {
			view = c.viewLocked(sc)
		}
	}
	c.mu.Unlock()
	if err != nil {
		return ScheduleView{}, false, err
	}
	if err := c.wait(ctx, last); err != nil {
		return ScheduleView{}, false, err
	}
	return view, true, nil
}

// UpdateSchedule replaces a schedule's definition (one ScheduleUpdated
// record). Ticks of the old definition that are due are decided first, by
// its rules; the new definition's ticks start after now.
func (c *Coordinator) UpdateSchedule(ctx context.Context, req ScheduleRequest) (ScheduleView, error) {
	nowT := c.cfg.Clock.Now()
	def, cr, err := c.cfg.Limits.checkSchedule(&req, nowT)
	if err != nil {
		return ScheduleView{}, err
	}
	if err := c.lock(); err != nil {
		return ScheduleView{}, err
	}
	k, now := req.key(), state.TimeOf(nowT)
	sc := c.st.Schedule(k)
	if sc == nil {
		return ScheduleView{}, c.refuseLocked(ctx, ScheduleNotFound(k))
	}
	if sc.HeldTick != 0 && def.Overlap != state.OverlapBufferOne {
		return ScheduleView{}, c.refuseLocked(ctx, fieldErr("overlap", "a tick (%s) is held until the previous task finishes; keep BUFFER_ONE until it has fired", sc.HeldTick))
	}
	if grow := state.NewScheduleHeldBytes(k, def, sc.CreatedBy) - state.NewScheduleHeldBytes(k, sc.Def, sc.CreatedBy); grow > 0 {
		if err := c.admitLocked(grow); err != nil {
			c.mu.Unlock()
			return ScheduleView{}, err
		}
	}
	if _, err := c.decideLocked(sc, now, MaxDecisionsPerPass); err != nil {
		c.mu.Unlock()
		return ScheduleView{}, err
	}
	r := &state.ScheduleUpdated{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Def: def,
		Next: cr.Next(max(now, sc.HeldTick)), By: req.By, Reason: req.Reason, At: now}
	view, _, err := c.scheduleWrite(ctx, k, r)
	return view, err
}

// refuseLocked answers err once everything the caller saw is durable;
// c.mu must be held and is released.
func (c *Coordinator) refuseLocked(ctx context.Context, err error) error {
	if werr := c.writeAndWait(ctx); werr != nil {
		return werr
	}
	return err
}

// PauseSchedule pauses a schedule (one SchedulePaused record). It reports
// whether it was running (false: it was paused already; nothing written).
func (c *Coordinator) PauseSchedule(ctx context.Context, k state.ScheduleKey, a Actor) (ScheduleView, bool, error) {
	return c.scheduleAction(ctx, k, a, func(sc *state.Schedule, now state.Time, _ Cron) state.Record {
		if sc.Paused != nil {
			return nil
		}
		return &state.SchedulePaused{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, By: a.By, Reason: a.Reason, At: now}
	})
}

// ResumeSchedule resumes a paused schedule (one ScheduleResumed record):
// the ticks that passed while it was paused are skipped, and the next is
// the first after now. It reports whether it was paused.
func (c *Coordinator) ResumeSchedule(ctx context.Context, k state.ScheduleKey, a Actor) (ScheduleView, bool, error) {
	return c.scheduleAction(ctx, k, a, func(sc *state.Schedule, now state.Time, cr Cron) state.Record {
		if sc.Paused == nil {
			return nil
		}
		next := sc.Next
		if next != 0 && next <= now {
			next = cr.Next(now)
		}
		if next != 0 && sc.HeldTick >= next {
			next = cr.Next(sc.HeldTick)
		}
		return &state.ScheduleResumed{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Next: next, By: a.By, Reason: a.Reason, At: now}
	})
}

// DeleteSchedule deletes a schedule (one ScheduleDeleted record); the
// tasks it submitted stay.
func (c *Coordinator) DeleteSchedule(ctx context.Context, k state.ScheduleKey, a Actor) error {
	_, _, err := c.scheduleAction(ctx, k, a, func(_ *state.Schedule, now state.Time, _ Cron) state.Record {
		return &state.ScheduleDeleted{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, By: a.By, Reason: a.Reason, At: now}
	})
	return err
}

// scheduleAction writes the record rec chooses for an existing schedule
// (nil: none, the schedule is as asked already).
func (c *Coordinator) scheduleAction(ctx context.Context, k state.ScheduleKey, a Actor, rec func(*state.Schedule, state.Time, Cron) state.Record) (ScheduleView, bool, error) {
	if err := c.checkScheduleKey(&k); err != nil {
		return ScheduleView{}, false, err
	}
	if err := c.cfg.Limits.checkActor(a); err != nil {
		return ScheduleView{}, false, err
	}
	if err := c.lock(); err != nil {
		return ScheduleView{}, false, err
	}
	now := c.now()
	sc := c.st.Schedule(k)
	if sc == nil {
		return ScheduleView{}, false, c.refuseLocked(ctx, ScheduleNotFound(k))
	}
	cr, ok := c.cronOf(sc)
	if !ok {
		return ScheduleView{}, false, c.refuseLocked(ctx, &ScheduleError{Kind: ErrWrongState, Key: k,
			msg: fmt.Sprintf("schedule %s: its expression %q in zone %q does not parse on this server; update it", k, sc.Def.Cron, sc.Def.TimeZone)})
	}
	r := rec(sc, now, cr)
	if r == nil {
		view := c.viewLocked(sc)
		return view, false, c.refuseLocked(ctx, nil)
	}
	return c.scheduleWrite(ctx, k, r)
}

func (c *Coordinator) checkScheduleKey(k *state.ScheduleKey) error {
	if k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	if err := c.cfg.Limits.checkNames(k.Namespace, k.Queue, ""); err != nil {
		return err
	}
	return c.checkID("name", k.Name, true)
}

// Schedules returns the schedules of namespace and queue ("" matches
// every one), or the one named (name set, with its namespace and queue;
// ScheduleNotFound if it does not exist).
func (c *Coordinator) Schedules(ctx context.Context, namespace, queue, name string) ([]ScheduleView, error) {
	for _, f := range []struct{ field, v string }{{"namespace", namespace}, {"queue", queue}, {"name", name}} {
		if err := c.checkID(f.field, f.v, false); err != nil {
			return nil, err
		}
	}
	var out []ScheduleView
	err := c.read(ctx, func() error {
		if name != "" {
			k := state.ScheduleKey{Namespace: namespace, Queue: queue, Name: name}
			sc := c.st.Schedule(k)
			if sc == nil {
				return ScheduleNotFound(k)
			}
			out = append(out, c.viewLocked(sc))
			return nil
		}
		for _, sc := range c.st.Schedules(namespace, queue) {
			out = append(out, c.viewLocked(sc))
		}
		return nil
	})
	return out, err
}

// viewLocked returns a copy of sc with its next fires and the states of its
// recent tasks; c.mu must be held.
func (c *Coordinator) viewLocked(sc *state.Schedule) ScheduleView {
	v := ScheduleView{Schedule: sc.Clone(), TaskStates: map[string]state.TaskState{}}
	for _, f := range sc.Recent {
		if t := c.st.Task(f.TaskID); f.TaskID != "" && t != nil {
			v.TaskStates[f.TaskID] = t.State
		}
	}
	if cr, ok := c.cronOf(sc); ok && sc.Paused == nil && sc.Next != 0 {
		// A schedule waiting for its last task has due ticks undecided:
		// show the ticks to come, and what they wait for.
		if now := c.now(); sc.Next <= now {
			v.NextFires = cr.Ticks(now, NextFires)
			if c.st.Waiting(sc) {
				v.WaitingFor, v.WaitingSince = sc.LastTask, sc.Next.Std()
			}
		} else {
			v.NextFires = append([]time.Time{sc.Next.Std()}, cr.Ticks(sc.Next, NextFires-1)...)
		}
	}
	return v
}

// BackfillResult is what a backfill did.
type BackfillResult struct {
	// Fired lists the tasks submitted, one per tick that had none.
	Fired []state.Fire
	// AlreadyFired counts the ticks of the range that had fired before.
	AlreadyFired int
}

// Backfill fires every tick of schedule k from from to to (both included)
// that never fired: one ScheduleFired (outcome BACKFILLED) each, whatever
// the overlap policy, with the tick's own request id, so that no tick
// fires twice. Only ticks before the schedule's cursor (the next tick not
// yet decided) can be backfilled, at most MaxBackfillTicks per call.
func (c *Coordinator) Backfill(ctx context.Context, k state.ScheduleKey, from, to time.Time, a Actor) (BackfillResult, error) {
	if err := c.checkScheduleKey(&k); err != nil {
		return BackfillResult{}, err
	}
	if err := c.cfg.Limits.checkActor(a); err != nil {
		return BackfillResult{}, err
	}
	nowT := c.cfg.Clock.Now()
	switch {
	case from.IsZero():
		return BackfillResult{}, fieldErr("start", "required")
	case to.IsZero():
		return BackfillResult{}, fieldErr("end", "required")
	case to.Before(from):
		return BackfillResult{}, fieldErr("end", "%s is before start %s", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	case to.After(nowT):
		return BackfillResult{}, fieldErr("end", "%s is in the future; a backfill fires past ticks only", to.UTC().Format(time.RFC3339))
	}
	if err := c.lock(); err != nil {
		return BackfillResult{}, err
	}
	now := state.TimeOf(nowT)
	sc := c.st.Schedule(k)
	if sc == nil {
		return BackfillResult{}, c.refuseLocked(ctx, ScheduleNotFound(k))
	}
	cr, ok := c.cronOf(sc)
	if !ok {
		return BackfillResult{}, c.refuseLocked(ctx, fieldErr("cron", "the schedule's expression %q in zone %q does not parse on this server; update it", sc.Def.Cron, sc.Def.TimeZone))
	}
	end := state.TimeOf(to)
	if sc.Next != 0 && end >= sc.Next {
		return BackfillResult{}, c.refuseLocked(ctx, fieldErr("end", "%s is not before the schedule's next undecided tick %s; backfill only ticks before it",
			to.UTC().Format(time.RFC3339), sc.Next))
	}
	var (
		res  BackfillResult
		recs []state.Record
		ids  = map[string]struct{}{} // of recs
	)
	for t := cr.Next(state.TimeOf(from) - 1); t != 0 && t <= end; t = cr.Next(t) {
		if t == sc.HeldTick || c.st.ByRequest(k.Namespace, state.FireRequestID(k, t)) != nil {
			res.AlreadyFired++
			continue
		}
		if len(recs) == MaxBackfillTicks {
			return BackfillResult{}, c.refuseLocked(ctx, fieldErr("end", "the range holds more than %d ticks that never fired; backfill it in parts", MaxBackfillTicks))
		}
		r := &state.ScheduleFired{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: t,
			TaskID: c.newTaskID(nowT, ids), Next: sc.Next, Outcome: state.Backfilled, By: a.By, At: now}
		recs = append(recs, r)
		res.Fired = append(res.Fired, state.Fire{Tick: t, TaskID: r.TaskID, Outcome: state.Backfilled, At: now})
	}
	if c.cfg.Memory != nil {
		var need int64
		for _, r := range recs {
			f := r.(*state.ScheduleFired)
			need += state.NewTaskHeldBytes(len(f.TaskID), len(state.FireRequestID(k, f.Tick)), len(sc.Def.Payload))
		}
		if err := c.admitLocked(need); err != nil {
			c.mu.Unlock()
			return BackfillResult{}, err
		}
	}
	return res, c.writeAndWait(ctx, recs...)
}

// FireDue decides every tick that is due now (at most MaxDecisionsPerPass
// records) and returns how many records it wrote.
func (c *Coordinator) FireDue(ctx context.Context) (int, error) {
	if err := c.lock(); err != nil {
		return 0, err
	}
	now, n, last := c.now(), 0, c.st.LastLSN()
	for _, k := range c.st.ScheduleKeys() {
		if n >= MaxDecisionsPerPass {
			break
		}
		m, err := c.decideLocked(c.st.Schedule(k), now, MaxDecisionsPerPass-n)
		n += m
		if err != nil {
			c.mu.Unlock()
			return n, err
		}
	}
	if n > 0 {
		last = c.st.LastLSN()
	}
	c.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	return n, c.wait(ctx, last)
}

// decideLocked writes the decisions of sc's ticks due at now, up to budget
// records, one at a time so that each sees the last: the held tick once
// the previous task finished, then the ticks that came due while it ran
// (skipped for overlap, as a range), then from the cursor on — skipped as
// a range if older than the catch-up window, else fired, held or skipped
// as the overlap policy says. While the previous task runs and the policy
// makes ticks wait for it (state.Waiting), nothing is written: the ticks
// are decided when it finishes, so that a long task costs one record, not
// one per tick. c.mu must be held.
func (c *Coordinator) decideLocked(sc *state.Schedule, now state.Time, budget int) (int, error) {
	cr, ok := c.cronOf(sc)
	if !ok {
		return 0, nil
	}
	k, n := sc.Key, 0
	write := func(r state.Record) error {
		n++
		_, err := c.write(r)
		return err
	}
	fire := func(tick, next state.Time) error {
		return write(&state.ScheduleFired{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: tick,
			TaskID: c.newTaskID(now.Std(), nil), Next: next, Outcome: state.Fired, At: now})
	}
	if sc.Paused != nil || c.st.Waiting(sc) {
		return 0, nil
	}
	// The ticks due before the last task finished came due while it ran
	// (or while a tick was held for it): they are skipped for overlap, as
	// a range, whether they came due in this pass or waited for the task.
	overlapped := cr.Next(c.st.FinishedAt(sc.LastTask) - 1)
	if sc.HeldTick != 0 && c.st.Finished(sc.LastTask) {
		if err := fire(sc.HeldTick, sc.Next); err != nil {
			return n, err
		}
	}
	if sc.Def.Overlap != state.OverlapAllow && sc.Next != 0 && sc.Next <= now && overlapped > sc.Next {
		if err := write(&state.ScheduleSkipped{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, From: sc.Next,
			Next: min(overlapped, cr.Next(now)), Reason: state.SkipOverlap, At: now}); err != nil {
			return n, err
		}
	}
	for n < budget && sc.Paused == nil && sc.Next != 0 && sc.Next <= now {
		tick := sc.Next
		var err error
		switch {
		case now-tick > state.Time(sc.Def.CatchUp):
			err = write(&state.ScheduleSkipped{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, From: tick,
				Next: cr.Next(now - state.Time(sc.Def.CatchUp) - 1), Reason: state.SkipCatchUp, At: now})
		case sc.Def.Overlap == state.OverlapAllow || c.st.Finished(sc.LastTask):
			err = fire(tick, cr.Next(tick))
		case sc.Def.Overlap == state.OverlapBufferOne && sc.HeldTick == 0:
			err = write(&state.ScheduleHeld{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: tick, Next: cr.Next(tick), At: now})
		default:
			// The previous task stays unfinished for the rest of this
			// pass: every tick due now is skipped at once.
			err = write(&state.ScheduleSkipped{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, From: tick,
				Next: cr.Next(now), Reason: state.SkipOverlap, At: now})
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
