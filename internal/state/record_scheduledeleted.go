package state

// ScheduleDeleted removes a schedule. The tasks it submitted stay.
type ScheduleDeleted struct {
	Namespace string
	Queue     string
	Name      string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*ScheduleDeleted) Task() string { return "" }

func (r *ScheduleDeleted) apply(s *State, _ uint64) string {
	k := ScheduleKey{r.Namespace, r.Queue, r.Name}
	sc := s.schedules[k]
	if sc == nil {
		return "schedule does not exist"
	}
	s.watch(sc.LastTask, -1)
	delete(s.schedules, k)
	s.held -= heldBySchedule(sc)
	return ""
}
