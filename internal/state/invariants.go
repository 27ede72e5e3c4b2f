package state

import (
	"errors"
	"fmt"
)

// Invariants checks every invariant of the state and its derived indexes
// (seed 000 §7, plus: a committed task never returns to waiting, and at most
// one execution of a task commits). It returns all violations joined, or nil.
// It is O(n) and meant for tests and for `verify` tools, not the hot path.
func (s *State) Invariants() error {
	var errs []error
	bad := func(t *Task, format string, args ...any) {
		errs = append(errs, fmt.Errorf("task %q: %s", t.ID, fmt.Sprintf(format, args...)))
	}
	var counts [Dead + 1]int
	leased, schedulable := 0, 0
	for id, t := range s.tasks {
		if id != t.ID {
			bad(t, "indexed under %q", id)
		}
		counts[t.State]++
		cur := t.CurrentLease()
		switch t.State {
		case Waiting, Completed, Failed, Dead:
			if cur != nil {
				bad(t, "%s task holds lease %q", t.State, cur.LeaseID)
			}
		case Leased:
			if cur == nil {
				bad(t, "LEASED task has no lease")
			}
		case Committed:
		default:
			bad(t, "invalid state %d", t.State)
		}
		if cur != nil {
			leased++
			if s.leases[cur.LeaseID] != t {
				bad(t, "lease %q missing from the lease index", cur.LeaseID)
			}
			if int(t.cur) != len(t.Executions)-1 {
				bad(t, "current lease is not the latest execution")
			}
			if t.heapIdx < 0 || int(t.heapIdx) >= s.expiry.Len() || s.expiry.tasks[t.heapIdx] != t {
				bad(t, "leased task missing from the expiry index")
			}
			switch cur.Status {
			case ExecLeased, ExecInProgress, ExecCommitted:
			default:
				bad(t, "current execution is %s", cur.Status)
			}
		}
		if t.Schedulable() {
			schedulable++
			qi := s.queues[QueueKey{t.Namespace, t.Queue}]
			h := (*taskHeap)(nil)
			if qi != nil {
				h = &qi.ready
				if t.delayed {
					h = &qi.delayed
				}
			}
			if h == nil || t.heapIdx < 0 || int(t.heapIdx) >= h.Len() || h.tasks[t.heapIdx] != t {
				bad(t, "schedulable task missing from its queue index")
			}
		}
		if t.Attempt != uint32(len(t.Executions)) {
			bad(t, "attempt %d but %d executions", t.Attempt, len(t.Executions))
		}
		commits := 0
		for i, e := range t.Executions {
			if e.Attempt != uint32(i+1) {
				bad(t, "execution %d has attempt %d", i, e.Attempt)
			}
			if e.CommittedAt != 0 {
				commits++
				if e.LeaseID != t.CommittedBy {
					bad(t, "execution %q committed but the task names %q", e.LeaseID, t.CommittedBy)
				}
			}
			if i != int(t.cur) && (e.Status == ExecLeased || e.Status == ExecInProgress) {
				bad(t, "execution %d is %s without holding the lease", i, e.Status)
			}
		}
		if commits > 1 {
			bad(t, "%d executions committed; at most one may", commits)
		}
		mustCommit := t.State == Committed || t.State == Completed
		if mustCommit && commits != 1 {
			bad(t, "%s with %d commits", t.State, commits)
		}
		if (t.State == Waiting || t.State == Leased || t.State == Failed) && commits != 0 {
			bad(t, "%s after a commit: a committed task never returns to waiting", t.State)
		}
		if t.RequestID != "" && s.requests[requestKey{t.Namespace, t.RequestID}] != t {
			bad(t, "request id %q missing from its index", t.RequestID)
		}
	}
	if counts != s.counts {
		errs = append(errs, fmt.Errorf("state counts %v, want %v", s.counts, counts))
	}
	if len(s.leases) != leased || s.expiry.Len() != leased {
		errs = append(errs, fmt.Errorf("%d leased tasks, lease index %d, expiry index %d", leased, len(s.leases), s.expiry.Len()))
	}
	queued := 0
	for _, qi := range s.queues {
		queued += qi.len()
	}
	if queued != schedulable {
		errs = append(errs, fmt.Errorf("%d schedulable tasks, %d in queue indexes", schedulable, queued))
	}
	for k, t := range s.requests {
		if s.tasks[t.ID] != t || t.RequestID != k.requestID || t.Namespace != k.namespace {
			errs = append(errs, fmt.Errorf("request index entry %q points at the wrong task", k.requestID))
		}
	}
	return errors.Join(errs...)
}

// Export is a canonical, deep copy of the logical state: equal for two
// states exactly when they hold the same tasks and positions, whatever the
// layout of their derived indexes. Tests compare live and replayed states
// with it.
type Export struct {
	LastLSN uint64
	Epoch   uint64
	Tasks   []*Task
}

// Export returns the canonical copy of s.
func (s *State) Export() Export {
	e := Export{LastLSN: s.lastLSN, Epoch: s.epoch, Tasks: make([]*Task, 0, len(s.tasks))}
	s.Scan(0, func(t *Task) bool {
		e.Tasks = append(e.Tasks, t.Clone())
		return true
	})
	return e
}
