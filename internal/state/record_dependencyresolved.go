package state

import (
	"fmt"
	"slices"
)

// DependencyResolved resolves the remote edge of task TaskID (a BLOCKED
// dependent) to Dependency, a task of another partition that ended
// (docs/design/workflows.md, "Cluster mode"): the dependent's partition
// learned it by asking the dependency's. It settles the edge as the end of
// a local dependency would: COMPLETED completes it (keeping Result for the
// dependent's lease), FAILED or DEAD fails it, and Gone (the dependency no
// longer exists: purged by retention) fails it too. The dependent is then
// released or ended by its policy.
//
// It applies only while that edge is pending and the dependent BLOCKED:
// otherwise (a dependency seen ended twice, the dependent killed or
// already ended by another edge) it changes nothing. The pair (TaskID,
// Dependency) is its idempotence key, held by the edge's state in this
// log; the coordinator checks it before it appends.
type DependencyResolved struct {
	// TaskID is the dependent, a task of this partition.
	TaskID     string
	Dependency string
	Outcome    Ended
	// Result is the dependency's result when it COMPLETED.
	Result []byte
	At     Time
}

// Ended is how a remote dependency ended, as its partition answered.
type Ended uint8

const (
	EndedCompleted Ended = 1 + iota
	EndedFailed
	EndedDead
	// EndedGone: the dependency was not found (purged by retention).
	EndedGone
)

var endedNames = [...]string{"", "COMPLETED", "FAILED", "DEAD", "GONE"}

func (o Ended) String() string {
	if o > 0 && int(o) < len(endedNames) {
		return endedNames[o]
	}
	return fmt.Sprintf("Ended(%d)", uint8(o))
}

// EndedOf is the outcome of a dependency that ended in state st
// (COMPLETED, FAILED or DEAD), or 0.
func EndedOf(st TaskState) Ended {
	switch st {
	case Completed:
		return EndedCompleted
	case Failed:
		return EndedFailed
	case Dead:
		return EndedDead
	}
	return 0
}

// Task is the dependent.
func (r *DependencyResolved) Task() string { return r.TaskID }

func (r *DependencyResolved) apply(s *State, lsn uint64) string {
	switch {
	case r.TaskID == "" || r.Dependency == "":
		return "the dependent's and the dependency's ids must be set"
	case r.Outcome < EndedCompleted || r.Outcome > EndedGone:
		return fmt.Sprintf("outcome %d is not one of COMPLETED, FAILED, DEAD and GONE", r.Outcome)
	case r.Outcome != EndedCompleted && len(r.Result) > 0:
		return fmt.Sprintf("a result of a dependency that is %s", r.Outcome)
	}
	t := s.Task(r.TaskID)
	i := s.PendingRemote(t, r.Dependency)
	if i < 0 {
		return "" // resolved before, or the dependent is not waiting for it
	}
	n := s.graph[t]
	to := EdgeFailed
	if r.Outcome == EndedCompleted {
		to = EdgeCompleted
		if len(r.Result) > 0 {
			s.keepResult(t, n, i, r.Result)
		}
	}
	s.resolveEdge(t, n, &n.edges[i], to, r.failedBecause, lsn, r.At)
	s.resolveDependents(lsn, r.At)
	return ""
}

// failedBecause is the failure reason of a dependent that r ended.
func (r *DependencyResolved) failedBecause() string {
	if r.Outcome == EndedGone {
		return fmt.Sprintf("%s: dependency %s no longer exists", ReasonDependencyFailed, r.Dependency)
	}
	return fmt.Sprintf("%s: task %s is %s", ReasonDependencyFailed, r.Dependency, r.Outcome)
}

// PendingRemote returns the index of t's edge to dependency if it is a
// pending remote edge and t is BLOCKED, or -1: whether a DependencyResolved
// of them would apply.
func (s *State) PendingRemote(t *Task, dependency string) int {
	if i, ok := s.remote[dependency][t]; ok && t != nil {
		return int(i)
	}
	return -1
}

// keepResult keeps result as what the remote dependency of t's edge i
// (node n) completed with.
func (s *State) keepResult(t *Task, n *node, i int, result []byte) {
	if s.results == nil {
		s.results = make(map[*Task][][]byte)
	}
	rs, had := s.results[t]
	if !had {
		rs = make([][]byte, len(n.edges))
		s.results[t] = rs
		s.held += heldByResults(rs)
	}
	s.held += int64(len(result) - len(rs[i]))
	rs[i] = slices.Clone(result)
}
