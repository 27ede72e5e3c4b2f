package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Invariants checks every invariant of the state and its derived indexes
// (docs/design/state-machine.md, "Invariants"; among them: a committed task never
// returns to waiting, and at most one execution of a task commits). It
// returns all violations joined, or nil.
// It is O(n) and meant for tests and for `verify` tools, not the hot path.
func (s *State) Invariants() error {
	var errs []error
	bad := func(t *Task, format string, args ...any) {
		errs = append(errs, fmt.Errorf("task %q: %s", t.ID, fmt.Sprintf(format, args...)))
	}
	var counts [NumStates]int
	leased, schedulable := 0, 0
	indexed := 0
	var held int64 // a recount of HeldBytes (heldErrors)
	s.tasks.all(func(tb *posTable, t *Task) {
		indexed++
		if n := heldByProgress(t.Progress); int64(t.Progress.held) != n {
			bad(t, "its progress is accounted %d bytes, its content %d", t.Progress.held, n)
		}
		held += heldByTask(t)
		if tb != s.tasks.table(hashString(t.ID)) || s.Task(t.ID) != t {
			bad(t, "indexed under the wrong id hash")
		}
		checkTask(t, s.lastLSN, func(format string, args ...any) { bad(t, format, args...) })
		if s.slab.isFinished(t.pos) != t.State.Terminal() {
			bad(t, "is %s, but its slab position's finished bit is %v", t.State, s.slab.isFinished(t.pos))
		}
		if t.State >= Waiting && t.State < NumStates {
			counts[t.State]++
		}
		var cur *Execution
		if t.cur >= 0 && int(t.cur) < len(t.Executions) {
			cur = t.CurrentLease()
		}
		if cur != nil {
			leased++
			if s.byLease(cur.LeaseID) != t {
				bad(t, "lease %q missing from the lease index", cur.LeaseID)
			}
			if t.heapIdx < 0 || int(t.heapIdx) >= s.expiry.Len() || s.expiry.items[t.heapIdx] != t {
				bad(t, "leased task missing from the expiry index")
			}
		}
		if t.Schedulable() {
			schedulable++
			qi := s.queues[QueueKey{t.Namespace, t.Queue}]
			i := int(t.heapIdx)
			switch {
			case qi == nil || i < 0:
				bad(t, "schedulable task missing from its queue index")
			case t.delayed:
				if i >= qi.delayed.Len() || qi.delayed.items[i] != t {
					bad(t, "schedulable task missing from its queue index")
				}
			case t.keyed:
				// keyErrors checks its key's heap.
			case i >= qi.ready.Len() || qi.ready.slots[i].pos != t.pos:
				bad(t, "schedulable task missing from its queue index")
			case qi.ready.slots[i] != qi.ready.slotOf(t):
				bad(t, "ready heap entry holds another sort key than its task's")
			}
		}
		if t.RequestID != "" && s.ByRequest(t.Namespace, t.RequestID) != t {
			bad(t, "request id %q missing from its index", t.RequestID)
		}
		if qi := s.queues[*t.QueueKey]; qi != nil && t.Schedulable() && t.QueueKey != qi.shared {
			bad(t, "schedulable task does not share its queue's key")
		}
		if sp := s.policies[*t.Policy]; sp != nil && sp != t.Policy {
			bad(t, "task does not share the state's copy of its policy")
		}
		if t.Progress == nil {
			bad(t, "no Progress (an empty one is noProgress)")
		}
	})
	if !noProgress.empty() || noProgress.first != ([1]Execution{}) {
		errs = append(errs, fmt.Errorf("the shared empty Progress was written: %+v", noProgress))
	}
	errs = append(errs, s.orderErrors()...)
	errs = append(errs, s.queueErrors()...)
	errs = append(errs, s.deadlineErrors()...)
	errs = append(errs, s.besideErrors()...)
	errs = append(errs, s.scheduleErrors()...)
	errs = append(errs, s.keyErrors()...)
	errs = append(errs, s.graphErrors()...)
	errs = append(errs, s.holdErrors()...)
	errs = append(errs, s.deliveryErrors()...)
	if counts != s.counts {
		errs = append(errs, fmt.Errorf("state counts %v, want %v", s.counts, counts))
	}
	if s.leases.len() != leased || s.expiry.Len() != leased {
		errs = append(errs, fmt.Errorf("%d leased tasks, lease index %d, expiry index %d", leased, s.leases.len(), s.expiry.Len()))
	}
	queued := 0
	for _, qi := range s.queues {
		queued += qi.len()
	}
	if queued != schedulable {
		errs = append(errs, fmt.Errorf("%d schedulable tasks, %d in queue indexes", schedulable, queued))
	}
	s.requests.all(func(tb *posTable, t *Task) {
		if s.Task(t.ID) != t || t.RequestID == "" || tb != s.requests.table(hashRequest(t.Namespace, t.RequestID)) {
			errs = append(errs, fmt.Errorf("request index entry points at the wrong task %q", t.ID))
		}
	})
	errs = append(errs, s.slabErrors(indexed)...)
	errs = append(errs, s.tasks.countErrors()...)
	errs = append(errs, s.requests.countErrors()...)
	s.leases.all(func(h uint64, t *Task) {
		if s.Task(t.ID) != t || t.CurrentLease() == nil || h != hashString(t.CurrentLease().LeaseID) {
			errs = append(errs, fmt.Errorf("lease index entry %#x points at the wrong task %q", h, t.ID))
		}
	})
	errs = append(errs, s.heldErrors(held)...)
	return errors.Join(errs...)
}

// heldErrors checks HeldBytes against a recount from the content: the
// tasks' shares (summed by Invariants, which checked each progress's),
// and the queues with tasks and the schedules.
func (s *State) heldErrors(held int64) []error {
	var errs []error
	for k, qi := range s.queues {
		if qi.total() > 0 {
			held += heldByQueue(k)
		}
	}
	for _, sc := range s.schedules {
		held += heldBySchedule(sc)
	}
	for _, tc := range s.traces {
		held += heldByTrace(tc)
	}
	for _, r := range s.reports {
		held += heldByReport(r.Report)
	}
	held += s.heldByKeys()
	held += s.graphHeld()
	for i := range s.deliveries.list {
		held += deliveryHeld(&s.deliveries.list[i].Task)
	}
	if held != s.held {
		errs = append(errs, fmt.Errorf("HeldBytes is %d, a recount of the content %d", s.held, held))
	}
	return errs
}

// slabErrors checks that the slab holds the indexed tasks and nothing
// else: as many tasks as the id index (which found indexed), and only
// zeroed tasks at its free positions.
func (s *State) slabErrors(indexed int) []error {
	var errs []error
	if n := s.slab.len(); n != s.tasks.n || n != indexed {
		errs = append(errs, fmt.Errorf("slab holds %d tasks, the id index counts %d and holds %d", n, s.tasks.n, indexed))
	}
	for _, pos := range s.slab.free {
		if t := s.slab.at(pos); t.ID != "" || t.QueueKey != nil || t.Payload != nil || t.Progress != nil || t.pos != pos || s.slab.isFinished(pos) {
			errs = append(errs, fmt.Errorf("free slab position %d holds task %q", pos, t.ID))
		}
	}
	return errs
}

// scheduleErrors checks every schedule on its own and its key.
func (s *State) scheduleErrors() []error {
	var errs []error
	watched := map[string]int{}
	for k, sc := range s.schedules {
		if sc.LastTask != "" {
			watched[sc.LastTask]++
		}
		if sc.Key != k {
			errs = append(errs, fmt.Errorf("schedule %s is indexed under %s", sc.Key, k))
		}
		if why := checkSchedule(sc); why != "" {
			errs = append(errs, fmt.Errorf("schedule %s: %s", k, why))
		}
	}
	if !maps.Equal(watched, s.watched) {
		errs = append(errs, fmt.Errorf("schedules watch tasks %v, counted %v", watched, s.watched))
	}
	return errs
}

// queueErrors checks each queue's statistics against a recount over its
// tasks: counts by state, leases, and the waiting-age index.
func (s *State) queueErrors() []error {
	type recount struct {
		counts [NumStates]int
		leases int
		due    map[int64]int32
	}
	want := make(map[QueueKey]*recount)
	s.tasks.all(func(_ *posTable, t *Task) {
		k := QueueKey{t.Namespace, t.Queue}
		r := want[k]
		if r == nil {
			r = &recount{due: make(map[int64]int32)}
			want[k] = r
		}
		if t.State < NumStates {
			r.counts[t.State]++
		}
		if t.cur >= 0 {
			r.leases++
		}
		if t.State == Waiting {
			r.due[dueMillis(t)]++
		}
	})
	var errs []error
	for k, r := range want {
		qi := s.queues[k]
		if qi == nil {
			errs = append(errs, fmt.Errorf("queue %v has tasks but no index", k))
			continue
		}
		if qi.key != k {
			errs = append(errs, fmt.Errorf("queue %v is indexed under %v", qi.key, k))
		}
		if qi.counts != r.counts || qi.leases != r.leases {
			errs = append(errs, fmt.Errorf("queue %v counts %v and %d leases, recount %v and %d", k, qi.counts, qi.leases, r.counts, r.leases))
		}
		if len(qi.ages.slots) != len(r.due) || len(qi.ages.items) != len(r.due) {
			errs = append(errs, fmt.Errorf("queue %v waiting-age index has %d slots and %d heap entries, recount %d", k, len(qi.ages.slots), len(qi.ages.items), len(r.due)))
		}
		for ms, n := range r.due {
			if sl := qi.ages.slots[ms]; sl == nil || sl.count != n || int(sl.pos) >= len(qi.ages.items) || qi.ages.items[sl.pos] != sl {
				errs = append(errs, fmt.Errorf("queue %v waiting-age index is wrong at %d ms (want %d tasks)", k, ms, n))
			}
		}
		for i := 1; i < len(qi.ages.items); i++ {
			if qi.ages.items[(i-1)/2].ms > qi.ages.items[i].ms {
				errs = append(errs, fmt.Errorf("queue %v waiting-age heap is out of order at %d", k, i))
				break
			}
		}
		for i := 1; i < len(qi.ready.slots); i++ {
			if qi.ready.slots[i].before(qi.ready.slots[(i-1)/2]) {
				errs = append(errs, fmt.Errorf("queue %v ready heap is out of order at %d", k, i))
				break
			}
		}
	}
	for _, qi := range s.queues {
		errs = append(errs, qi.limiterErrors()...)
	}
	for k, qi := range s.queues {
		if want[k] == nil && (qi.total() != 0 || qi.leases != 0 || len(qi.ages.items) != 0) {
			errs = append(errs, fmt.Errorf("queue %v has no task but counts %v", k, qi.counts))
		}
	}
	return errs
}

// orderErrors checks the creation order: every task exactly once, by
// increasing CreatedLSN, and the count of holes.
func (s *State) orderErrors() []error {
	var errs []error
	holes, prev := 0, uint64(0)
	for i, e := range s.order {
		if e == 0 {
			holes++
			continue
		}
		t := s.slab.at(e - 1)
		if s.Task(t.ID) != t {
			errs = append(errs, fmt.Errorf("creation order entry %d (task %q) is not in the task table", i, t.ID))
		}
		if t.CreatedLSN < prev {
			errs = append(errs, fmt.Errorf("creation order entry %d (task %q) has lsn %d after lsn %d", i, t.ID, t.CreatedLSN, prev))
		}
		prev = t.CreatedLSN
	}
	if holes != s.holes || len(s.order)-holes != s.Len() {
		errs = append(errs, fmt.Errorf("creation order has %d entries and %d holes (counted %d), for %d tasks",
			len(s.order), holes, s.holes, s.Len()))
	}
	return errs
}

// checkTask reports, through bad, every violation that can be seen in one
// task alone: its state, its current lease, its executions and commits, its
// record history. Invariants and Loader share it.
func checkTask(t *Task, lastLSN uint64, bad func(format string, args ...any)) {
	if t.cur < -1 || int(t.cur) >= len(t.Executions) {
		bad("current lease index %d is outside its %d executions", t.cur, len(t.Executions))
		return
	}
	cur := t.CurrentLease()
	switch t.State {
	case Waiting, Completed, Failed, Dead, Blocked:
		if cur != nil {
			bad("%s task holds lease %q", t.State, cur.LeaseID)
		}
	case Leased:
		if cur == nil {
			bad("LEASED task has no lease")
		}
	case Committed:
	default:
		bad("invalid state %d", t.State)
	}
	if cur != nil {
		if int(t.cur) != len(t.Executions)-1 {
			bad("current lease is not the latest execution")
		}
		switch cur.Status {
		case ExecLeased, ExecInProgress, ExecCommitted:
		default:
			bad("current execution is %s", cur.Status)
		}
	}
	if t.AttemptBase > t.Attempt {
		bad("attempt base %d is after attempt %d", t.AttemptBase, t.Attempt)
	}
	commits := 0
	// attempts counts the executions that were not snoozed: a snoozed one
	// gives its attempt number to the next.
	attempts := uint32(0)
	for i, e := range t.Executions {
		if e.Attempt != attempts+1 {
			bad("execution %d has attempt %d, after %d counted attempts", i, e.Attempt, attempts)
		}
		if e.Status != ExecSnoozed {
			attempts++
		}
		if e.Status < ExecLeased || e.Status > ExecSnoozed {
			bad("execution %d has invalid status %d", i, e.Status)
		}
		if e.Status == ExecSnoozed && e.CommittedAt != 0 {
			bad("execution %d committed and was snoozed", i)
		}
		if e.CommittedAt != 0 {
			commits++
			if e.LeaseID != t.CommittedBy {
				bad("execution %q committed but the task names %q", e.LeaseID, t.CommittedBy)
			}
		}
		if i != int(t.cur) && (e.Status == ExecLeased || e.Status == ExecInProgress) {
			bad("execution %d is %s without holding the lease", i, e.Status)
		}
		if e.Refused&^knownActions != 0 {
			bad("execution %d has refused actions %#x, beyond the known ones %#x", i, e.Refused, knownActions)
		}
		if i == int(t.cur) && e.Refused != 0 {
			bad("execution %d holds the lease but has refused actions %#x recorded", i, e.Refused)
		}
	}
	if t.Attempt != attempts {
		bad("attempt %d but %d executions that were not snoozed", t.Attempt, attempts)
	}
	if commits > 1 {
		bad("%d executions committed; at most one may", commits)
	}
	mustCommit := t.State == Committed || t.State == Completed
	if mustCommit && commits != 1 {
		bad("%s with %d commits", t.State, commits)
	}
	if (t.State == Waiting || t.State == Leased || t.State == Failed || t.State == Blocked) && commits != 0 {
		bad("%s after a commit: a committed task never returns to waiting", t.State)
	}
	lsns := t.LSNs()
	if len(lsns) == 0 || lsns[0] != t.CreatedLSN {
		bad("record history does not start at its creation lsn %d", t.CreatedLSN)
	}
	for i := 1; i < len(lsns); i++ {
		if lsns[i] <= lsns[i-1] {
			bad("record history is not increasing at %d", i)
			break
		}
	}
	if n := len(lsns); n > 0 && lsns[n-1] > lastLSN {
		bad("record history names lsn %d, after the last applied lsn %d", lsns[n-1], lastLSN)
	}
}

// Export is a canonical, deep copy of the logical state: equal for two
// states exactly when they hold the same tasks and positions, whatever the
// layout of their derived indexes. Tests compare live and replayed states
// with it.
type Export struct {
	LastLSN uint64
	Epoch   uint64
	Tasks   []*Task
	// Deadlines holds the deadline of each task that has one in force, by
	// task id (nil when none has); Traces and Reports likewise the trace
	// contexts and progress reports kept beside tasks.
	Deadlines map[string]Time
	Traces    map[string]TraceContext
	Reports   map[string]LastReport
	// Keys holds the key of each task that has one, by task id.
	Keys map[string]string
	// Queues holds what the state keeps of its queues beyond their tasks.
	Queues []QueueImage
	// Schedules holds every schedule, ordered by key.
	Schedules []*Schedule
	// Graphs holds what each task that has any has of the graph, by task
	// id (nil when none has); Workflows every workflow, ordered by key.
	Graphs    map[string]GraphInfo
	Workflows []WorkflowImage
	// Deliveries holds the pending deliveries in record order (nil when
	// none is).
	Deliveries []Delivery
}

// Export returns the canonical copy of s.
func (s *State) Export() Export {
	e := Export{LastLSN: s.lastLSN, Epoch: s.epoch, Tasks: make([]*Task, 0, s.Len()), Queues: s.queueImages(),
		Schedules: s.scheduleImages(), Workflows: s.workflowImages(), Deliveries: slices.Clone(s.deliveries.list)}
	for _, qi := range s.queues {
		if qi.keys == nil {
			continue
		}
		for t, key := range qi.keys.taskKey {
			if e.Keys == nil {
				e.Keys = make(map[string]string)
			}
			e.Keys[t.ID] = key
		}
	}
	for t := range s.graph {
		if g := s.graphInfo(t); !g.IsZero() {
			if e.Graphs == nil {
				e.Graphs = make(map[string]GraphInfo)
			}
			e.Graphs[t.ID] = g
		}
	}
	s.Scan(0, func(t *Task) bool {
		e.Tasks = append(e.Tasks, t.Clone())
		return true
	})
	for t, d := range s.deadlines.m {
		if e.Deadlines == nil {
			e.Deadlines = make(map[string]Time, len(s.deadlines.m))
		}
		e.Deadlines[t.ID] = d.at
	}
	for t, tc := range s.traces {
		if e.Traces == nil {
			e.Traces = make(map[string]TraceContext, len(s.traces))
		}
		e.Traces[t.ID] = tc
	}
	for t, r := range s.reports {
		if e.Reports == nil {
			e.Reports = make(map[string]LastReport, len(s.reports))
		}
		e.Reports[t.ID] = r
	}
	return e
}
