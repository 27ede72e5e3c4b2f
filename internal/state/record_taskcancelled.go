package state

// TaskCancelled records an action rejected because its lease had lost
// authority. It changes no task state.
type TaskCancelled struct {
	TaskID  string
	LeaseID string
	Reason  string
	At      Time
}

func (r *TaskCancelled) Task() string { return r.TaskID }

func (r *TaskCancelled) apply(s *State, lsn uint64) string {
	// No precondition: the record only documents a rejected stale action.
	if t := s.Task(r.TaskID); t != nil {
		touch(t, lsn, r.At)
	}
	return ""
}
