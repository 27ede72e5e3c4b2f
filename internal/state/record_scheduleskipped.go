package state

// ScheduleSkipped decides the ticks of a schedule from its cursor From up
// to (not including) Next by not firing them, for Reason (SkipCatchUp,
// SkipOverlap, SkipUpdated): the cursor moves to Next.
type ScheduleSkipped struct {
	Namespace string
	Queue     string
	Name      string
	From      Time
	Next      Time
	Reason    string
	At        Time
}

func (*ScheduleSkipped) Task() string { return "" }

func (r *ScheduleSkipped) apply(s *State, _ uint64) string {
	sc := s.schedules[ScheduleKey{r.Namespace, r.Queue, r.Name}]
	if sc == nil {
		return "schedule does not exist"
	}
	if r.Reason == "" {
		return "reason is empty"
	}
	if why := sc.decide(r.From, r.Next, Skipped); why != "" {
		return why
	}
	sc.Next = r.Next
	sc.remember(Fire{Tick: r.From, Until: r.Next, Outcome: Skipped, Reason: r.Reason, At: r.At})
	return ""
}
