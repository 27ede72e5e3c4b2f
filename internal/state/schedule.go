package state

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// A schedule submits a task at each tick of a cron expression. The state
// keeps its definition and its cursor: the next tick not yet decided. Each
// tick is decided by exactly one record — ScheduleFired (the task is
// created in the same record), ScheduleSkipped or ScheduleHeld — whose
// apply refuses any tick but the cursor, so a tick is decided once however
// often the log is replayed or whoever serves the partition
// (docs/design/state-machine.md, "Schedules"). The state does not parse cron
// expressions: the coordinator computes each next tick and writes it into
// the record.

// ScheduleKey names a schedule: its name is unique within its namespace
// and queue, the queue its tasks go to.
type ScheduleKey struct {
	Namespace string
	Queue     string
	Name      string
}

func (k ScheduleKey) String() string { return k.Namespace + "/" + k.Queue + "/" + k.Name }

func (k ScheduleKey) compare(o ScheduleKey) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Queue, o.Queue), cmp.Compare(k.Name, o.Name))
}

// Overlap says what a tick does while the task of the previous fire is not
// finished (not COMPLETED, FAILED or DEAD).
type Overlap uint8

const (
	// OverlapSkip skips the tick (the default).
	OverlapSkip Overlap = iota + 1
	// OverlapAllow fires it anyway.
	OverlapAllow
	// OverlapBufferOne holds the first such tick and fires it once the
	// previous task finishes; ticks that come due while one is held are
	// skipped.
	OverlapBufferOne
)

var overlapNames = [...]string{"UNSPECIFIED", "SKIP", "ALLOW", "BUFFER_ONE"}

func (o Overlap) String() string {
	if int(o) < len(overlapNames) {
		return overlapNames[o]
	}
	return "Overlap(" + strconv.Itoa(int(o)) + ")"
}

// ScheduleDef is what a user sets of a schedule: when it fires and the task
// each fire submits.
type ScheduleDef struct {
	// Cron is the expression as given (5 fields, 6 with seconds, or a
	// descriptor such as @daily or @every 90s); TimeZone an IANA name ("":
	// UTC). The coordinator parses them; the state only keeps them.
	Cron     string
	TimeZone string
	Overlap  Overlap
	// CatchUp is how late a tick may still fire: a tick found due more
	// than CatchUp ago (the server was down) is skipped.
	CatchUp time.Duration
	// The task of each fire, and its kind ("" for none).
	Payload  []byte
	Window   time.Duration
	Retry    RetryPolicy
	Priority int32
	Kind     string
}

func (d *ScheduleDef) check() string {
	switch {
	case d.Cron == "":
		return "cron expression is empty"
	case d.Overlap < OverlapSkip || d.Overlap > OverlapBufferOne:
		return fmt.Sprintf("overlap policy %d is unknown", d.Overlap)
	case d.CatchUp < 0:
		return "catch-up window is negative"
	case d.Window <= 0:
		return "execution window must be positive"
	case d.Retry.MaxAttempts < 1:
		return "retry policy needs at least one attempt"
	case !(d.Retry.Multiplier >= 1) || d.Retry.InitialBackoff < 0 || d.Retry.MaxBackoff < d.Retry.InitialBackoff:
		return fmt.Sprintf("retry policy %+v is invalid (multiplier >= 1, 0 <= initial <= max backoff)", d.Retry)
	}
	return ""
}

// Outcome is what became of a tick.
type Outcome uint8

const (
	// Fired: a task was submitted for the tick.
	Fired Outcome = iota + 1
	// Skipped: the ticks of a range were not fired (Reason says why).
	Skipped
	// Held: the tick waits for the previous task to finish (buffer one).
	Held
	// Backfilled: a task was submitted for a past tick by a backfill.
	Backfilled
)

var outcomeNames = [...]string{"UNSPECIFIED", "FIRED", "SKIPPED", "HELD", "BACKFILLED"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Reasons of a ScheduleSkipped.
const (
	// SkipCatchUp: the ticks were due longer ago than the catch-up window
	// when they were found (the server was down or the partition moved).
	SkipCatchUp = "catch_up_window"
	// SkipOverlap: the previous fire's task was not finished.
	SkipOverlap = "overlap"
	// SkipPaused: the schedule was paused.
	SkipPaused = "paused"
	// SkipUpdated: the schedule's expression changed; the old one's due
	// ticks are dropped.
	SkipUpdated = "updated"
)

// Fire is one decision about a schedule's ticks, as its recent history
// keeps it.
type Fire struct {
	// Tick is the nominal time of the tick; for Skipped, the first tick of
	// the range, which holds every tick from Tick up to (not including)
	// Until.
	Tick  Time
	Until Time
	// TaskID is the task submitted (Fired, Backfilled).
	TaskID  string
	Outcome Outcome
	Reason  string
	// At is when the decision was made.
	At Time
}

// RecentFires is how many decisions a schedule keeps in its history.
const RecentFires = 20

// Schedule is the state of one schedule, derived only from records.
// Callers outside this package must treat it as read-only.
type Schedule struct {
	Key ScheduleKey
	Def ScheduleDef
	// Paused is set while the schedule is paused: its ticks are not
	// decided until it is resumed, and those that passed meanwhile are
	// then skipped.
	Paused *Pause
	// Next is the nominal time of the next tick not yet decided (0: the
	// expression never fires again).
	Next Time
	// HeldTick is a due tick held back by OverlapBufferOne (0: none).
	HeldTick Time
	// LastTask is the task of the latest fire ("" before any).
	LastTask string
	// Recent holds the latest decisions, oldest first (at most
	// RecentFires).
	Recent    []Fire
	CreatedAt Time
	CreatedBy string
	UpdatedAt Time
}

// Clone returns a deep copy that shares nothing with the state but the
// payload, which the state never modifies.
func (sc *Schedule) Clone() *Schedule {
	c := *sc
	if sc.Paused != nil {
		p := *sc.Paused
		c.Paused = &p
	}
	c.Recent = slices.Clone(sc.Recent)
	return &c
}

func (sc *Schedule) remember(f Fire) {
	if len(sc.Recent) >= RecentFires {
		sc.Recent = append(sc.Recent[:0], sc.Recent[len(sc.Recent)-RecentFires+1:]...)
	}
	sc.Recent = append(sc.Recent, f)
	sc.UpdatedAt = max(sc.UpdatedAt, f.At)
}

// FireRequestID is the request id of the task a schedule submits for a
// tick: derived from the schedule and the tick's nominal time, and with
// spaces, which no request id given by a client may have, so that no
// submit takes it.
func FireRequestID(k ScheduleKey, tick Time) string {
	return "schedule " + k.Queue + "/" + k.Name + " " + strconv.FormatInt(int64(tick), 10)
}

// Schedule returns the schedule or nil. The result must not be modified and
// is only valid until the next Apply.
func (s *State) Schedule(k ScheduleKey) *Schedule { return s.schedules[k] }

// Schedules returns copies of the schedules of namespace and queue (""
// matches every one), ordered by namespace, queue and name.
func (s *State) Schedules(namespace, queue string) []*Schedule {
	var out []*Schedule
	for k, sc := range s.schedules {
		if (namespace == "" || k.Namespace == namespace) && (queue == "" || k.Queue == queue) {
			out = append(out, sc.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *Schedule) int { return a.Key.compare(b.Key) })
	return out
}

// ScheduleKeys returns the keys of every schedule, ordered.
func (s *State) ScheduleKeys() []ScheduleKey {
	out := make([]ScheduleKey, 0, len(s.schedules))
	for k := range s.schedules {
		out = append(out, k)
	}
	slices.SortFunc(out, ScheduleKey.compare)
	return out
}

// NextTick is the earliest tick any schedule that is not paused, nor
// waiting for its last task (Waiting), has to decide, if any.
func (s *State) NextTick() (Time, bool) {
	var next Time
	found := false
	for _, sc := range s.schedules {
		if sc.Paused == nil && sc.Next != 0 && (!found || sc.Next < next) && !s.Waiting(sc) {
			next, found = sc.Next, true
		}
	}
	return next, found
}

// Watched reports whether the task is the last fire of a schedule: when it
// finishes, that schedule's overlap policy may let a tick fire.
func (s *State) Watched(taskID string) bool { return s.watched[taskID] > 0 }

// watch adds d to the schedules watching taskID ("" is no task).
func (s *State) watch(taskID string, d int) {
	if taskID == "" {
		return
	}
	if n := s.watched[taskID] + d; n > 0 {
		s.watched[taskID] = n
	} else {
		delete(s.watched, taskID)
	}
}

// Waiting reports whether sc's due ticks wait for the task of its last
// fire to finish before they are decided: with the overlap policy SKIP,
// or BUFFER_ONE holding a tick already, while that task is unfinished.
// They are decided when it finishes, those that came due before as
// skipped for overlap (FinishedAt).
func (s *State) Waiting(sc *Schedule) bool {
	switch {
	case sc.Def.Overlap == OverlapSkip:
	case sc.Def.Overlap == OverlapBufferOne && sc.HeldTick != 0:
	default:
		return false
	}
	return !s.Finished(sc.LastTask)
}

// FinishedAt is when the task of a schedule's last fire finished (its last
// update, once terminal), or 0 if it is no longer held or there is none.
func (s *State) FinishedAt(taskID string) Time {
	if t := s.Task(taskID); t != nil && t.State.Terminal() {
		return t.UpdatedAt
	}
	return 0
}

// Finished reports whether the task of a schedule's latest fire is done
// (COMPLETED, FAILED or DEAD, or no longer held): the overlap policy waits
// for it.
func (s *State) Finished(taskID string) bool {
	if taskID == "" {
		return true
	}
	t := s.Task(taskID)
	return t == nil || t.State.Terminal()
}

// ScheduleImages returns deep copies of every schedule, ordered by key: what
// a snapshot keeps of them.
func (s *State) scheduleImages() []*Schedule { return s.Schedules("", "") }

// AddSchedule restores a schedule from a snapshot. After an error the
// Loader refuses everything.
func (l *Loader) AddSchedule(sc *Schedule) error {
	if l.err != nil {
		return l.err
	}
	if why := checkSchedule(sc); why != "" {
		l.err = fmt.Errorf("%w: schedule %s: %s", ErrRestore, sc.Key, why)
		return l.err
	}
	if l.s.schedules[sc.Key] != nil {
		l.err = fmt.Errorf("%w: schedule %s appears twice", ErrRestore, sc.Key)
		return l.err
	}
	l.s.schedules[sc.Key] = sc.Clone()
	l.s.held += heldBySchedule(sc)
	l.s.watch(sc.LastTask, 1)
	return nil
}

// checkSchedule checks what must hold of every schedule.
func checkSchedule(sc *Schedule) string {
	switch {
	case sc == nil:
		return "nil schedule"
	case sc.Key.Namespace == "" || sc.Key.Queue == "" || sc.Key.Name == "":
		return "namespace, queue and name must be set"
	case sc.HeldTick != 0 && (sc.Next != 0 && sc.HeldTick >= sc.Next):
		return fmt.Sprintf("held tick %s is not before the next tick %s", sc.HeldTick, sc.Next)
	case sc.HeldTick != 0 && sc.Def.Overlap != OverlapBufferOne:
		return "a tick is held but the overlap policy is not BUFFER_ONE"
	case len(sc.Recent) > RecentFires:
		return fmt.Sprintf("%d recent decisions, more than %d", len(sc.Recent), RecentFires)
	}
	return sc.Def.check()
}

// fireTask is the task a schedule submits for tick, without its queue key
// and policy (State.addTask sets them).
func (sc *Schedule) fireTask(id string, tick, at Time, lsn uint64) *Task {
	d := &sc.Def
	t := &Task{
		ID:         id,
		Payload:    d.Payload,
		RequestID:  FireRequestID(sc.Key, tick),
		Priority:   d.Priority,
		CreatedAt:  at,
		UpdatedAt:  at,
		CreatedLSN: lsn,
		State:      Waiting,
		cur:        -1,
		heapIdx:    -1,
	}
	return t
}
