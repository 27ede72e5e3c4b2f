package state

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"
)

// The graph of tasks: dependency edges, workflows and spawns
// (docs/design/workflows.md). What a task has of it is kept in a node
// beside the task (State.graph), so that a task without edges, dependents,
// workflow or parent pays nothing; Task.graph says it has one.

// DepPolicy says what a dependency that ends FAILED or DEAD does to its
// dependent.
type DepPolicy uint8

const (
	// DepDead ends the dependent at once, DEAD with failure reason
	// "dependency_failed: ..." (the default).
	DepDead DepPolicy = iota
	// DepRun counts the failed dependency as ended: the dependent runs once
	// every dependency has ended.
	DepRun
)

func (p DepPolicy) String() string {
	switch p {
	case DepDead:
		return "DEAD"
	case DepRun:
		return "RUN"
	}
	return fmt.Sprintf("DepPolicy(%d)", uint8(p))
}

// EdgeState is the state of one dependency edge.
type EdgeState uint8

const (
	// EdgePending: the dependency has not ended (as far as the edge
	// knows).
	EdgePending EdgeState = iota
	// EdgeCompleted: the dependency ended COMPLETED.
	EdgeCompleted
	// EdgeFailed: the dependency ended FAILED or DEAD.
	EdgeFailed
)

var edgeStateNames = [...]string{"PENDING", "COMPLETED", "FAILED"}

func (e EdgeState) String() string {
	if int(e) < len(edgeStateNames) {
		return edgeStateNames[e]
	}
	return fmt.Sprintf("EdgeState(%d)", uint8(e))
}

// Edge is one dependency of a task: the dependency's id, and what the
// dependent knows of it.
type Edge struct {
	ID    string
	State EdgeState
	// Remote says the dependency is a task of another partition (cluster
	// mode): not in this state, its end is learned by a DependencyResolved
	// record (docs/design/workflows.md, "Cluster mode").
	Remote bool
}

// ReasonDependencyFailed starts the failure reason of a task that a
// dependency's failure ended.
const ReasonDependencyFailed = "dependency_failed"

// WorkflowKey names a workflow: a namespace and a workflow id.
type WorkflowKey struct {
	Namespace string
	ID        string
}

// Workflow is what the state keeps of one workflow: its members (the tasks
// that carry it) in creation order, their counts by state, and its cancel.
// It lives while it has a member in the state.
type Workflow struct {
	Key       WorkflowKey
	CreatedAt Time
	// Cancelled says who cancelled it and why, until it is retried (nil:
	// not cancelled).
	Cancelled *Pause
	// members holds the tasks in creation order; nil where one was dropped.
	members []*Task
	holes   int
	counts  [NumStates]int
}

// Counts returns the number of its tasks in each state.
func (w *Workflow) Counts() [NumStates]int { return w.counts }

// Len is the number of its tasks in the state.
func (w *Workflow) Len() int { return len(w.members) - w.holes }

// Final reports whether every task of it has ended.
func (w *Workflow) Final() bool {
	return w.counts[Completed]+w.counts[Failed]+w.counts[Dead] == w.Len()
}

// Members calls fn with each of its tasks in creation order until fn
// returns false. Like a Task, they are only valid until the next Apply.
func (w *Workflow) Members(fn func(*Task) bool) {
	for _, t := range w.members {
		if t != nil && !fn(t) {
			return
		}
	}
}

// node is what the state keeps of a task in the graph.
type node struct {
	// edges are its dependencies in the order given; pending counts those
	// still EdgePending. While the task is BLOCKED, refs holds for each
	// pending edge the place of its depRef in its dependency's dependents.
	edges   []Edge
	refs    []int32
	pending int32
	// depth is the longest chain of dependencies still in the state that
	// ends at the task (1 without any): derived, rebuilt on load.
	depth uint32
	// seq is the task's place among the tasks its creating record created
	// (0 for a record that creates one): with its creation LSN, its place
	// in the creation order.
	seq    uint16
	policy DepPolicy
	// parent is the task whose commit spawned it ("" for none).
	parent string
	wf     *Workflow
	member int32 // index in wf.members
	// dependents are the pending edges of BLOCKED tasks that name this
	// task, in no order (a derived index: depRef). A dependent that leaves
	// BLOCKED before its edge resolves takes its refs away (State.dropRefs).
	dependents []depRef
}

// depRef names edge edge of the task created at lsn in slab position pos:
// a pending edge whose dependency is the task the ref is kept with. A
// position reused by a later task holds a task created at a later LSN, so
// lsn tells a stale ref.
type depRef struct {
	lsn  uint64
	pos  uint32
	edge uint32
}

// GraphInfo is what a task has of the graph, as a snapshot keeps it and a
// view shows it: the zero value for a task without a node.
type GraphInfo struct {
	// Workflow is its workflow's id ("" for none; its namespace is the
	// task's).
	Workflow string
	Edges    []Edge
	Policy   DepPolicy
	// Parent is the task whose commit spawned it ("" for none).
	Parent string
	// Seq is its place among the tasks of the record that created it.
	Seq uint16
	// Results holds, for each edge (nil for none), the result a remote
	// dependency completed with, as its DependencyResolved brought it.
	Results [][]byte
}

// IsZero reports whether g says nothing (a task without a node).
func (g GraphInfo) IsZero() bool {
	return g.Workflow == "" && len(g.Edges) == 0 && g.Policy == 0 && g.Parent == "" && g.Seq == 0
}

// RemoteResult is the result the remote dependency of t's edge i completed
// with (nil for none).
func (s *State) RemoteResult(t *Task, i int) []byte {
	if rs := s.results[t]; i < len(rs) {
		return rs[i]
	}
	return nil
}

// BlockedOn lists the ids of its pending edges: what a BLOCKED task waits
// for.
func (g GraphInfo) BlockedOn() []string {
	var out []string
	for _, e := range g.Edges {
		if e.State == EdgePending {
			out = append(out, e.ID)
		}
	}
	return out
}

// Graph returns what t, a task of the state, has of the graph (a copy).
func (s *State) Graph(t *Task) GraphInfo {
	if !t.graph {
		return GraphInfo{}
	}
	n := s.graph[t]
	g := GraphInfo{Edges: slices.Clone(n.edges), Policy: n.policy, Parent: n.parent, Seq: n.seq, Results: slices.Clone(s.results[t])}
	if n.wf != nil {
		g.Workflow = n.wf.Key.ID
	}
	return g
}

// Edges returns t's dependencies without copying them (nil for none):
// read-only, valid until the next Apply.
func (s *State) Edges(t *Task) []Edge {
	if !t.graph {
		return nil
	}
	return s.graph[t].edges
}

// WorkflowOf returns the workflow t belongs to, or nil.
func (s *State) WorkflowOf(t *Task) *Workflow {
	if !t.graph {
		return nil
	}
	return s.graph[t].wf
}

// Depth is the longest chain of dependencies still in the state that ends
// at t (1 for a task without dependencies).
func (s *State) Depth(t *Task) int {
	if !t.graph {
		return 1
	}
	return int(s.graph[t].depth)
}

// Workflow returns a workflow of the state, or nil. Like a Task it is only
// valid until the next Apply and must not be modified.
func (s *State) Workflow(k WorkflowKey) *Workflow { return s.workflows[k] }

// Workflows calls fn with the workflows of namespace ("": all) whose key
// is after after, in key order, until fn returns false.
func (s *State) Workflows(namespace string, after WorkflowKey, fn func(*Workflow) bool) {
	keys := make([]WorkflowKey, 0, len(s.workflows))
	for k := range s.workflows {
		if (namespace == "" || k.Namespace == namespace) && cmpWorkflowKey(k, after) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, cmpWorkflowKey)
	for _, k := range keys {
		if !fn(s.workflows[k]) {
			return
		}
	}
}

func cmpWorkflowKey(a, b WorkflowKey) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}

// OrderKey is a task's place in the creation order: its creation LSN,
// then its place among the tasks of the record that created it.
type OrderKey struct {
	LSN uint64
	Seq uint16
}

// Less orders keys.
func (k OrderKey) Less(o OrderKey) bool {
	return k.LSN < o.LSN || k.LSN == o.LSN && k.Seq < o.Seq
}

// OrderKey is t's place in the creation order.
func (s *State) OrderKey(t *Task) OrderKey {
	k := OrderKey{LSN: t.CreatedLSN}
	if t.graph {
		k.Seq = s.graph[t].seq
	}
	return k
}

// nodeOf returns t's node, making one if it has none; HeldBytes counts
// every node from its making (nodeHeld). A node that holds only
// dependents is bare: it is not in a snapshot (its refs are rebuilt from
// the edges that make them), and it goes once it has none.
func (s *State) nodeOf(t *Task) *node {
	if t.graph {
		return s.graph[t]
	}
	if s.graph == nil {
		s.graph = make(map[*Task]*node)
	}
	n := &node{depth: 1, member: -1}
	s.graph[t] = n
	t.graph = true
	s.held += nodeHeld
	return n
}

// bare reports whether n holds nothing but dependents.
func (n *node) bare() bool {
	return len(n.edges) == 0 && n.policy == DepDead && n.parent == "" && n.seq == 0 && n.wf == nil
}

// workflowOf returns the workflow of key k, making it at at if there is
// none.
func (s *State) workflowOf(k WorkflowKey, at Time) *Workflow {
	w := s.workflows[k]
	if w == nil {
		if s.workflows == nil {
			s.workflows = make(map[WorkflowKey]*Workflow)
		}
		w = &Workflow{Key: k, CreatedAt: at}
		s.workflows[k] = w
		s.held += heldByWorkflow(k)
	}
	return w
}

// join makes t a member of w.
func (s *State) join(t *Task, n *node, w *Workflow) {
	n.wf = w
	n.member = int32(len(w.members))
	w.members = append(w.members, t)
	w.counts[t.State]++
	s.held += memberHeld
}

// startOf is the state a new task that depends on deps (tasks of the
// state) under policy starts in: BLOCKED while one of them has not ended,
// DEAD (with its failure reason) if one failed under DepDead, WAITING
// otherwise.
func (s *State) startOf(deps []string, remote []uint32, policy DepPolicy) (TaskState, string) {
	start := Waiting
	if len(remote) > 0 {
		start = Blocked // a remote dependency is pending until resolved
	}
	for i, id := range deps {
		if isRemote(remote, i) {
			continue
		}
		d := s.Task(id)
		switch edgeFor(d) {
		case EdgePending:
			start = Blocked
		case EdgeFailed:
			if policy == DepDead {
				return Dead, failedBecause(d)
			}
		}
	}
	return start, ""
}

// link gives t, a task just created (in its start state, from startOf),
// its node: its edges, with their states from the dependencies as they
// are now, its policy, parent, place in its record and workflow. A task
// created with none of them gets no node.
func (s *State) link(t *Task, deps []string, remote []uint32, policy DepPolicy, parent string, seq uint16, w *Workflow) {
	if len(deps) == 0 {
		policy = DepDead // a policy without dependencies says nothing
	}
	if len(deps) == 0 && policy == DepDead && parent == "" && seq == 0 && w == nil {
		return
	}
	n := s.nodeOf(t)
	n.policy, n.seq = policy, seq
	n.parent = packString(parent)
	s.held += int64(len(parent))
	if len(deps) > 0 {
		n.edges = make([]Edge, len(deps))
		n.refs = make([]int32, len(deps))
		for i, id := range packStrings(deps) {
			s.held += edgeHeld + int64(len(id))
			if isRemote(remote, i) {
				n.edges[i] = Edge{ID: id, State: EdgePending, Remote: true}
				n.pending++
				continue
			}
			d := s.Task(id)
			n.edges[i] = Edge{ID: id, State: edgeFor(d)}
			n.depth = max(n.depth, uint32(s.Depth(d))+1)
			if n.edges[i].State == EdgePending {
				n.pending++
				if t.State == Blocked {
					s.addRef(t, n, i, d)
				}
			}
		}
		s.watchRemote(t, n)
	}
	if w != nil {
		s.join(t, n, w)
	}
}

// isRemote reports whether index i is among remote (ascending indexes of
// the dependencies in another partition).
func isRemote(remote []uint32, i int) bool {
	_, ok := slices.BinarySearch(remote, uint32(i))
	return ok
}

// watchRemote indexes the pending remote edges of t (node n) while it is
// BLOCKED: the edges the partition's host watches.
func (s *State) watchRemote(t *Task, n *node) {
	if t.State != Blocked {
		return
	}
	for i, e := range n.edges {
		if e.Remote && e.State == EdgePending {
			if s.remote == nil {
				s.remote = make(map[string]map[*Task]int32)
			}
			m := s.remote[e.ID]
			if m == nil {
				m = make(map[*Task]int32, 1)
				s.remote[e.ID] = m
			}
			m[t] = int32(i)
		}
	}
}

// unwatchRemote takes edge e of t, a remote one, out of the index.
func (s *State) unwatchRemote(t *Task, e *Edge) {
	if m := s.remote[e.ID]; m != nil {
		delete(m, t)
		if len(m) == 0 {
			delete(s.remote, e.ID)
		}
	}
}

// RemoteEdges calls fn with each pending remote edge of a BLOCKED task
// (the dependent and the dependency's id), the edges the partition's host
// watches (docs/design/workflows.md, "Cluster mode"), in no order, until
// fn returns false.
func (s *State) RemoteEdges(fn func(dependent *Task, dependency string) bool) {
	for dep, m := range s.remote {
		for t := range m {
			if !fn(t, dep) {
				return
			}
		}
	}
}

// RemoteEdgeCount is the number of pending remote edges of BLOCKED
// tasks (what RemoteEdges calls fn with), counted over the dependencies.
func (s *State) RemoteEdgeCount() int {
	n := 0
	for _, m := range s.remote {
		n += len(m)
	}
	return n
}

// RemoteDependents calls fn with each BLOCKED task whose remote edge to
// dependency is pending, in no order, until fn returns false.
func (s *State) RemoteDependents(dependency string, fn func(*Task) bool) {
	for t := range s.remote[dependency] {
		if !fn(t) {
			return
		}
	}
}

// RemoteDependencies calls fn with the id of each task of another
// partition that a BLOCKED task waits for, in no order, until fn returns
// false.
func (s *State) RemoteDependencies(fn func(dependency string) bool) {
	for dep := range s.remote {
		if !fn(dep) {
			return
		}
	}
}

// edgeFor is the state of a new edge to d, a task of the state.
func edgeFor(d *Task) EdgeState {
	switch d.State {
	case Completed:
		return EdgeCompleted
	case Failed, Dead:
		return EdgeFailed
	}
	return EdgePending
}

// failedBecause is the failure reason of a dependent that d's failure
// ended.
func failedBecause(d *Task) string {
	return fmt.Sprintf("%s: task %s is %s", ReasonDependencyFailed, d.ID, d.State)
}

// checkDeps says why a task of namespace ns cannot depend on deps, or "".
// created holds the namespace of each task the same record creates before
// it, by id: it may name those too. A task depends only on tasks of its
// own namespace (their results are passed on to it).
func (s *State) checkDeps(ns string, deps []string, remote []uint32, created map[string]string) string {
	seen := make(map[string]bool, len(deps))
	for k, i := range remote {
		if int(i) >= len(deps) || k > 0 && remote[k-1] >= i {
			return fmt.Sprintf("remote dependency index %d is not an index of depends_on in ascending order", i)
		}
	}
	for i, id := range deps {
		if isRemote(remote, i) {
			switch {
			case id == "":
				return "a dependency id is empty"
			case seen[id]:
				return fmt.Sprintf("dependency %q is named twice", id)
			case s.Task(id) != nil || created[id] != "":
				return fmt.Sprintf("dependency %q is a task of this partition, not a remote one", id)
			}
			seen[id] = true
			continue
		}
		dns, ok := created[id]
		if d := s.Task(id); d != nil {
			dns, ok = d.Namespace, true
		}
		switch {
		case id == "":
			return "a dependency id is empty"
		case seen[id]:
			return fmt.Sprintf("dependency %q is named twice", id)
		case !ok:
			return fmt.Sprintf("dependency %q does not exist", id)
		case dns != ns:
			return fmt.Sprintf("dependency %q is in namespace %q, not %q", id, dns, ns)
		}
		seen[id] = true
	}
	return ""
}

// RetryRefusal says why t, a FAILED or DEAD task of the state, cannot be
// retried because of its dependencies, or "": under DepDead, a dependency
// that failed must be retried first.
func (s *State) RetryRefusal(t *Task) string {
	if len(s.Edges(t)) == 0 {
		return ""
	}
	_, _, why := s.evaluate(t)
	return why
}

// resolveDependents resolves the pending edges that name the tasks that ended in the
// record being applied (State.finishing), in the order they ended: each
// dependent is released once its last edge resolves, or ended by a failed
// one under DepDead, which ends its own dependents in turn. It is part of
// the apply of every record that can end a task, so it happens once per
// ending, at the record's LSN and time.
func (s *State) resolveDependents(lsn uint64, at Time) {
	for len(s.finishing) > 0 {
		x := s.finishing[0]
		s.finishing = s.finishing[1:]
		n := s.graph[x]
		refs := n.dependents
		n.dependents = nil
		if n.bare() {
			s.deleteNode(x)
		}
		// In creation order, whatever order the refs came to be in: a
		// replay and a restored snapshot settle them alike.
		slices.SortFunc(refs, func(a, b depRef) int {
			return cmp.Compare(s.packedKey(s.slab.at(a.pos)), s.packedKey(s.slab.at(b.pos)))
		})
		for _, ref := range refs {
			d := s.slab.at(ref.pos)
			dn := s.graph[d]
			e := &dn.edges[ref.edge]
			if d.State != Blocked || e.State != EdgePending || e.ID != x.ID {
				// A ref leaves with the edge or the dependent's BLOCKED
				// state (dropRefs): a bug if it did not.
				panic(fmt.Sprintf("state: task %q holds a ref of task %q (%s), edge %d, which is not a pending edge to it", x.ID, d.ID, d.State, ref.edge))
			}
			s.resolveEdge(d, dn, e, edgeFor(x), func() string { return failedBecause(x) }, lsn, at)
		}
	}
	s.finishing = s.finishing[:0]
}

// resolveEdge resolves e, a pending edge of d (BLOCKED, node dn), as to:
// d is released once its last edge resolves, or ended under DepDead by a
// failed one, for the reason because gives. Ending d puts it among the
// tasks to settle (State.finishing).
func (s *State) resolveEdge(d *Task, dn *node, e *Edge, to EdgeState, because func() string, lsn uint64, at Time) {
	if e.Remote {
		s.unwatchRemote(d, e)
	}
	e.State = to
	dn.pending--
	switch {
	case to == EdgeFailed && dn.policy == DepDead:
		d.progress().FailureReason = because()
		s.transition(d, Dead)
	case dn.pending == 0:
		d.NotBefore = max(d.NotBefore, at)
		s.transition(d, Waiting)
		s.queue(d).add(d)
		s.released = append(s.released, d)
	default:
		return
	}
	s.touchOther(d, lsn, at)
}

// Released lists the tasks the last record applied released (BLOCKED to
// WAITING), in order: their queues' long-polls may lease now. Like a Task,
// valid until the next Apply.
func (s *State) Released() []*Task { return s.released }

// Ended lists the tasks the last record applied ended (COMPLETED, FAILED
// or DEAD), the record's own and those it ended with it, in order: their
// waiters may answer now. Like a Task, valid until the next Apply.
func (s *State) Ended() []*Task { return s.ended }

// touchOther records that the record at lsn, which names another task,
// changed t: its history and last update, and its share of HeldBytes.
func (s *State) touchOther(t *Task, lsn uint64, at Time) {
	if h := t.LSNs(); h[len(h)-1] != lsn {
		t.touched(lsn)
	}
	if at > t.UpdatedAt {
		t.UpdatedAt = at
	}
	s.account(t)
}

// evaluate computes t's edges as a retry would leave them: those that did
// not complete take their dependencies' states as they are now, and under
// DepDead a dependency that failed refuses the retry. It returns the edge
// states and the pending count, or why t cannot be retried. It changes
// nothing.
func (s *State) evaluate(t *Task) ([]EdgeState, int32, string) {
	n := s.graph[t]
	out := make([]EdgeState, len(n.edges))
	pending := int32(0)
	for i, e := range n.edges {
		out[i] = e.State
		if e.State == EdgeCompleted {
			continue
		}
		if e.Remote {
			// Learned again from its partition: a dependency still failed
			// fails the edge again.
			out[i] = EdgePending
			pending++
			continue
		}
		d := s.Task(e.ID)
		if d == nil {
			if n.policy == DepDead {
				return nil, 0, fmt.Sprintf("its dependency %q no longer exists", e.ID)
			}
			out[i] = EdgeFailed
			continue
		}
		out[i] = edgeFor(d)
		switch {
		case out[i] == EdgePending:
			pending++
		case out[i] == EdgeFailed && n.policy == DepDead:
			return nil, 0, fmt.Sprintf("its dependency %s is %s: retry it first", d.ID, d.State)
		}
	}
	return out, pending, ""
}

// reblock sets t's edges to states (from evaluate) and, for each pending
// one, adds t to its dependency's dependents. It returns the state the
// retried task goes to.
func (s *State) reblock(t *Task, states []EdgeState, pending int32) TaskState {
	n := s.graph[t]
	for i := range n.edges {
		n.edges[i].State = states[i]
	}
	n.pending = pending
	if pending == 0 {
		return Waiting
	}
	for i := range n.edges {
		if states[i] == EdgePending && !n.edges[i].Remote {
			s.addRef(t, n, i, s.Task(n.edges[i].ID))
		}
	}
	return Blocked
}

// addRef adds edge i of t (node n), pending, to the dependents of its
// dependency d: t is BLOCKED on it.
func (s *State) addRef(t *Task, n *node, i int, d *Task) {
	dn := s.nodeOf(d)
	n.refs[i] = int32(len(dn.dependents))
	dn.dependents = append(dn.dependents, depRef{lsn: t.CreatedLSN, pos: t.pos, edge: uint32(i)})
}

// dropRefs takes the refs of t's pending edges out of its dependencies'
// dependents: t leaves BLOCKED while they are pending (killed, cancelled,
// or ended by another edge that failed). A dependency left bare and
// without dependents loses its node.
func (s *State) dropRefs(t *Task) {
	n := s.graph[t]
	for i, e := range n.edges {
		if e.State != EdgePending {
			continue
		}
		if e.Remote {
			s.unwatchRemote(t, &n.edges[i])
			continue
		}
		d := s.Task(e.ID)
		dn := s.graph[d]
		at, last := n.refs[i], len(dn.dependents)-1
		if moved := dn.dependents[last]; int(at) != last {
			dn.dependents[at] = moved
			s.graph[s.slab.at(moved.pos)].refs[moved.edge] = at
		}
		dn.dependents[last] = depRef{}
		dn.dependents = dn.dependents[:last]
		if last == 0 && dn.bare() {
			s.deleteNode(d)
		}
	}
}

// deleteNode forgets the node of t, which holds nothing but dependents.
func (s *State) deleteNode(t *Task) {
	delete(s.graph, t)
	t.graph = false
	s.held -= nodeHeld
}

// dropNode forgets t's node: t leaves the state.
func (s *State) dropNode(t *Task) {
	n := s.graph[t]
	s.held -= heldByNode(n)
	if rs, ok := s.results[t]; ok {
		s.held -= heldByResults(rs)
		delete(s.results, t)
	}
	if w := n.wf; w != nil {
		w.members[n.member] = nil
		w.holes++
		w.counts[t.State]--
		s.held -= memberHeld
		if w.Len() == 0 {
			delete(s.workflows, w.Key)
			s.held -= heldByWorkflow(w.Key)
		} else if w.holes > len(w.members)/2 {
			w.compact(s)
		}
	}
	delete(s.graph, t)
	t.graph = false
}

// compact takes the holes out of w's members.
func (w *Workflow) compact(s *State) {
	out := w.members[:0]
	for _, t := range w.members {
		if t != nil {
			s.graph[t].member = int32(len(out))
			out = append(out, t)
		}
	}
	clear(w.members[len(out):])
	w.members, w.holes = out, 0
}

// packString copies v into an allocation of its own, so that the state
// does not keep alive the memory of the record it came from.
func packString(v string) string {
	if v == "" {
		return ""
	}
	b := []byte(v)
	return unsafe.String(&b[0], len(b))
}

// packStrings copies vs into one allocation, as pack does a task's
// strings.
func packStrings(vs []string) []string {
	total := 0
	for _, v := range vs {
		total += len(v)
	}
	buf := make([]byte, total)
	out := make([]string, len(vs))
	off := 0
	for i, v := range vs {
		n := copy(buf[off:], v)
		if n > 0 {
			out[i] = unsafe.String(&buf[off], n)
		}
		off += n
	}
	return out
}

// What the graph holds, as HeldBytes accounts it (memory.go).
const (
	// nodeHeld is a node and its entry in State.graph: a dependency of a
	// BLOCKED task has one too, bare or not.
	nodeHeld = int64(unsafe.Sizeof(node{})) + besideHeld
	// edgeHeld is an edge, its place in refs, and the ref its dependency
	// keeps while it is pending.
	edgeHeld = int64(unsafe.Sizeof(Edge{}) + 4 + unsafe.Sizeof(depRef{}))
	// memberHeld is a workflow's entry for one member.
	memberHeld = 8
	// workflowHeld is a workflow and its entry in State.workflows.
	workflowHeld = int64(unsafe.Sizeof(Workflow{})) + besideHeld
)

// heldByNode is what n holds beside its task.
func heldByNode(n *node) int64 {
	h := nodeHeld + int64(len(n.parent))
	for _, e := range n.edges {
		h += edgeHeld + int64(len(e.ID))
	}
	return h
}

// heldByResults is what the remote results of a task hold.
func heldByResults(rs [][]byte) int64 {
	h := besideHeld + int64(len(rs))*int64(unsafe.Sizeof([]byte(nil)))
	for _, r := range rs {
		h += int64(len(r))
	}
	return h
}

// heldByWorkflow is what a workflow of key k holds, its members aside.
func heldByWorkflow(k WorkflowKey) int64 {
	return workflowHeld + int64(len(k.Namespace)+len(k.ID))
}

// checkSpawn says why the tasks parent's commit spawns cannot be created
// in s, or "" (none is fine).
func (s *State) checkSpawn(parent *Task, tasks, deliver []TaskCreated) string {
	wf := s.workflowID(parent)
	if len(tasks) > 0 {
		if why := checkCreations(s, tasks, wf); why != "" {
			return "spawn: " + why
		}
		if wf != "" && tasks[0].Namespace != parent.Namespace {
			return fmt.Sprintf("spawn: task 0 is in namespace %q, not the workflow's %q", tasks[0].Namespace, parent.Namespace)
		}
	}
	if why := s.checkDeliveries(deliver, tasks, wf, parent.Namespace); why != "" {
		return "spawn: " + why
	}
	return ""
}

// spawn creates the checked tasks parent's commit spawns, at lsn, in
// parent's workflow. A spawned task that depends on a task that ended in
// the same record found it ended: nothing is left to settle.
func (s *State) spawn(parent *Task, tasks, deliver []TaskCreated, lsn uint64) {
	w := s.WorkflowOf(parent)
	for i := range tasks {
		tasks[i].create(s, lsn, uint16(i), parent.ID, w)
	}
	s.deliver(deliver, s.workflowID(parent), parent.ID, lsn)
}

// workflowID is the id of t's workflow ("" for none).
func (s *State) workflowID(t *Task) string {
	if w := s.WorkflowOf(t); w != nil {
		return w.Key.ID
	}
	return ""
}
