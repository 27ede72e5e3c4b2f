package state

// ScheduleHeld decides the tick at a schedule's cursor by holding it until
// the task of the previous fire finishes (overlap policy BUFFER_ONE, no tick
// held yet); the cursor moves to Next. A later ScheduleFired of the held
// tick fires it.
type ScheduleHeld struct {
	Namespace string
	Queue     string
	Name      string
	Tick      Time
	Next      Time
	At        Time
}

func (*ScheduleHeld) Task() string { return "" }

func (r *ScheduleHeld) apply(s *State, _ uint64) string {
	sc := s.schedules[ScheduleKey{r.Namespace, r.Queue, r.Name}]
	switch {
	case sc == nil:
		return "schedule does not exist"
	case sc.Def.Overlap != OverlapBufferOne:
		return "the overlap policy is not BUFFER_ONE"
	case sc.HeldTick != 0:
		return "a tick is held already"
	}
	if why := sc.decide(r.Tick, r.Next, Held); why != "" {
		return why
	}
	sc.HeldTick = r.Tick
	sc.Next = r.Next
	sc.remember(Fire{Tick: r.Tick, Outcome: Held, At: r.At})
	return ""
}
