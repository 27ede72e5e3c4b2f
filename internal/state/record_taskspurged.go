package state

import "fmt"

// TasksPurged removes every terminal (COMPLETED, FAILED or DEAD) task whose
// UpdatedAt is before Before: from the task table, from the request-id index
// (so its request id may be used again) and from the creation order. Tasks
// that are not terminal are never touched. Retention is a record, not a side
// effect of snapshotting, because it changes behaviour (request-id
// deduplication): a replay of the full log must drop the same tasks at the
// same point. The coordinator appends one before each snapshot. It also
// forgets the queues left with nothing to report: no task, no pause and no
// event within the hour before At.
type TasksPurged struct {
	// Before is the cut-off: the coordinator's clock minus the retention
	// period when it decided the purge.
	Before Time
	At     Time
}

func (*TasksPurged) Task() string { return "" }

// apply drops every terminal task last updated before r.Before. It is
// O(tasks): a purge runs once per snapshot, which is O(tasks) anyway.
func (r *TasksPurged) apply(s *State, _ uint64) string {
	if r.Before > r.At {
		return fmt.Sprintf("purge cut-off %s is after the purge time %s", r.Before, r.At)
	}
	for i := range s.order {
		t := s.ordered(i)
		if t == nil || !t.State.Terminal() || t.UpdatedAt >= r.Before {
			continue
		}
		s.drop(t)
		s.order[i] = 0
		s.holes++
	}
	if s.holes > len(s.order)/2 {
		s.compactOrder()
	}
	for _, qi := range s.queues {
		s.maybeForget(qi, r.At)
	}
	return ""
}

// drop removes a terminal task from the task table, the request index and
// its queue's counts, and frees its slab position: t must not be used
// afterwards. A terminal task is in no heap and holds no lease, so nothing
// else refers to it. The caller removes it from the creation order.
func (s *State) drop(t *Task) {
	s.tasks.remove(hashString(t.ID), t)
	if t.RequestID != "" {
		s.requests.remove(hashRequest(t.Namespace, t.RequestID), t)
	}
	s.counts[t.State]--
	s.queue(t).counts[t.State]--
	s.slab.release(t)
}

// compactOrder removes the nil entries of the creation order, into a new
// array so that the memory of a large old one is released.
func (s *State) compactOrder() {
	order := make([]uint32, 0, len(s.order)-s.holes)
	for _, e := range s.order {
		if e != 0 {
			order = append(order, e)
		}
	}
	s.order, s.holes = order, 0
}
