package coordinator

import (
	"context"
	"slices"

	"github.com/tenurehq/tenure/internal/state"
)

// Remote edges (cluster mode; docs/design/workflows.md, "Cluster mode"): a
// BLOCKED task of this partition that depends on a task of another one
// waits until this partition's host learns that the dependency ended and
// resolves the edge with a DependencyResolved record.

// RemoteDependencies returns the ids of the tasks of other partitions that
// a BLOCKED task of this partition waits for (each once, sorted), but for
// those this partition is still delivering: what the host watches. It is read from the state as it is, durable or not: an
// edge that a crash undoes is resolved by nobody, which changes nothing.
func (c *Coordinator) RemoteDependencies() ([]string, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	var out []string
	c.st.RemoteDependencies(func(dep string) bool {
		if !c.st.Delivering(dep) {
			// One this partition is still delivering is not asked: it may
			// not exist there yet (deliveries.go).
			out = append(out, dep)
		}
		return true
	})
	slices.Sort(out)
	return out, nil
}

// RemoteEnd is how a remote dependency ended, as its partition answered
// (a read confirmed durable there).
type RemoteEnd struct {
	// Outcome is COMPLETED, FAILED, DEAD, or GONE when its partition does
	// not have it (purged by retention).
	Outcome state.Ended
	// Result is its result when it completed.
	Result []byte
}

// ResolveRemote resolves every pending edge of a BLOCKED task of this
// partition to dependency, a task of another partition that ended as end
// says: one DependencyResolved record each, appended only for an edge
// still pending, so that an end learned twice (a poll repeated, a new
// owner of the partition asking again) resolves each edge once. It
// returns how many edges it resolved, once their records are durable.
func (c *Coordinator) ResolveRemote(ctx context.Context, dependency string, end RemoteEnd) (int, error) {
	if err := c.checkID("dependency", dependency, true); err != nil {
		return 0, err
	}
	if end.Outcome < state.EndedCompleted || end.Outcome > state.EndedGone {
		return 0, fieldErr("outcome", "%d is not one of COMPLETED, FAILED, DEAD and GONE", end.Outcome)
	}
	if end.Outcome != state.EndedCompleted {
		end.Result = nil
	}
	if err := c.lock(); err != nil {
		return 0, err
	}
	if end.Outcome == state.EndedGone && c.st.Delivering(dependency) {
		// Not there yet: this partition is delivering it.
		c.mu.Unlock()
		return 0, nil
	}
	var dependents []*state.Task
	c.st.RemoteDependents(dependency, func(t *state.Task) bool {
		dependents = append(dependents, t)
		return true
	})
	// In creation order: a replay of the records settles them alike
	// whatever order the index is in, but the log reads better so.
	slices.SortFunc(dependents, func(a, b *state.Task) int {
		ka, kb := c.st.OrderKey(a), c.st.OrderKey(b)
		switch {
		case ka.Less(kb):
			return -1
		case kb.Less(ka):
			return 1
		}
		return 0
	})
	now := c.now()
	recs := make([]state.Record, 0, len(dependents))
	for _, t := range dependents {
		recs = append(recs, &state.DependencyResolved{TaskID: t.ID, Dependency: dependency, Outcome: end.Outcome, Result: end.Result, At: now})
	}
	return len(recs), c.writeAndWait(ctx, recs...)
}
