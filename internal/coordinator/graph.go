package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// Submits with dependencies and workflow batches (docs/design/workflows.md):
// their ids are resolved, their graph checked and their tasks created in
// one record, or refused with nothing created.

// WorkflowRequestID is the request id a workflow's task without one is
// given: the workflow id and the task's index in its batch, with spaces,
// which no client's request id holds. A batch sent again with the same
// workflow id is answered with the tasks of the first.
func WorkflowRequestID(workflow string, i int) string {
	return fmt.Sprintf("workflow %s %d", workflow, i)
}

// SubmitWorkflow submits reqs as SubmitBatchIDs does, as workflow workflow
// ("" for none: a batch whose tasks may depend on each other): each
// DependsOn entry names a task of the partition, or the request id of a
// task of the batch. The new tasks are created in one record, all or none.
// A workflow's tasks are all in one namespace; a workflow id already used
// is answered with its tasks if the batch repeats its request ids (those
// derived from the workflow id included), and refused otherwise.
func (c *Coordinator) SubmitWorkflow(ctx context.Context, workflow string, reqs []SubmitRequest) ([]SubmitID, error) {
	out := make([]SubmitID, len(reqs))
	err := c.submitGraph(ctx, workflow, reqs, func(i int, id string, _ *state.Task, dup bool) {
		out[i] = SubmitID{ID: id, Duplicate: dup}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// graphed reports whether a batch needs the graph path: a workflow, or a
// task with dependencies.
func graphed(workflow string, reqs []SubmitRequest) bool {
	if workflow != "" {
		return true
	}
	for i := range reqs {
		if len(reqs[i].DependsOn) > 0 {
			return true
		}
	}
	return false
}

// checkGraphFields checks what a batch adds for the graph, without the
// state: the workflow id, each task's dependencies (ids, count) and
// policy, one namespace for a workflow.
func (l Limits) checkGraphFields(workflow string, reqs []SubmitRequest) error {
	if workflow != "" {
		if err := l.checkID("workflow_id", workflow, true); err != nil {
			return err
		}
	}
	for i := range reqs {
		r := &reqs[i]
		if workflow != "" && r.Namespace != reqs[0].Namespace {
			return ItemError(fieldErr("namespace", "%q is not the namespace of the workflow's first task, %q: a workflow's tasks are in one namespace", r.Namespace, reqs[0].Namespace), i)
		}
		if len(r.DependsOn) > l.MaxDependencies {
			return ItemError(fieldErr("depends_on", "%d dependencies is over the limit of %d per task (--max-dependencies)", len(r.DependsOn), l.MaxDependencies), i)
		}
		if r.OnDependencyFailure > state.DepRun {
			return ItemError(fieldErr("on_dependency_failure", "%d is not a policy (DEAD or RUN)", r.OnDependencyFailure), i)
		}
		seen := make(map[string]bool, len(r.DependsOn))
		for j, id := range r.DependsOn {
			field := fmt.Sprintf("depends_on[%d]", j)
			if err := l.checkID(field, id, true); err != nil {
				return ItemError(err, i)
			}
			if seen[id] {
				return ItemError(fieldErr(field, "%q is named twice", id), i)
			}
			seen[id] = true
		}
	}
	return nil
}

// graphPlan is a batch's graph, resolved against the state: for each
// request, the task it names (dup) or its place among the new ones, and
// each new task's dependencies by id.
type graphPlan struct {
	dup    []*state.Task // the existing task of a request, or nil
	rdup   []bool        // a request of another partition that names a task already (its id in ids)
	newIdx []int         // the requests of new tasks, in creation order
	ids    []string      // the id of each request's new task
	deps   [][]string    // each request's dependencies, by task id
	remote [][]uint32    // the indexes in deps[i] of tasks of other partitions
}

// submitGraph is submitBatch's path for a workflow batch or a batch with
// dependencies. answer gets each request's task id and, for a task of
// this partition, the task (nil for one of another partition).
func (c *Coordinator) submitGraph(ctx context.Context, workflow string, reqs []SubmitRequest, answer func(i int, id string, t *state.Task, dup bool)) error {
	l := c.cfg.Limits
	if len(reqs) == 0 {
		return fieldErr("requests", "at least one task is required")
	}
	if len(reqs) > l.MaxBatch {
		return fieldErr("requests", "%d tasks is over the limit of %d per batch; split the batch", len(reqs), l.MaxBatch)
	}
	now := c.cfg.Clock.Now()
	for i := range reqs {
		if err := c.validateSubmit(&reqs[i], now); err != nil {
			return ItemError(err, i)
		}
	}
	if err := l.checkGraphFields(workflow, reqs); err != nil {
		return err
	}
	if n := recordBytes(reqs); n > l.MaxAtomicBytes && len(reqs) > 1 {
		return &LimitError{Field: "requests", Size: n, Limit: l.MaxAtomicBytes}
	}
	// The request ids a batch names its tasks by: as given, before a
	// workflow's tasks without one get theirs.
	given := make(map[[2]string]int, len(reqs))
	for i := range reqs {
		if id := reqs[i].RequestID; id != "" {
			if _, ok := given[[2]string{reqs[i].Namespace, id}]; !ok {
				given[[2]string{reqs[i].Namespace, id}] = i
			}
		}
	}
	if workflow != "" {
		for i := range reqs {
			if reqs[i].RequestID == "" {
				reqs[i].RequestID = WorkflowRequestID(workflow, i)
			}
		}
	}
	if err := c.lock(); err != nil {
		return err
	}
	now = c.cfg.Clock.Now()
	p, refusal := c.planGraph(workflow, reqs, given, now)
	if refusal != nil {
		// The refusal may name tasks: answer once what it saw is durable.
		if err := c.writeAndWait(ctx); err != nil {
			return err
		}
		return refusal
	}
	var recs []state.Record
	if len(p.newIdx) > 0 {
		tasks := make([]state.TaskCreated, len(p.newIdx))
		for k, i := range p.newIdx {
			created(&tasks[k], &reqs[i], p.ids[i], now)
			tasks[k].DependsOn, tasks[k].OnDependencyFailure, tasks[k].Remote = p.deps[i], reqs[i].OnDependencyFailure, p.remote[i]
		}
		if err := c.admitTasksLocked(tasks); err != nil {
			c.mu.Unlock()
			return err
		}
		here, deliver := c.splitPlaced(tasks, reqs, p.newIdx)
		switch {
		case workflow == "" && len(tasks) == 1 && len(deliver) == 0:
			recs = append(recs, &tasks[0])
		case len(deliver) == 0:
			recs = append(recs, &state.TasksSubmitted{Workflow: workflow, Tasks: tasks, At: state.TimeOf(now)})
		default:
			r := &state.TasksSubmitted{Workflow: workflow, Tasks: here, Deliver: deliver, At: state.TimeOf(now)}
			if err := c.st.CheckSubmitted(r); err != nil {
				c.mu.Unlock()
				return fieldErr("requests", "the batch cannot be created: %v", err)
			}
			recs = append(recs, r)
		}
	}
	return c.writeAnswered(ctx, recs, func() {
		for i := range reqs {
			switch t := p.dup[i]; {
			case t != nil:
				answer(i, t.ID, c.st.Task(t.ID), true)
			default:
				answer(i, p.ids[i], c.st.Task(p.ids[i]), p.rdup[i])
			}
		}
	})
}

// planGraph resolves a batch against the state (c.mu held): retries, the
// workflow's rule (all new, or all its tasks again), each dependency, the
// order the new tasks are created in (dependencies first; a cycle is
// refused), their ids, depths and the workflow's size. It returns the
// plan, or the refusal to answer.
func (c *Coordinator) planGraph(workflow string, reqs []SubmitRequest, given map[[2]string]int, now time.Time) (*graphPlan, error) {
	l := c.cfg.Limits
	p := &graphPlan{dup: make([]*state.Task, len(reqs)), rdup: make([]bool, len(reqs)), ids: make([]string, len(reqs)), deps: make([][]string, len(reqs)),
		remote: make([][]uint32, len(reqs))}
	var wf *state.Workflow
	if workflow != "" {
		wf = c.st.Workflow(state.WorkflowKey{Namespace: reqs[0].Namespace, ID: workflow})
	}
	firstOf := make(map[[2]string]int, len(reqs))
	sameAs := make([]int, len(reqs)) // a request that repeats an earlier one of the batch: its index, else -1
	for i := range reqs {
		r := &reqs[i]
		sameAs[i] = -1
		if r.RequestID == "" {
			continue
		}
		k := [2]string{r.Namespace, r.RequestID}
		if c.remote(r) {
			// A task of another partition: its id is derived from its
			// request id, a pending delivery of it names it here, and a
			// workflow that exists here is a retry of its batch.
			id := DeliveredTaskID(r.Namespace, r.RequestID, r.Place)
			if d := c.st.DeliveringRequest(r.Namespace, r.RequestID); d != nil {
				if err := sameRequest(i, r, d.Task.TaskID, d.Task.Queue, d.Task.Kind, d.Task.Key, d.Task.Payload); err != nil {
					return nil, workflowReused(workflow, err, r.RequestID)
				}
				id = d.Task.TaskID
			} else if workflow == "" || wf == nil {
				id = ""
			}
			if id != "" {
				p.rdup[i], p.ids[i] = true, id
				continue
			}
		} else if t := c.st.ByRequest(r.Namespace, r.RequestID); t != nil {
			if err := sameRequest(i, r, t.ID, t.Queue, t.Kind, c.st.KeyOf(t), t.Payload); err != nil {
				return nil, workflowReused(workflow, err, r.RequestID)
			}
			p.dup[i] = t
			continue
		}
		if j, ok := firstOf[k]; ok {
			if err := sameRequest(i, r, fmt.Sprintf("of requests[%d]", j), reqs[j].Queue, reqs[j].Kind, reqs[j].Key, reqs[j].Payload); err != nil {
				return nil, err
			}
			sameAs[i] = j
			continue
		}
		firstOf[k] = i
	}
	if workflow != "" {
		for i, t := range p.dup {
			switch {
			case p.rdup[i]:
				// Its partition holds it.
			case wf != nil && (t == nil || c.st.WorkflowOf(t) != wf):
				return nil, fieldErr("workflow_id", "workflow %q exists already with other tasks (requests[%d] is not one of them): a retry repeats its batch, and a new workflow needs a new id", workflow, i)
			case wf == nil && t != nil:
				return nil, fieldErr(fmt.Sprintf("requests[%d].request_id", i), "%q names task %s, which is not of workflow %q: a workflow's tasks are new", reqs[i].RequestID, t.ID, workflow)
			}
		}
	}
	// Each dependency: a request of the batch (the task it names or will
	// create) or a task of the state.
	refs := make([][]int, len(reqs)) // the batch requests each new request depends on
	for i := range reqs {
		if p.dup[i] != nil || p.rdup[i] || sameAs[i] >= 0 {
			continue
		}
		for j, id := range reqs[i].DependsOn {
			field := fmt.Sprintf("requests[%d].depends_on[%d]", i, j)
			if k, ok := given[[2]string{reqs[i].Namespace, id}]; ok {
				for sameAs[k] >= 0 {
					k = sameAs[k]
				}
				if c.placeOf(&reqs[k]) != c.placeOf(&reqs[i]) {
					// In another partition than the task's: a remote edge
					// there.
					p.remote[i] = append(p.remote[i], uint32(len(p.deps[i])))
				}
				if p.rdup[k] {
					p.deps[i] = append(p.deps[i], p.ids[k])
					continue
				}
				if t := p.dup[k]; t != nil {
					p.deps[i] = append(p.deps[i], t.ID)
					continue
				}
				if k == i {
					return nil, fieldErr(field, "%q names the task itself: a task cannot depend on itself", id)
				}
				refs[i] = append(refs[i], k)
				p.deps[i] = append(p.deps[i], "") // its id once known
				continue
			}
			if slices.Contains(reqs[i].Remote, id) {
				// A task of another partition than the task's, checked to
				// exist there.
				if c.st.Task(id) != nil && !c.remote(&reqs[i]) {
					return nil, fieldErr(field, "task %s is a task of this partition, not of another", id)
				}
				p.remote[i] = append(p.remote[i], uint32(len(p.deps[i])))
				p.deps[i] = append(p.deps[i], id)
				continue
			}
			if c.remote(&reqs[i]) {
				// A task of the partition the task goes to, checked to
				// exist there.
				p.deps[i] = append(p.deps[i], id)
				continue
			}
			t := c.st.Task(id)
			switch {
			case t == nil:
				return nil, fieldErr(field, "%q is neither a task of this server nor the request_id of a task of this batch", id)
			case t.Namespace != reqs[i].Namespace:
				return nil, fieldErr(field, "task %s is in namespace %q, not %q: a task depends only on tasks of its namespace", id, t.Namespace, reqs[i].Namespace)
			}
			p.deps[i] = append(p.deps[i], t.ID)
		}
	}
	order, cycle := topoOrder(len(reqs), refs, func(i int) bool { return p.dup[i] == nil && !p.rdup[i] && sameAs[i] < 0 })
	if cycle != nil {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = fmt.Sprintf("requests[%d]", i)
		}
		return nil, fieldErr(fmt.Sprintf("requests[%d].depends_on", cycle[0]), "a cycle: %s", strings.Join(names, " → "))
	}
	pending := make(map[string]struct{}, len(order))
	depth := make([]int, len(reqs))
	for _, i := range order {
		switch r := &reqs[i]; {
		case !c.remote(r):
			p.ids[i] = c.newTaskID(now, pending)
		case r.RequestID != "":
			p.ids[i] = DeliveredTaskID(r.Namespace, r.RequestID, r.Place)
		default:
			p.ids[i] = c.newRemoteID(now, r.Place, pending)
		}
		k := 0
		for j := range p.deps[i] {
			if p.deps[i][j] == "" {
				p.deps[i][j] = p.ids[refs[i][k]]
				depth[i] = max(depth[i], depth[refs[i][k]])
				k++
			} else if d := c.st.Task(p.deps[i][j]); d != nil {
				// A remote dependency counts as a chain of one: its depth
				// is its partition's to know.
				depth[i] = max(depth[i], c.st.Depth(d))
			} else {
				depth[i] = max(depth[i], 1)
			}
		}
		depth[i]++
		if depth[i] > l.MaxWorkflowDepth {
			return nil, fieldErr(fmt.Sprintf("requests[%d].depends_on", i), "a chain of %d tasks is over the limit of %d (--max-workflow-depth)", depth[i], l.MaxWorkflowDepth)
		}
	}
	p.newIdx = order
	for i := range reqs {
		if j := sameAs[i]; j >= 0 {
			p.ids[i] = p.ids[j]
		}
	}
	if workflow != "" && len(order) > l.MaxWorkflowTasks {
		return nil, fieldErr("requests", "a workflow of %d tasks is over the limit of %d (--max-workflow-tasks)", len(order), l.MaxWorkflowTasks)
	}
	for _, i := range order {
		if reqs[i].RequestID != "" {
			// Not a retry: its deadline must be ahead (validateSubmit left
			// that to here).
			if err := l.checkDeadline(&reqs[i], now, true); err != nil {
				return nil, ItemError(err, i)
			}
		}
	}
	return p, nil
}

// workflowReused words the refusal of a workflow batch whose derived
// request id names another task: the workflow id was used for other tasks.
func workflowReused(workflow string, err error, requestID string) error {
	if workflow == "" || !strings.HasPrefix(requestID, "workflow ") {
		return err
	}
	return fieldErr("workflow_id", "workflow %q was submitted before with other tasks: a retry repeats its batch exactly, and a new workflow needs a new id", workflow)
}

// topoOrder orders the n requests that keep says are new so that each
// comes after those it refers to (refs[i]), earlier requests first among
// those that are free; it returns the requests of a cycle instead if there
// is one.
func topoOrder(n int, refs [][]int, keep func(int) bool) (order, cycle []int) {
	waiting := make([]int, n) // refs not yet placed
	users := make([][]int, n) // the requests that refer to each
	free := make([]bool, n)   // placeable, not yet placed
	placed := make([]bool, n)
	for i := range n {
		if !keep(i) {
			placed[i] = true
			continue
		}
		waiting[i] = len(refs[i])
		for _, k := range refs[i] {
			users[k] = append(users[k], i)
		}
		free[i] = waiting[i] == 0
	}
	for next := 0; ; {
		// The lowest free request: deterministic, and the batch's order
		// where it has no say.
		for next < n && !free[next] {
			next++
		}
		if next == n {
			break
		}
		i := next
		free[i], placed[i] = false, true
		order = append(order, i)
		for _, u := range users[i] {
			if waiting[u]--; waiting[u] == 0 {
				free[u] = true
				next = min(next, u)
			}
		}
	}
	for i := range n {
		if !placed[i] {
			return nil, findCycle(i, refs, placed)
		}
	}
	return order, nil
}

// findCycle returns a cycle among the unplaced requests, from start: each
// unplaced request refers to another unplaced one, so following the refs
// must come back.
func findCycle(start int, refs [][]int, placed []bool) []int {
	at := map[int]int{}
	var path []int
	for i := start; ; {
		if k, ok := at[i]; ok {
			return append(path[k:], i)
		}
		at[i] = len(path)
		path = append(path, i)
		for _, k := range refs[i] {
			if !placed[k] {
				i = k
				break
			}
		}
	}
}

// dependencyResults returns t's workflow and what its lease says of its
// dependencies: each one's state and, for those that completed, their
// results, up to the payload limit together (the rest marked omitted).
// c.mu must be held.
func (c *Coordinator) dependencyResults(t *state.Task) (string, []DependencyResult) {
	wf := ""
	if w := c.st.WorkflowOf(t); w != nil {
		wf = w.Key.ID
	}
	edges := c.st.Edges(t)
	if len(edges) == 0 {
		return wf, nil
	}
	out := make([]DependencyResult, len(edges))
	room := c.cfg.Limits.MaxPayloadBytes
	for i, e := range edges {
		out[i].TaskID = e.ID
		var result []byte
		if e.Remote {
			// What its DependencyResolved said.
			switch e.State {
			case state.EdgeCompleted:
				out[i].State, result = state.Completed, c.st.RemoteResult(t, i)
			case state.EdgeFailed:
				out[i].State = state.Failed
			}
		} else if d := c.st.Task(e.ID); d != nil {
			out[i].State, result = d.State, d.Result
		}
		if out[i].State != state.Completed {
			continue
		}
		if len(result) > room {
			out[i].Omitted = true
			continue
		}
		room -= len(result)
		out[i].Result = result
	}
	return wf, out
}

// checkSpawn checks what a commit of t spawns (c.mu held) and plans it:
// it returns the TaskCreated records of the new tasks (nil for none) and
// the id of each spawned request's task, or the refusal. The tasks are in
// t's namespace (a spawn given none is in it) and, with t's workflow,
// within its limits; their dependencies name each other by request id,
// tasks of the partition (t among them) by id.
func (c *Coordinator) checkSpawn(t *state.Task, spawn []SubmitRequest, now time.Time) (here, deliver []state.TaskCreated, ids []string, err error) {
	if len(spawn) == 0 {
		return nil, nil, nil, nil
	}
	l := c.cfg.Limits
	if len(spawn) > l.MaxSpawn {
		return nil, nil, nil, fieldErr("spawn", "%d tasks is over the limit of %d per commit (--max-spawn)", len(spawn), l.MaxSpawn)
	}
	for i := range spawn {
		r := &spawn[i]
		if r.Namespace == "" {
			r.Namespace = t.Namespace
		}
		if r.Namespace != t.Namespace {
			return nil, nil, nil, spawnErr(fieldErr("namespace", "%q is not the namespace of the task that spawns it, %q", r.Namespace, t.Namespace), i)
		}
		if err := l.validateSubmit(r, now); err != nil {
			return nil, nil, nil, spawnErr(err, i)
		}
	}
	if err := l.checkGraphFields("", spawn); err != nil {
		return nil, nil, nil, spawnErr(err, -1)
	}
	if n := recordBytes(spawn); n > l.MaxAtomicBytes {
		return nil, nil, nil, &LimitError{Field: "spawn", Size: n, Limit: l.MaxAtomicBytes}
	}
	given := make(map[[2]string]int, len(spawn))
	for i := range spawn {
		if id := spawn[i].RequestID; id != "" {
			if _, ok := given[[2]string{spawn[i].Namespace, id}]; !ok {
				given[[2]string{spawn[i].Namespace, id}] = i
			}
		}
	}
	p, err := c.planGraph("", spawn, given, now)
	if err != nil {
		return nil, nil, nil, spawnErr(err, -1)
	}
	if w := c.st.WorkflowOf(t); w != nil && w.Len()+len(p.newIdx) > l.MaxWorkflowTasks {
		return nil, nil, nil, fieldErr("spawn", "workflow %s would have %d tasks, over the limit of %d (--max-workflow-tasks)", w.Key.ID, w.Len()+len(p.newIdx), l.MaxWorkflowTasks)
	}
	tasks := make([]state.TaskCreated, len(p.newIdx))
	for k, i := range p.newIdx {
		created(&tasks[k], &spawn[i], p.ids[i], now)
		tasks[k].DependsOn, tasks[k].OnDependencyFailure, tasks[k].Remote = p.deps[i], spawn[i].OnDependencyFailure, p.remote[i]
	}
	if err := c.admitTasksLocked(tasks); err != nil {
		return nil, nil, nil, err
	}
	ids = make([]string, len(spawn))
	for i := range spawn {
		if d := p.dup[i]; d != nil {
			ids[i] = d.ID
		} else {
			ids[i] = p.ids[i]
		}
	}
	here, deliver = c.splitPlaced(tasks, spawn, p.newIdx)
	return here, deliver, ids, nil
}

// spawnErr names the spawn in the field of err: "requests[i]." (from
// planGraph) or item i becomes "spawn[i].".
func spawnErr(err error, i int) error {
	rename := func(f string) string {
		if i >= 0 {
			return fmt.Sprintf("spawn[%d].%s", i, f)
		}
		if rest, ok := strings.CutPrefix(f, "requests"); ok {
			return "spawn" + rest
		}
		return f
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{Field: rename(fe.Field), Problem: fe.Problem}
	}
	var le *LimitError
	if errors.As(err, &le) {
		return &LimitError{Field: rename(le.Field), Size: le.Size, Limit: le.Limit}
	}
	return err
}

// recordBytes bounds what the tasks of reqs take in the one record that
// creates them: their payloads, names and dependencies, and a fixed part
// each (ids, times, policy) that an encoded TaskCreated stays under.
// MaxAtomicBytes bounds it, below the log's record limit, so that a record
// the coordinator appends always fits the log.
func recordBytes(reqs []SubmitRequest) int {
	n := 0
	for i := range reqs {
		r := &reqs[i]
		n += 160 + len(r.Payload) + len(r.Namespace) + len(r.Queue) + len(r.RequestID) + len(r.Kind) + len(r.Key) +
			len(r.Trace.Parent) + len(r.Trace.State)
		for _, d := range r.DependsOn {
			n += 3 + max(len(d), 64) // a request id becomes a task id
		}
	}
	return n
}
