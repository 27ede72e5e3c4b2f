package state

// ScheduleCreated creates a schedule. Next, its first tick, is computed by
// the coordinator from the definition: the first tick after At (0 if the
// expression never fires).
type ScheduleCreated struct {
	Namespace string
	Queue     string
	Name      string
	Def       ScheduleDef
	Next      Time
	// By is who asked: the principal's name ("" without one).
	By string
	At Time
}

func (*ScheduleCreated) Task() string { return "" }

func (r *ScheduleCreated) apply(s *State, _ uint64) string {
	k := ScheduleKey{r.Namespace, r.Queue, r.Name}
	sc := &Schedule{Key: k, Def: r.Def, Next: r.Next, CreatedAt: r.At, CreatedBy: r.By, UpdatedAt: r.At}
	if why := checkSchedule(sc); why != "" {
		return why
	}
	if s.schedules[k] != nil {
		return "schedule " + k.String() + " already exists"
	}
	if r.Next != 0 && r.Next <= r.At {
		return "first tick is not after the creation"
	}
	s.schedules[k] = sc
	s.held += heldBySchedule(sc)
	return ""
}
