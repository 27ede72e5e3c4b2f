package state

// ScheduleUpdated replaces a schedule's definition. Next is the first tick
// of the new definition after At: ticks the old one had due and not yet
// decided are dropped (the coordinator decides them first). A held tick
// stays held; its task is the new definition's.
type ScheduleUpdated struct {
	Namespace string
	Queue     string
	Name      string
	Def       ScheduleDef
	Next      Time
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*ScheduleUpdated) Task() string { return "" }

func (r *ScheduleUpdated) apply(s *State, _ uint64) string {
	sc := s.schedules[ScheduleKey{r.Namespace, r.Queue, r.Name}]
	if sc == nil {
		return "schedule does not exist"
	}
	c := *sc
	c.Def, c.Next = r.Def, r.Next
	if c.HeldTick != 0 && r.Def.Overlap != OverlapBufferOne {
		return "a tick is held: the overlap policy must stay BUFFER_ONE until it fires"
	}
	if why := checkSchedule(&c); why != "" {
		return why
	}
	if r.Next != 0 && r.Next <= r.At {
		return "next tick is not after the update"
	}
	s.held -= heldBySchedule(sc)
	sc.Def, sc.Next = r.Def, r.Next
	s.held += heldBySchedule(sc)
	sc.UpdatedAt = max(sc.UpdatedAt, r.At)
	return ""
}
