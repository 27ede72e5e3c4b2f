package state

import "fmt"

// TasksPurged removes every terminal (COMPLETED, FAILED or DEAD) task whose
// UpdatedAt is before Before, unless a row of an outbox holds its request
// id (outbox.go): from the task table, from the request-id index
// (so its request id may be used again) and from the creation order. Tasks
// that are not terminal are never touched. Retention is a record, not a side
// effect of snapshotting, because it changes behaviour (request-id
// deduplication): a replay of the full log must drop the same tasks at the
// same point. It also forgets the queues left with nothing to report: no
// task, no pause and no event within the hour before At.
//
// The coordinator wrote one before each snapshot until it applied the
// retention period in slices instead (TasksPurgedRange); a log may still
// hold it, and it applies as it always did, in one step over every task.
type TasksPurged struct {
	// Before is the cut-off: the coordinator's clock minus the retention
	// period when it decided the purge.
	Before Time
	At     Time
}

func (*TasksPurged) Task() string { return "" }

// apply drops every terminal task last updated before r.Before. It is
// O(tasks).
func (r *TasksPurged) apply(s *State, lsn uint64) string {
	if r.Before > r.At {
		return fmt.Sprintf("purge cut-off %s is after the purge time %s", r.Before, r.At)
	}
	s.purge(r.Before, r.At, 0, lsn)
	return ""
}

// purge drops every terminal task last updated before before and created
// after afterLSN and at or before throughLSN, then forgets the queues with
// nothing left to report at at. It reads only the finished tasks of the
// range (taskSlab.finished), and returns how many it dropped.
func (s *State) purge(before, at Time, afterLSN, throughLSN uint64) int {
	dropped := 0
	s.eachPurgeable(before, afterLSN, throughLSN, func(i int, t *Task) {
		s.drop(t)
		s.order[i] = 0
		s.holes++
		dropped++
	})
	s.tidyOrder()
	for _, qi := range s.queues {
		s.forgetIdle(qi, at)
		s.maybeForget(qi, at)
	}
	return dropped
}

// eachPurgeable calls fn with each finished task last updated before
// before, not kept by an outbox's hold (State.kept), and created after
// afterLSN and at or before throughLSN, and its
// index in the creation order, in that order. It reads only finished
// tasks (taskSlab.finished). fn may drop the task and clear its entry.
func (s *State) eachPurgeable(before Time, afterLSN, throughLSN uint64, fn func(i int, t *Task)) {
	if afterLSN >= throughLSN {
		return
	}
	for i, end := s.searchOrder(afterLSN), s.searchOrder(throughLSN); i < end; i++ {
		if e := s.order[i]; e != 0 && s.slab.isFinished(e-1) {
			if t := s.slab.at(e - 1); t.UpdatedAt < before && !s.kept(t) {
				fn(i, t)
			}
		}
	}
}

// PurgeLimits bound one slice of a purge (State.PurgeSlice): the tasks it
// passes over (finished or not: each costs a bit), the finished ones it
// reads (each costs a read of the task), and those it drops.
type PurgeLimits struct {
	Pass, Read, Drop int
}

// PurgeSlice plans the next TasksPurgedRange of a purge with cut-off before
// that has done the tasks created up to afterLSN: it goes through the
// tasks created after afterLSN in creation order, within the limits, and
// returns the creation LSN of the last one it passed (throughLSN), how many
// of those are purgeable, and whether it passed the last task (done). A
// slice with drop 0 needs no record: the caller goes on after throughLSN.
// A slice ends between records, so it may pass the limits by the tasks
// of one record (docs/design/workflows.md). It changes nothing.
func (s *State) PurgeSlice(before Time, afterLSN uint64, lim PurgeLimits) (throughLSN uint64, drop int, done bool) {
	passed, read, last := 0, 0, -1
	done = true
	for i := s.searchOrder(afterLSN); i < len(s.order); i++ {
		e := s.order[i]
		if e == 0 {
			continue
		}
		if (passed >= lim.Pass || read >= lim.Read || drop >= lim.Drop) &&
			(last < 0 || s.ordered(i).CreatedLSN != s.ordered(last).CreatedLSN) {
			// A slice ends between records: it names a range of LSNs,
			// and the tasks one record created share its LSN.
			done = false
			break
		}
		passed++
		last = i
		if !s.slab.isFinished(e - 1) {
			continue
		}
		read++
		if t := s.slab.at(e - 1); t.UpdatedAt < before && !s.kept(t) {
			drop++
		}
	}
	if last < 0 {
		return afterLSN, 0, done
	}
	return s.ordered(last).CreatedLSN, drop, done
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
	qi := s.queue(t)
	qi.counts[t.State]--
	s.held -= heldByTask(t)
	if qi.total() == 0 {
		s.held -= heldByQueue(qi.key)
	}
	if t.keyed {
		s.dropKeyed(qi, t)
	}
	s.dropBeside(t)
	if t.graph {
		s.dropNode(t)
	}
	s.slab.release(t)
}

// tidyOrder takes the holes a purge or deletion left in the creation
// order out of it: those at its front at once, by slicing them off (the
// oldest tasks go first, so that is where most are, and searchOrder would
// otherwise walk them at every probe that lands among them), and the rest
// once they are half the entries. The front sliced off stays in the
// array until append grows it or compactOrder copies the entries out,
// which it does once that front is larger than what is left.
func (s *State) tidyOrder() {
	n := 0
	for n < len(s.order) && s.order[n] == 0 {
		n++
	}
	s.order, s.holes, s.trimmed = s.order[n:], s.holes-n, s.trimmed+n
	if s.holes > len(s.order)/2 || s.trimmed > len(s.order)+4096 {
		s.compactOrder()
	}
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
	s.order, s.holes, s.trimmed = order, 0, 0
}
