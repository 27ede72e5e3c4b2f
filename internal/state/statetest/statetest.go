// Package statetest generates random but valid record sequences for tests of
// the state machine and of everything that stores or rebuilds a State
// (snapshots, replay, offline tools).
//
// A Gen looks at the State the caller has applied its records to and picks
// the next record among those whose preconditions hold, so every record it
// returns applies. Time only moves forward. The same seed and the same
// states give the same records.
package statetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// Gen generates records. It is not safe for concurrent use.
type Gen struct {
	rng   *rand.Rand
	now   state.Time
	tasks int
	ids   int
	// Purge controls whether TasksPurged, TasksPurgedRange and TasksDeleted
	// records are generated.
	Purge bool
}

// Start is the instant the first record is stamped with.
var Start = state.TimeOf(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// New returns a generator seeded with seed.
func New(seed uint64) *Gen {
	return &Gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: Start, Purge: true}
}

// Now is the time of the last record generated.
func (g *Gen) Now() state.Time { return g.now }

// Run applies n generated records to s and returns them, failing through
// fatal on the first record that does not apply.
func (g *Gen) Run(s *state.State, n int, fatal func(format string, args ...any)) []state.Record {
	out := make([]state.Record, 0, n)
	for range n {
		r := g.Next(s)
		if err := s.Apply(s.LastLSN()+1, r); err != nil {
			fatal("generated record %T does not apply: %v", r, err)
			return out
		}
		out = append(out, r)
	}
	return out
}

const window = 10 * time.Second

// The namespaces and queues of generated tasks.
var (
	namespaces = []string{"default", "billing"}
	queues     = []string{"q1", "q2", "q3"}
	kinds      = []string{"send_email", "billing.charge"}
	keys       = []string{"acme", "beta", "gamma"}
)

// Next returns a record that applies to s.
func (g *Gen) Next(s *state.State) state.Record {
	g.now = g.now.Add(time.Duration(g.rng.IntN(3000)) * time.Millisecond)
	var all []*state.Task
	s.Scan(0, func(t *state.Task) bool { all = append(all, t); return true })
	pick := func(ok func(*state.Task) bool) *state.Task {
		var c []*state.Task
		for _, t := range all {
			if ok(t) {
				c = append(c, t)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[g.rng.IntN(len(c))]
	}
	leased := func(t *state.Task) bool { return t.CurrentLease() != nil }
	live := func(t *state.Task) bool { return leased(t) && g.now < t.CurrentLease().LeaseExpiry }
	for {
		if len(all) < 3 {
			return g.created(s)
		}
		switch g.rng.IntN(29) {
		case 0, 1, 2:
			return g.created(s)
		case 25, 26:
			return g.submitted(s, all)
		case 27:
			if r := g.resolved(s); r != nil && g.rng.IntN(2) == 0 {
				return r
			}
			if r := g.workflowAction(s); r != nil {
				return r
			}
		case 3, 4, 5:
			if t := pick(func(t *state.Task) bool {
				d, ok := s.Deadline(t.ID)
				k := state.QueueKey{Namespace: t.Namespace, Queue: t.Queue}
				return t.Schedulable() && (!ok || g.now < d) && (t.State != state.Waiting ||
					t.NotBefore <= g.now && s.Paused(k) == nil) && s.Admits(k, g.now) && s.AdmitsKey(t, g.now)
			}); t != nil {
				return &state.LeaseGranted{TaskID: t.ID, LeaseID: g.id("l"), WorkerID: fmt.Sprintf("w%d", g.rng.IntN(3)),
					Attempt: t.Attempt + 1, GrantedAt: g.now, LeaseExpiry: capped(s, t, g.now.Add(window))}
			}
		case 6:
			// A heartbeat; with a progress report, it may leave the
			// expiry where it is.
			report := g.report()
			if t := pick(func(t *state.Task) bool {
				return live(t) && (report != nil || capped(s, t, t.CurrentLease().LeaseExpiry.Add(5*time.Second)) > t.CurrentLease().LeaseExpiry)
			}); t != nil {
				cur := t.CurrentLease()
				return &state.LeaseExtended{TaskID: t.ID, LeaseID: cur.LeaseID, NewLeaseExpiry: capped(s, t, cur.LeaseExpiry.Add(5*time.Second)),
					At: g.now, Report: report}
			}
		case 23, 24:
			if t := pick(func(t *state.Task) bool { return live(t) && t.State == state.Leased }); t != nil {
				r := &state.TaskSnoozed{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, At: g.now,
					NotBefore: g.now.Add(time.Duration(g.rng.IntN(5)) * time.Second)}
				if g.rng.IntN(2) == 0 {
					r.Reason, r.By = "upstream busy", "worker-token"
				}
				return r
			}
		case 7:
			if t := pick(leased); t != nil {
				cur := t.CurrentLease()
				g.now = max(g.now, cur.LeaseExpiry)
				return &state.LeaseExpired{TaskID: t.ID, LeaseID: cur.LeaseID, At: g.now, RetryAt: g.now.Add(time.Second)}
			}
		case 8:
			if t := pick(func(t *state.Task) bool { return live(t) && t.CurrentLease().Status == state.ExecLeased }); t != nil {
				return &state.ExecutionStarted{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, At: g.now}
			}
		case 9:
			if t := pick(func(t *state.Task) bool { return live(t) && t.State == state.Leased }); t != nil {
				return &state.TaskCommitted{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, Result: g.bytes(), At: g.now,
					Spawn: g.spawn(s, t, all), Deliver: g.deliver(s, t.Namespace)}
			}
		case 10, 11:
			if t := pick(live); t != nil {
				r := &state.TaskCompleted{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, Result: g.bytes(), At: g.now}
				if t.State == state.Leased {
					r.Spawn, r.Deliver = g.spawn(s, t, all), g.deliver(s, t.Namespace)
				}
				return r
			}
		case 12:
			if t := pick(func(t *state.Task) bool { return leased(t) && t.State == state.Leased }); t != nil {
				return &state.TaskFailed{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, Reason: "boom",
					RetryAt: g.now.Add(2 * time.Second), Permanent: g.rng.IntN(4) == 0, At: g.now}
			}
		case 13:
			t := all[g.rng.IntN(len(all))]
			switch g.rng.IntN(4) {
			case 0:
				// As written before refusals named their action.
				return &state.TaskCancelled{TaskID: t.ID, LeaseID: "stale", Reason: "lease lost", At: g.now}
			case 1:
				if r := g.refusal(t); r != nil {
					return r
				}
			default:
				if !t.State.Terminal() {
					return &state.TaskDead{TaskID: t.ID, Reason: "killed", By: "ops", At: g.now}
				}
			}
		case 14:
			if g.rng.IntN(4) == 0 {
				return &state.Fence{Epoch: s.Epoch() + 1, NodeID: "n1", At: g.now}
			}
		case 15:
			if g.Purge {
				before := g.now.Add(-time.Duration(g.rng.IntN(30)) * time.Second)
				if g.rng.IntN(3) == 0 {
					return &state.TasksPurged{Before: before, At: g.now}
				}
				// One slice of a purge, as the coordinator plans them,
				// starting just before a random task.
				after := all[g.rng.IntN(len(all))].CreatedLSN - 1
				lim := state.PurgeLimits{Pass: 1 + g.rng.IntN(12), Read: 1 + g.rng.IntN(8), Drop: 1 + g.rng.IntN(3)}
				if through, _, _ := s.PurgeSlice(before, after, lim); through > after {
					return &state.TasksPurgedRange{Before: before, At: g.now, AfterLSN: after, ThroughLSN: through}
				}
			}
		case 16:
			ns, q := namespaces[g.rng.IntN(len(namespaces))], queues[g.rng.IntN(len(queues))]
			if s.Paused(state.QueueKey{Namespace: ns, Queue: q}) != nil {
				return &state.QueueResumed{Namespace: ns, Queue: q, By: "ops", Reason: "incident over", At: g.now}
			}
			return &state.QueuePaused{Namespace: ns, Queue: q, By: "ops", Reason: "incident", At: g.now}
		case 17:
			if t := pick(func(t *state.Task) bool {
				return (t.State == state.Failed || t.State == state.Dead) && t.CommittedBy == "" && s.RetryRefusal(t) == ""
			}); t != nil {
				return &state.TaskRetried{TaskID: t.ID, By: "ops", Reason: "fixed", At: g.now}
			}
		case 22:
			return g.limited()
		case 18:
			if g.Purge {
				r := &state.TasksDeleted{By: "ops", Reason: "clean up", At: g.now}
				for _, t := range all {
					if t.State.Terminal() && g.rng.IntN(3) == 0 {
						r.TaskIDs = append(r.TaskIDs, t.ID)
					}
				}
				if len(r.TaskIDs) > 0 {
					return r
				}
			}
		case 19:
			if t := pick(func(t *state.Task) bool {
				_, ok := s.Deadline(t.ID)
				return ok
			}); t != nil {
				d, _ := s.Deadline(t.ID)
				g.now = max(g.now, d)
				return &state.TaskDeadlineExceeded{TaskID: t.ID, At: g.now}
			}
		case 20, 21:
			if r := g.schedule(s); r != nil {
				return r
			}
		case 28:
			if s.DeliveryCount() > 0 && g.rng.IntN(2) == 0 {
				return g.delivered(s)
			}
			return g.outbox(s, all)
		}
	}
}

// outboxes are the outboxes of generated holds.
var outboxes = []string{"postgres:shop.public.tenure_outbox", "mysql:shop.tenure_outbox"}

// outbox returns an OutboxHeld of a few rows, most holding the request id
// of a task (so that the purges keep it), or an OutboxReleased of a few of
// the rows held (and of one that is not).
func (g *Gen) outbox(s *state.State, all []*state.Task) state.Record {
	outbox := outboxes[g.rng.IntN(len(outboxes))]
	if held := s.Holds(outbox); len(held) > 0 && g.rng.IntN(2) == 0 {
		r := &state.OutboxReleased{Outbox: outbox, Rows: []int64{int64(100 + g.rng.IntN(50))}, By: "relay", At: g.now}
		for _, h := range held {
			if g.rng.IntN(2) == 0 {
				r.Rows = append(r.Rows, h.Row)
			}
		}
		return r
	}
	r := &state.OutboxHeld{Outbox: outbox, By: "relay", At: g.now}
	for i := range 1 + g.rng.IntN(3) {
		row := state.OutboxHeldRow{Row: int64(1 + g.rng.IntN(20) + 20*i), Namespace: namespaces[0], Queue: queues[0], RequestID: g.id("r")}
		if t := all[g.rng.IntN(len(all))]; t.RequestID != "" && g.rng.IntN(4) != 0 {
			row.Namespace, row.Queue, row.RequestID = t.Namespace, t.Queue, t.RequestID
		}
		r.Rows = append(r.Rows, row)
	}
	return r
}

// capped returns expiry, or t's deadline if it has an earlier one: no lease
// outlives the deadline.
func capped(s *state.State, t *state.Task, expiry state.Time) state.Time {
	if d, ok := s.Deadline(t.ID); ok {
		return min(expiry, d)
	}
	return expiry
}

// tick is the interval between the ticks of generated schedules: the
// generator stands in for the coordinator, which computes them from a cron
// expression.
const tick = 10 * time.Second

// schedule returns a record about one of a small pool of schedules: a
// creation, a change, or the decision of its next or held tick.
func (g *Gen) schedule(s *state.State) state.Record {
	k := state.ScheduleKey{Namespace: namespaces[g.rng.IntN(len(namespaces))], Queue: queues[g.rng.IntN(len(queues))],
		Name: fmt.Sprintf("s%d", g.rng.IntN(2))}
	if p := g.paused(s); p != nil && g.rng.IntN(2) == 0 {
		k = *p // now and then a paused one, so that resumes are made
	}
	sc := s.Schedule(k)
	if sc == nil {
		return &state.ScheduleCreated{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Def: g.scheduleDef(),
			Next: g.now.Add(tick), By: "ops", At: g.now}
	}
	next := func(t state.Time) state.Time { return t.Add(tick) }
	switch g.rng.IntN(10) {
	case 0:
		if sc.Paused == nil {
			return &state.SchedulePaused{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, By: "ops", Reason: "hold", At: g.now}
		}
		n := sc.Next
		for n != 0 && n <= g.now {
			n = next(n)
		}
		if sc.HeldTick != 0 && n != 0 && n <= sc.HeldTick {
			n = next(sc.HeldTick)
		}
		return &state.ScheduleResumed{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Next: n, By: "ops", At: g.now}
	case 1:
		def := g.scheduleDef()
		if sc.HeldTick != 0 {
			def.Overlap = state.OverlapBufferOne
		}
		return &state.ScheduleUpdated{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Def: def,
			Next: max(g.now, sc.HeldTick).Add(tick), By: "ops", At: g.now}
	case 2:
		if g.rng.IntN(3) == 0 {
			return &state.ScheduleDeleted{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, By: "ops", At: g.now}
		}
	case 3:
		if t := sc.Next - state.Time(tick); sc.Next != 0 && t > 0 && t != sc.HeldTick &&
			s.ByRequest(k.Namespace, state.FireRequestID(k, t)) == nil {
			return &state.ScheduleFired{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: t,
				TaskID: g.id("st"), Next: sc.Next, Outcome: state.Backfilled, By: "ops", At: g.now}
		}
	}
	if sc.HeldTick != 0 && g.rng.IntN(2) == 0 && s.ByRequest(k.Namespace, state.FireRequestID(k, sc.HeldTick)) == nil {
		return &state.ScheduleFired{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: sc.HeldTick,
			TaskID: g.id("st"), Next: sc.Next, Outcome: state.Fired, At: g.now}
	}
	if sc.Paused != nil || sc.Next == 0 || sc.Next > g.now {
		return nil
	}
	switch g.rng.IntN(3) {
	case 0:
		return &state.ScheduleSkipped{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, From: sc.Next,
			Next: next(next(sc.Next)), Reason: state.SkipOverlap, At: g.now}
	case 1:
		if sc.Def.Overlap == state.OverlapBufferOne && sc.HeldTick == 0 {
			return &state.ScheduleHeld{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: sc.Next,
				Next: next(sc.Next), At: g.now}
		}
	}
	if s.ByRequest(k.Namespace, state.FireRequestID(k, sc.Next)) != nil {
		return nil
	}
	return &state.ScheduleFired{Namespace: k.Namespace, Queue: k.Queue, Name: k.Name, Tick: sc.Next,
		TaskID: g.id("st"), Next: next(sc.Next), Outcome: state.Fired, At: g.now}
}

// paused returns the key of a paused schedule of s, or nil.
func (g *Gen) paused(s *state.State) *state.ScheduleKey {
	for _, ns := range namespaces {
		for _, q := range queues {
			for n := range 2 {
				k := state.ScheduleKey{Namespace: ns, Queue: q, Name: fmt.Sprintf("s%d", n)}
				if sc := s.Schedule(k); sc != nil && sc.Paused != nil {
					return &k
				}
			}
		}
	}
	return nil
}

func (g *Gen) scheduleDef() state.ScheduleDef {
	return state.ScheduleDef{
		Cron:     "@every 10s",
		TimeZone: []string{"", "Europe/Berlin"}[g.rng.IntN(2)],
		Overlap:  state.Overlap(1 + g.rng.IntN(3)),
		CatchUp:  time.Duration(g.rng.IntN(60)) * time.Second,
		Payload:  g.bytes(),
		Window:   window,
		Retry:    state.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2},
		Priority: int32(g.rng.IntN(3)),
	}
}

// limited returns a QueueLimited for a random queue: no limits, a max
// concurrency, a token bucket, or both, as one partition's share of limits
// split over one to three partitions.
func (g *Gen) limited() *state.QueueLimited {
	r := &state.QueueLimited{Namespace: namespaces[g.rng.IntN(len(namespaces))], Queue: queues[g.rng.IntN(len(queues))],
		By: "ops", Reason: "flow control", At: g.now}
	kind := g.rng.IntN(4)
	if kind == 0 {
		return r
	}
	r.Partitions = uint32(1 + g.rng.IntN(3))
	if kind&1 != 0 {
		r.MaxConcurrency = uint32(1 + g.rng.IntN(3))
		r.QueueMaxConcurrency = r.MaxConcurrency * r.Partitions
	}
	if kind&2 != 0 {
		r.RateMilli, r.Burst = uint64(100+g.rng.IntN(3000)), uint32(1+g.rng.IntN(3))
		r.QueueRateMilli, r.QueueBurst = r.RateMilli*uint64(r.Partitions), r.Burst*r.Partitions
	}
	// The limits of the queue's keys, whole in every partition.
	switch g.rng.IntN(4) {
	case 1:
		r.KeyMaxConcurrency = uint32(1 + g.rng.IntN(2))
	case 2:
		r.KeyOrdered = true
	case 3:
		r.KeyRateMilli, r.KeyBurst = uint64(100+g.rng.IntN(3000)), uint32(1+g.rng.IntN(3))
	}
	r.Fair = g.rng.IntN(2) == 0
	for _, k := range keys { // ordered by key, as a record has them
		if g.rng.IntN(3) == 0 {
			r.KeyWeights = append(r.KeyWeights, state.KeyWeight{Key: k, Weight: uint32(2 + g.rng.IntN(4))})
		}
	}
	return r
}

// refusal returns the TaskCancelled of a refused action by a former lease of
// t that has not been recorded for that lease yet, or nil if there is none.
func (g *Gen) refusal(t *state.Task) *state.TaskCancelled {
	var c []state.TaskCancelled
	for i := range t.Executions {
		e := &t.Executions[i]
		if e == t.CurrentLease() {
			continue
		}
		for a := state.ActionStart; a <= state.ActionSnooze; a++ {
			if !e.Refused.Has(a) {
				c = append(c, state.TaskCancelled{TaskID: t.ID, LeaseID: e.LeaseID, Action: a})
			}
		}
	}
	if len(c) == 0 {
		return nil
	}
	r := c[g.rng.IntN(len(c))]
	r.Reason, r.At = r.Action.String()+" by a lease without authority", g.now
	return &r
}

func (g *Gen) id(prefix string) string {
	g.ids++
	return fmt.Sprintf("%s%d", prefix, g.ids)
}

func (g *Gen) bytes() []byte {
	if g.rng.IntN(3) == 0 {
		return nil
	}
	b := make([]byte, 1+g.rng.IntN(16))
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return b
}

// report returns a progress report (nil for none, half of the time).
func (g *Gen) report() *state.Report {
	switch g.rng.IntN(6) {
	case 0:
		return &state.Report{Message: fmt.Sprintf("step %d", g.rng.IntN(10))}
	case 1:
		return &state.Report{Percent: uint32(g.rng.IntN(101)), HasPercent: true}
	case 2:
		return &state.Report{Message: "copying", Percent: uint32(g.rng.IntN(101)), HasPercent: true}
	}
	return nil
}

func (g *Gen) created(s *state.State) *state.TaskCreated {
	g.tasks++
	r := &state.TaskCreated{
		TaskID:          fmt.Sprintf("t%d", g.tasks),
		Namespace:       namespaces[g.rng.IntN(len(namespaces))],
		Queue:           queues[g.rng.IntN(len(queues))],
		Payload:         g.bytes(),
		ExecutionWindow: window,
		Retry: state.RetryPolicy{MaxAttempts: uint32(1 + g.rng.IntN(3)), InitialBackoff: time.Second,
			MaxBackoff: time.Minute, Multiplier: 2},
		Priority:  int32(g.rng.IntN(5) - 2),
		CreatedAt: g.now,
	}
	if g.rng.IntN(3) == 0 {
		r.NotBefore = g.now.Add(time.Duration(g.rng.IntN(10)) * time.Second)
	}
	if g.rng.IntN(3) == 0 {
		r.Deadline = max(g.now, r.NotBefore).Add(time.Duration(1+g.rng.IntN(40)) * time.Second)
	}
	if g.rng.IntN(2) == 0 {
		r.Kind = kinds[g.rng.IntN(len(kinds))]
	}
	if g.rng.IntN(3) == 0 {
		r.Key = keys[g.rng.IntN(len(keys))]
	}
	switch g.rng.IntN(4) {
	case 0:
		r.Trace.Parent = fmt.Sprintf("00-%032x-%016x-01", g.rng.Uint64()|1, g.rng.Uint64()|1)
	case 1:
		r.Trace = state.TraceContext{Parent: fmt.Sprintf("00-%032x-%016x-00", g.rng.Uint64()|1, g.rng.Uint64()|1), State: "vendor=opaque"}
	}
	// A small pool of request ids, so that purges free ids that later
	// tasks reuse.
	if rid := fmt.Sprintf("r%d", g.rng.IntN(20)); g.rng.IntN(2) == 0 && s.ByRequest(r.Namespace, rid) == nil {
		r.RequestID = rid
	}
	var all []*state.Task
	s.Scan(0, func(t *state.Task) bool { all = append(all, t); return true })
	g.withDeps(r, all, nil)
	return r
}

// depsOn returns up to n distinct ids of tasks of all in namespace ns, or
// of the ids given in more (tasks of the same record, before it), at
// random: what a generated task depends on.
func (g *Gen) depsOn(ns string, all []*state.Task, more []string, n int) []string {
	var c []string
	for _, t := range all {
		if t.Namespace == ns {
			c = append(c, t.ID)
		}
	}
	c = append(c, more...)
	var out []string
	seen := map[string]bool{}
	for range n {
		if len(c) == 0 {
			break
		}
		if id := c[g.rng.IntN(len(c))]; !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// withDeps gives r, a task of all's state or of a record that creates
// the tasks ids before it (in r's namespace), dependencies half of the
// time, and a policy.
func (g *Gen) withDeps(r *state.TaskCreated, all []*state.Task, more []string) {
	if g.rng.IntN(2) == 0 {
		return
	}
	r.DependsOn = g.depsOn(r.Namespace, all, more, 1+g.rng.IntN(3))
	if g.rng.IntN(4) == 0 {
		// A task of another partition (cluster mode), at a random place.
		at := g.rng.IntN(len(r.DependsOn) + 1)
		r.DependsOn = slices.Insert(r.DependsOn, at, g.id("remote"))
		r.Remote = []uint32{uint32(at)}
	}
	if len(r.DependsOn) > 0 && g.rng.IntN(3) == 0 {
		r.OnDependencyFailure = state.DepRun
	}
}

// resolved returns a DependencyResolved of a pending remote edge of s at
// random (nil if there is none): completed with a result, failed, dead,
// or gone; now and then of an edge resolved before, which changes
// nothing.
func (g *Gen) resolved(s *state.State) state.Record {
	type edge struct{ dependent, dependency string }
	var es []edge
	s.RemoteEdges(func(t *state.Task, dep string) bool {
		es = append(es, edge{t.ID, dep})
		return true
	})
	if len(es) == 0 {
		return nil
	}
	slices.SortFunc(es, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.dependent, b.dependent), cmp.Compare(a.dependency, b.dependency))
	})
	e := es[g.rng.IntN(len(es))]
	r := &state.DependencyResolved{TaskID: e.dependent, Dependency: e.dependency, At: g.now}
	switch g.rng.IntN(6) {
	case 0, 1, 2:
		r.Outcome, r.Result = state.EndedCompleted, g.bytes()
	case 3:
		r.Outcome = state.EndedFailed
	case 4:
		r.Outcome = state.EndedDead
	default:
		r.Outcome = state.EndedGone
	}
	return r
}

// submitted returns a TasksSubmitted of two to four tasks in one
// namespace, half of the time a workflow, depending on each other and on
// tasks of the state.
func (g *Gen) submitted(s *state.State, all []*state.Task) *state.TasksSubmitted {
	r := &state.TasksSubmitted{At: g.now, By: "client"}
	if g.rng.IntN(2) == 0 {
		r.Workflow = g.id("wf")
	}
	r.Tasks = g.children(s, all, 2+g.rng.IntN(3), namespaces[g.rng.IntN(len(namespaces))])
	r.Deliver = g.deliver(s, r.Tasks[0].Namespace)
	return r
}

// deliver returns, a third of the time, one or two tasks of namespace ns
// for another partition (ids with its suffix), without dependencies: the
// deliveries of a record that creates tasks across a cluster.
func (g *Gen) deliver(s *state.State, ns string) []state.TaskCreated {
	if g.rng.IntN(3) != 0 {
		return nil
	}
	out := make([]state.TaskCreated, 1+g.rng.IntN(2))
	for i := range out {
		out[i] = *g.created(s)
		out[i].TaskID += "-p9"
		out[i].Namespace, out[i].RequestID, out[i].DependsOn, out[i].OnDependencyFailure = ns, "", nil, 0
	}
	return out
}

// delivered returns a TasksDelivered of the first one or two pending
// deliveries of s.
func (g *Gen) delivered(s *state.State) *state.TasksDelivered {
	r := &state.TasksDelivered{At: g.now}
	for _, d := range s.Deliveries(1 + g.rng.IntN(2)) {
		r.TaskIDs = append(r.TaskIDs, d.Task.TaskID)
	}
	return r
}

// children returns n new tasks of namespace ns for one record, each
// perhaps depending on tasks of the state and on those before it.
func (g *Gen) children(s *state.State, all []*state.Task, n int, ns string) []state.TaskCreated {
	out := make([]state.TaskCreated, 0, n)
	var ids []string
	for range n {
		c := *g.created(s)
		c.Namespace = ns
		if c.RequestID != "" {
			c.RequestID = "" // the pool's ids may clash inside one record
		}
		c.DependsOn, c.OnDependencyFailure, c.Remote = nil, 0, nil
		g.withDeps(&c, all, ids)
		out = append(out, c)
		ids = append(ids, c.TaskID)
	}
	return out
}

// spawn returns what a commit of t spawns: nothing most of the time, or
// one to three tasks in t's namespace, which may depend on t itself.
func (g *Gen) spawn(s *state.State, t *state.Task, all []*state.Task) []state.TaskCreated {
	if g.rng.IntN(4) != 0 {
		return nil
	}
	return g.children(s, all, 1+g.rng.IntN(3), t.Namespace)
}

// workflowAction cancels or retries a workflow of s at random, or returns
// nil when s has none.
func (g *Gen) workflowAction(s *state.State) state.Record {
	var ws []state.WorkflowKey
	s.Workflows("", state.WorkflowKey{}, func(w *state.Workflow) bool {
		ws = append(ws, w.Key)
		return true
	})
	if len(ws) == 0 {
		return nil
	}
	k := ws[g.rng.IntN(len(ws))]
	if g.rng.IntN(2) == 0 {
		return &state.WorkflowCancelled{Namespace: k.Namespace, Workflow: k.ID, Reason: "not needed", By: "ops", At: g.now}
	}
	return &state.WorkflowRetried{Namespace: k.Namespace, Workflow: k.ID, Reason: "fixed", By: "ops", At: g.now}
}
