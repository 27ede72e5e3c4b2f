package state

import "fmt"

// MaxDeletedPerRecord bounds the tasks one TasksDeleted names, so that a
// purge of a million tasks is many small records, never one giant one.
const MaxDeletedPerRecord = 1000

// TasksDeleted is an operator's purge: the named tasks, each finished
// (COMPLETED, FAILED or DEAD), leave the state now rather than at
// retention, with their request ids (which may then be used again). Either
// every named task is removed or, if one is missing or not finished,
// none.
type TasksDeleted struct {
	TaskIDs []string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*TasksDeleted) Task() string { return "" }

func (r *TasksDeleted) apply(s *State, _ uint64) string {
	switch {
	case len(r.TaskIDs) == 0:
		return "no task named"
	case len(r.TaskIDs) > MaxDeletedPerRecord:
		return fmt.Sprintf("%d tasks named, more than %d", len(r.TaskIDs), MaxDeletedPerRecord)
	}
	ts := make([]*Task, len(r.TaskIDs))
	seen := make(map[string]bool, len(r.TaskIDs))
	for i, id := range r.TaskIDs {
		t := s.Task(id)
		switch {
		case t == nil:
			return fmt.Sprintf("task %q does not exist", id)
		case !t.State.Terminal():
			return fmt.Sprintf("task %q is %s, not finished", id, t.State)
		case seen[id]:
			return fmt.Sprintf("task %q is named twice", id)
		}
		seen[id] = true
		ts[i] = t
	}
	for _, t := range ts {
		i := s.searchOrder(t.CreatedLSN - 1)
		for s.order[i] != t.pos+1 {
			i++ // past the holes before it
		}
		s.order[i] = 0
		s.holes++
		qi := s.queue(t)
		s.drop(t)
		s.maybeForget(qi, r.At)
	}
	s.tidyOrder()
	return ""
}
