package state

import (
	"errors"
	"fmt"
	"slices"
)

// What snapshots, exports and the invariants know of the graph
// (docs/design/workflows.md, "Release, exactly once"): each task's
// GraphInfo beside it, and each workflow's WorkflowImage. Counts,
// dependents and depths are derived, and rebuilt by the Loader.

// WorkflowImage is what a snapshot keeps of a workflow beyond its tasks.
type WorkflowImage struct {
	Key       WorkflowKey
	CreatedAt Time
	Cancelled *Pause
}

func (w *Workflow) image() WorkflowImage {
	img := WorkflowImage{Key: w.Key, CreatedAt: w.CreatedAt}
	if w.Cancelled != nil {
		c := *w.Cancelled
		img.Cancelled = &c
	}
	return img
}

// workflowImages returns the image of every workflow, ordered by key.
func (s *State) workflowImages() []WorkflowImage {
	out := make([]WorkflowImage, 0, len(s.workflows))
	for _, w := range s.workflows {
		out = append(out, w.image())
	}
	slices.SortFunc(out, func(a, b WorkflowImage) int { return cmpWorkflowKey(a.Key, b.Key) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// graphInfo is Graph for a task of the state that has a node, or the zero
// GraphInfo: what a snapshot keeps (a bare node keeps nothing).
func (s *State) graphInfo(t *Task) GraphInfo {
	if !t.graph || s.graph[t].bare() {
		return GraphInfo{}
	}
	return s.Graph(t)
}

// restoreNode gives t, a task a Loader adds, its node from g, as link
// would have left it: t is in the slab, in its state, and every task
// before it in the creation order is in s.
func (s *State) restoreNode(t *Task, g GraphInfo) string {
	if g.IsZero() {
		return ""
	}
	if g.Policy > DepRun {
		return fmt.Sprintf("dependency failure policy %d is not one of DEAD and RUN", g.Policy)
	}
	if len(g.Edges) == 0 && g.Policy != DepDead {
		return "a dependency failure policy without dependencies"
	}
	n := s.nodeOf(t)
	n.policy, n.seq, n.parent = g.Policy, g.Seq, packString(g.Parent)
	s.held += int64(len(g.Parent))
	ids := make([]string, len(g.Edges))
	for i, e := range g.Edges {
		ids[i] = e.ID
	}
	if len(g.Edges) > 0 {
		n.edges = make([]Edge, len(g.Edges))
		n.refs = make([]int32, len(g.Edges))
	}
	seen := make(map[string]bool, len(g.Edges))
	for i, id := range packStrings(ids) {
		e := g.Edges[i]
		switch {
		case id == "" || seen[id]:
			return fmt.Sprintf("dependency %q is empty or named twice", id)
		case e.State > EdgeFailed:
			return fmt.Sprintf("dependency %q has an invalid state %d", id, e.State)
		}
		seen[id] = true
		n.edges[i] = Edge{ID: id, State: e.State, Remote: e.Remote}
		s.held += edgeHeld + int64(len(id))
		if e.Remote {
			if s.Task(id) != nil {
				return fmt.Sprintf("remote dependency %q is a task of the snapshot", id)
			}
			if e.State == EdgePending {
				n.pending++
			}
			continue
		}
		d := s.Task(id)
		if d != nil {
			n.depth = max(n.depth, uint32(s.Depth(d))+1)
		}
		if e.State != EdgePending {
			continue
		}
		n.pending++
		if t.State == Blocked {
			if d == nil || d.State.Terminal() {
				return fmt.Sprintf("BLOCKED on dependency %q, which is not an unfinished task of the snapshot", id)
			}
			s.addRef(t, n, i, d)
		}
	}
	switch {
	case t.State == Blocked && n.pending == 0:
		return "BLOCKED without a pending dependency"
	case t.State != Blocked && !t.State.Terminal() && n.pending > 0:
		return fmt.Sprintf("%s with %d pending dependencies", t.State, n.pending)
	case len(g.Results) > 0 && len(g.Results) != len(g.Edges):
		return fmt.Sprintf("%d remote results for %d dependencies", len(g.Results), len(g.Edges))
	}
	for i, r := range g.Results {
		if len(r) > 0 && (!n.edges[i].Remote || n.edges[i].State != EdgeCompleted) {
			return fmt.Sprintf("a result kept for dependency %q, not a remote one that completed", n.edges[i].ID)
		}
	}
	if len(g.Results) > 0 {
		if s.results == nil {
			s.results = make(map[*Task][][]byte)
		}
		s.results[t] = g.Results
		s.held += heldByResults(g.Results)
	}
	s.watchRemote(t, n)
	for _, e := range n.edges {
		if d := s.Task(e.ID); d != nil && d.Namespace != t.Namespace {
			return fmt.Sprintf("dependency %q is in namespace %q", e.ID, d.Namespace)
		}
	}
	if g.Workflow != "" {
		s.join(t, n, s.workflowOf(WorkflowKey{t.Namespace, g.Workflow}, 0))
	}
	return ""
}

// AddWorkflow restores what an Image keeps of a workflow beyond its tasks,
// before or after its tasks. After an error the Loader refuses everything.
func (l *Loader) AddWorkflow(img WorkflowImage) error {
	if l.err != nil {
		return l.err
	}
	fail := func(why string) error {
		l.err = fmt.Errorf("%w: workflow %q in namespace %q: %s", ErrRestore, img.Key.ID, img.Key.Namespace, why)
		return l.err
	}
	switch {
	case img.Key.Namespace == "" || img.Key.ID == "":
		return fail("namespace and id must be set")
	case img.CreatedAt == 0:
		return fail("no creation time")
	case l.workflows[img.Key]:
		return fail("appears twice")
	}
	if l.workflows == nil {
		l.workflows = make(map[WorkflowKey]bool)
	}
	l.workflows[img.Key] = true
	w := l.s.workflowOf(img.Key, img.CreatedAt)
	w.CreatedAt = img.CreatedAt
	if img.Cancelled != nil {
		c := *img.Cancelled
		w.Cancelled = &c
	}
	return nil
}

// graphRestoreErrors checks, once a Loader has every task, that each
// workflow has its image.
func (s *State) graphRestoreErrors() error {
	var err error
	s.Workflows("", WorkflowKey{}, func(w *Workflow) bool {
		if w.CreatedAt == 0 {
			err = fmt.Errorf("%w: workflow %q in namespace %q has tasks but no entry", ErrRestore, w.Key.ID, w.Key.Namespace)
		}
		return err == nil
	})
	return err
}

// graphHeld is the graph's share of HeldBytes, recounted from its content.
func (s *State) graphHeld() int64 {
	var held int64
	for _, n := range s.graph {
		held += heldByNode(n)
	}
	for _, rs := range s.results {
		held += heldByResults(rs)
	}
	for k, w := range s.workflows {
		held += heldByWorkflow(k) + int64(w.Len())*memberHeld
	}
	return held
}

// graphErrors checks the graph against its tasks: every node's flag, each
// node's pending count and state, the dependents of every pending edge of
// a BLOCKED task, the workflows' members and counts, and the creation
// order's keys.
func (s *State) graphErrors() []error {
	var errs []error
	bad := func(t *Task, format string, args ...any) {
		errs = append(errs, fmt.Errorf("task %q: %s", t.ID, fmt.Sprintf(format, args...)))
	}
	s.tasks.all(func(_ *posTable, t *Task) {
		n, ok := s.graph[t]
		if ok != t.graph {
			bad(t, "its graph flag is %v, its node %v", t.graph, ok)
		}
		if t.State == Blocked && (!ok || n.pending == 0) {
			bad(t, "BLOCKED without a pending dependency")
		}
		if !ok {
			return
		}
		pending := int32(0)
		seen := map[string]bool{}
		for i, e := range n.edges {
			if seen[e.ID] {
				bad(t, "names dependency %q twice", e.ID)
			}
			seen[e.ID] = true
			if e.State != EdgePending {
				continue
			}
			pending++
			if t.State != Blocked {
				continue
			}
			if e.Remote {
				if j, ok := s.remote[e.ID][t]; !ok || int(j) != i {
					bad(t, "BLOCKED on remote dependency %q, not at its place among the watched", e.ID)
				}
				continue
			}
			d := s.Task(e.ID)
			if d == nil || d.State.Terminal() {
				bad(t, "BLOCKED on %q, which is not an unfinished task", e.ID)
				continue
			}
			dn := s.graph[d]
			if dn == nil || int(n.refs[i]) >= len(dn.dependents) || dn.dependents[n.refs[i]] != (depRef{lsn: t.CreatedLSN, pos: t.pos, edge: uint32(i)}) {
				bad(t, "its pending edge to %q is not at its place among that task's dependents", e.ID)
			}
		}
		if pending != n.pending {
			bad(t, "counts %d pending dependencies, has %d", n.pending, pending)
		}
		if pending > 0 && !t.State.Terminal() && t.State != Blocked {
			bad(t, "%s with %d pending dependencies", t.State, pending)
		}
		if len(n.edges) == 0 && n.policy != DepDead {
			bad(t, "a dependency failure policy without dependencies")
		}
		if w := n.wf; w != nil {
			if n.member < 0 || int(n.member) >= len(w.members) || w.members[n.member] != t {
				bad(t, "not at its place %d among its workflow's members", n.member)
			}
			if s.workflows[w.Key] != w {
				bad(t, "its workflow %v is not the state's", w.Key)
			}
		}
	})
	for t := range s.graph {
		if s.Task(t.ID) != t {
			errs = append(errs, fmt.Errorf("a node is kept for a task not in the state (%q)", t.ID))
		}
	}
	for dep, m := range s.remote {
		if len(m) == 0 {
			errs = append(errs, fmt.Errorf("remote dependency %q is watched for no task", dep))
		}
		for t, i := range m {
			if n := s.graph[t]; s.Task(t.ID) != t || t.State != Blocked || n == nil || int(i) >= len(n.edges) ||
				n.edges[i] != (Edge{ID: dep, State: EdgePending, Remote: true}) {
				errs = append(errs, fmt.Errorf("task %q is watched for remote dependency %q, but is not BLOCKED on it", t.ID, dep))
			}
		}
	}
	for t, rs := range s.results {
		if n := s.graph[t]; s.Task(t.ID) != t || n == nil || len(rs) != len(n.edges) {
			errs = append(errs, fmt.Errorf("task %q keeps remote results that do not match its edges", t.ID))
		}
	}
	for k, w := range s.workflows {
		var counts [NumStates]int
		holes := 0
		for _, t := range w.members {
			if t == nil {
				holes++
				continue
			}
			counts[t.State]++
			if t.Namespace != k.Namespace {
				errs = append(errs, fmt.Errorf("workflow %v: member %q is in namespace %q", k, t.ID, t.Namespace))
			}
		}
		switch {
		case w.Key != k:
			errs = append(errs, fmt.Errorf("workflow %v is indexed under %v", w.Key, k))
		case counts != w.counts || holes != w.holes:
			errs = append(errs, fmt.Errorf("workflow %v counts %v and %d holes, recount %v and %d", k, w.counts, w.holes, counts, holes))
		case w.Len() == 0:
			errs = append(errs, fmt.Errorf("workflow %v has no task", k))
		}
	}
	var prev OrderKey
	for i, e := range s.order {
		if e == 0 {
			continue
		}
		k := s.OrderKey(s.slab.at(e - 1))
		if i > 0 && !prev.Less(k) {
			errs = append(errs, fmt.Errorf("creation order entry %d has key %+v, not after %+v", i, k, prev))
		}
		prev = k
	}
	if len(s.finishing) > 0 {
		errs = append(errs, errors.New("tasks are left to settle between records"))
	}
	return errs
}
