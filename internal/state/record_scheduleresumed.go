package state

// ScheduleResumed ends a SchedulePaused. The ticks that passed while the
// schedule was paused, from its cursor up to Next (the first tick after
// At), are skipped (reason "paused") in this same record.
type ScheduleResumed struct {
	Namespace string
	Queue     string
	Name      string
	Next      Time
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*ScheduleResumed) Task() string { return "" }

func (r *ScheduleResumed) apply(s *State, _ uint64) string {
	sc := s.schedules[ScheduleKey{r.Namespace, r.Queue, r.Name}]
	switch {
	case sc == nil:
		return "schedule does not exist"
	case sc.Paused == nil:
		return "schedule is not paused"
	case sc.Next == 0 && r.Next != 0:
		return "the schedule has no tick left"
	case r.Next != 0 && r.Next < sc.Next:
		return "next tick goes back"
	case r.Next != 0 && r.Next <= r.At:
		return "next tick is not after the resume"
	case sc.HeldTick != 0 && r.Next != 0 && sc.HeldTick >= r.Next:
		return "next tick is not after the held tick"
	}
	if sc.Next != 0 && (r.Next == 0 || r.Next > sc.Next) {
		sc.remember(Fire{Tick: sc.Next, Until: r.Next, Outcome: Skipped, Reason: SkipPaused, At: r.At})
	}
	sc.Paused = nil
	sc.Next = r.Next
	sc.UpdatedAt = max(sc.UpdatedAt, r.At)
	return ""
}
