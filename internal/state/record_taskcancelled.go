package state

import "fmt"

// TaskCancelled records a lease holder's action refused because its lease
// had lost authority: the lease is one of the task's former leases (it
// expired, or the task was leased again, killed or finished). It changes no
// task state, and it does not count as an update of the task: UpdatedAt,
// which retention measures from, stays, so refused calls cannot keep a
// finished task alive.
//
// The records refusals can add to a task are bounded: at most one per lease
// and Action, which the lease's Execution keeps in Refused. A call naming a
// lease the task never had leaves no record at all (the coordinator answers
// it from memory).
//
// A record with ActionUnknown was written before records named their
// action, when every refusal, by any lease id, was recorded. It keeps the
// meaning it had then, so that an old log replays to the state it always
// did: no precondition, and it counts as an update of the task it names (if
// that task exists).
type TaskCancelled struct {
	TaskID  string
	LeaseID string
	Reason  string
	At      Time
	Action  Action
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *TaskCancelled) Task() string { return r.TaskID }

func (r *TaskCancelled) apply(s *State, lsn uint64) string {
	t := s.Task(r.TaskID)
	if r.Action == ActionUnknown {
		if t != nil {
			s.touch(t, lsn, r.At)
		}
		return ""
	}
	if r.Action > lastAction {
		return fmt.Sprintf("action %d is unknown", r.Action)
	}
	if t == nil {
		return "task does not exist"
	}
	e := t.ExecutionOf(r.LeaseID)
	switch {
	case e == nil:
		return fmt.Sprintf("lease %q was never the task's", r.LeaseID)
	case e == t.CurrentLease():
		return fmt.Sprintf("lease %q is the current lease, which has authority", r.LeaseID)
	case e.Refused.Has(r.Action):
		return fmt.Sprintf("a refused %s by lease %q is already recorded", r.Action, r.LeaseID)
	}
	e.Refused |= r.Action.set()
	t.touched(lsn) // in the history, but not an update
	s.changed = t
	return ""
}

// Action is a lease holder's action, as a TaskCancelled names the one it
// refused. The numbers are part of the on-disk format (record.proto's
// LeaseAction).
type Action uint8

const (
	// ActionUnknown is the action of a TaskCancelled written before
	// records named their action.
	ActionUnknown Action = iota
	ActionStart
	ActionHeartbeat
	ActionCommit
	ActionComplete
	ActionFail
	ActionSnooze

	lastAction = ActionSnooze
)

var actionNames = [...]string{"unknown", "start", "heartbeat", "commit", "complete", "fail", "snooze"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// ParseAction returns the Action whose String is name (not ActionUnknown).
func ParseAction(name string) (Action, bool) {
	for a := ActionStart; a <= lastAction; a++ {
		if actionNames[a] == name {
			return a, true
		}
	}
	return ActionUnknown, false
}

func (a Action) set() ActionSet { return 1 << a }

// ActionSet is a set of Actions: bit n is Action n.
type ActionSet uint8

// knownActions holds every action a TaskCancelled may add to a set: bits 1
// to lastAction (never ActionUnknown).
const knownActions = ActionSet(1<<(lastAction+1) - 2)

// Has reports whether a is in the set.
func (s ActionSet) Has(a Action) bool { return s&a.set() != 0 }
