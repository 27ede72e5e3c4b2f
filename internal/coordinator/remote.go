package coordinator

import (
	"context"
	"fmt"
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
	return c.ResolveRemoteMany(ctx, []RemoteResolve{{Dependency: dependency, End: end}})
}

// RemoteResolve is a remote dependency and how it ended.
type RemoteResolve struct {
	Dependency string
	End        RemoteEnd
}

// ResolveRemoteMany is ResolveRemote for many dependencies at once, their
// records written together (appends of at most Limits.MaxBatch records,
// waited for once): what a host that learned many ends in a round does,
// instead of one durable write per dependency. A dependency named twice
// counts once. It returns how many edges it resolved in all, once their
// records are durable; an invalid end refuses them all.
func (c *Coordinator) ResolveRemoteMany(ctx context.Context, ends []RemoteResolve) (int, error) {
	for i := range ends {
		r := &ends[i]
		if err := c.checkID(endField(len(ends), i, "dependency"), r.Dependency, true); err != nil {
			return 0, err
		}
		if r.End.Outcome < state.EndedCompleted || r.End.Outcome > state.EndedGone {
			return 0, fieldErr(endField(len(ends), i, "outcome"), "%d is not one of COMPLETED, FAILED, DEAD and GONE", r.End.Outcome)
		}
	}
	if err := c.lock(); err != nil {
		return 0, err
	}
	now := c.now()
	var recs []state.Record
	seen := make(map[string]bool, len(ends))
	var dependents []*state.Task
	for _, r := range ends {
		dependency, end := r.Dependency, r.End
		if seen[dependency] {
			// Its edges are resolved by the records already made: the
			// state does not show them until they are written.
			continue
		}
		seen[dependency] = true
		if end.Outcome != state.EndedCompleted {
			end.Result = nil
		}
		if end.Outcome == state.EndedGone && c.st.Delivering(dependency) {
			// Not there yet: this partition is delivering it.
			continue
		}
		dependents = dependents[:0]
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
		for _, t := range dependents {
			recs = append(recs, &state.DependencyResolved{TaskID: t.ID, Dependency: dependency, Outcome: end.Outcome, Result: end.Result, At: now})
		}
	}
	attribute(ctx, recs)
	resolved, last := 0, c.st.LastLSN()
	for len(recs) > 0 {
		n := min(len(recs), c.cfg.Limits.MaxBatch)
		var err error
		if last, err = c.write(recs[:n]...); err != nil {
			c.mu.Unlock()
			return 0, err
		}
		resolved += n
		recs = recs[n:]
	}
	c.mu.Unlock()
	return resolved, c.wait(ctx, last)
}

// endField names field of ends[i] when there are several.
func endField(n, i int, field string) string {
	if n == 1 {
		return field
	}
	return fmt.Sprintf("ends[%d].%s", i, field)
}
