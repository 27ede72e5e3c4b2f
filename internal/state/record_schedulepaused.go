package state

// SchedulePaused pauses a schedule: no tick is decided until a
// ScheduleResumed. Its tasks already submitted are not touched.
type SchedulePaused struct {
	Namespace string
	Queue     string
	Name      string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*SchedulePaused) Task() string { return "" }

func (r *SchedulePaused) apply(s *State, _ uint64) string {
	sc := s.schedules[ScheduleKey{r.Namespace, r.Queue, r.Name}]
	switch {
	case sc == nil:
		return "schedule does not exist"
	case sc.Paused != nil:
		return "schedule is already paused"
	}
	sc.Paused = &Pause{By: r.By, Reason: r.Reason, At: r.At}
	sc.UpdatedAt = max(sc.UpdatedAt, r.At)
	return ""
}
