package state

import "fmt"

// ScheduleFired decides a tick of a schedule by submitting its task, in
// this one record: the task TaskID is created from the schedule's
// definition with the request id FireRequestID(schedule, Tick), and the
// schedule's cursor moves to Next. Outcome says which tick it is:
//
//   - Fired: the cursor (Tick is the schedule's Next, and Next the tick
//     after it), or the held tick (Tick is HeldTick, Next unchanged);
//   - Backfilled: a tick before the cursor, fired by a backfill (Next
//     unchanged). Its request id must be unused: a tick fires at most once.
type ScheduleFired struct {
	Namespace string
	Queue     string
	Name      string
	Tick      Time
	TaskID    string
	Next      Time
	Outcome   Outcome
	// By is who asked ("" for a tick fired by the schedule itself).
	By string
	At Time
}

func (r *ScheduleFired) Task() string { return r.TaskID }

func (r *ScheduleFired) apply(s *State, lsn uint64) string {
	k := ScheduleKey{r.Namespace, r.Queue, r.Name}
	sc := s.schedules[k]
	switch {
	case sc == nil:
		return "schedule does not exist"
	case r.TaskID == "":
		return "task id is empty"
	case s.Task(r.TaskID) != nil:
		return "task id already exists"
	case s.ByRequest(r.Namespace, FireRequestID(k, r.Tick)) != nil:
		return fmt.Sprintf("tick %s was already fired", r.Tick)
	}
	if why := sc.decide(r.Tick, r.Next, r.Outcome); why != "" {
		return why
	}
	t, qi := s.addTask(sc.fireTask(r.TaskID, r.Tick, r.At, lsn), QueueKey{sc.Key.Namespace, sc.Key.Queue}, Policy{sc.Def.Kind, sc.Def.Window, sc.Def.Retry})
	qi.add(t)
	qi.events.add(r.At, EventSubmitted)
	if r.Outcome == Fired {
		s.watch(sc.LastTask, -1)
		sc.LastTask = t.ID
		s.watch(t.ID, 1)
		if r.Tick == sc.HeldTick {
			sc.HeldTick = 0
		} else {
			sc.Next = r.Next
		}
	}
	sc.remember(Fire{Tick: r.Tick, TaskID: t.ID, Outcome: r.Outcome, At: r.At})
	return ""
}

// decide checks that a record may decide tick with outcome and move the
// cursor to next.
func (sc *Schedule) decide(tick, next Time, o Outcome) string {
	switch {
	case tick <= 0:
		return "tick is not set"
	case o == Backfilled:
		if sc.Next != 0 && tick >= sc.Next || tick == sc.HeldTick {
			return fmt.Sprintf("tick %s is not a past tick (the cursor is at %s)", tick, sc.Next)
		}
		if next != sc.Next {
			return "a backfill does not move the cursor"
		}
		return ""
	case o == Fired && tick == sc.HeldTick:
		if next != sc.Next {
			return "firing the held tick does not move the cursor"
		}
		return ""
	case o != Fired && o != Skipped && o != Held:
		return fmt.Sprintf("outcome %s is not for a tick", o)
	case sc.Paused != nil:
		return "schedule is paused"
	case tick != sc.Next:
		return fmt.Sprintf("tick %s is not the schedule's next tick %s", tick, sc.Next)
	case next != 0 && next <= tick:
		return fmt.Sprintf("next tick %s is not after the tick %s", next, tick)
	}
	return ""
}
