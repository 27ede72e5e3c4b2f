package state

import (
	"container/heap"
	"errors"
	"fmt"
	"reflect"
)

// ErrPrecondition is wrapped by every error Apply returns: the record does
// not fit the state. During replay that means a corrupt or foreign log;
// during live operation it is a bug, because the coordinator validates
// before it appends.
var ErrPrecondition = errors.New("state: record precondition failed")

// ApplyError says which record failed which precondition.
type ApplyError struct {
	LSN uint64
	// Record is the Go type name of the record, such as "TaskCreated".
	Record string
	TaskID string
	Reason string
}

func (e *ApplyError) Error() string {
	if e.TaskID == "" {
		return fmt.Sprintf("state: record %s at lsn %d: %s", e.Record, e.LSN, e.Reason)
	}
	return fmt.Sprintf("state: record %s at lsn %d for task %q: %s", e.Record, e.LSN, e.TaskID, e.Reason)
}

func (e *ApplyError) Unwrap() error { return ErrPrecondition }

// State is the authoritative in-memory state: a pure function of the
// records applied to it. It is not safe for concurrent use; its owner (the
// coordinator) serialises access.
type State struct {
	lastLSN uint64
	epoch   uint64

	// slab holds every task (slab.go). tasks indexes them by id, requests
	// by namespace and request id (tasks that have one), and leases by
	// current lease id (the leased tasks).
	slab     taskSlab
	tasks    posIndex
	requests posIndex
	leases   hashIndex
	// queues holds the schedulable tasks of each queue. Its keys are also
	// the one copy of each namespace and queue name that the tasks of the
	// queue share.
	queues map[QueueKey]*queueIndex
	// policies holds the policies tasks share (State.policy).
	policies map[Policy]*Policy
	expiry   taskHeap
	// deadlines holds the deadlines of the WAITING and LEASED tasks that
	// have one (deadline.go).
	deadlines deadlineIndex
	// traces holds the trace contexts of the tasks submitted with one, and
	// reports the last progress report of the current leases whose worker
	// reported one (beside.go). Both are nil until the first.
	traces  map[*Task]TraceContext
	reports map[*Task]LastReport
	// order lists tasks by creation, for stable paging, as their slab
	// positions plus one. Entries of dropped tasks are 0 until tidyOrder
	// takes them out; holes counts them, and trimmed counts the entries
	// sliced off its front since compactOrder last copied it.
	order   []uint32
	holes   int
	trimmed int
	counts  [NumStates]int
	// held is HeldBytes (memory.go); changed is the task the record being
	// applied touched, whose share of it Apply brings up to date.
	held    int64
	changed *Task
	// schedules holds every schedule by key; watched counts, by task id,
	// the schedules whose last fire submitted that task (their overlap
	// policy waits for it).
	schedules map[ScheduleKey]*Schedule
	watched   map[string]int
	// holds are the outboxes' rows being relayed (outbox.go).
	holds outboxHolds
	// deliveries are the tasks records of this partition created for
	// other partitions, until they are durable there (deliveries.go).
	deliveries deliveries
	// copying is the ImageCopy in progress, if any: Apply saves for it
	// what a record is about to change.
	copying *ImageCopy
	// keysPending lists the queues whose key index the record being
	// applied changed (keys.go): Apply places their keys again.
	keysPending []*queueIndex
	// graph holds the node of each task that has edges, dependents, a
	// workflow or a parent, and workflows every workflow by key
	// (graph.go); both nil until the first. finishing holds the tasks
	// with dependents that the record being applied ended, for resolveDependents.
	graph     map[*Task]*node
	workflows map[WorkflowKey]*Workflow
	// remote indexes the pending remote edges of BLOCKED tasks: by
	// dependency id, each dependent and the edge's index (RemoteEdges; a
	// derived index). results holds the results remote dependencies
	// completed with, by task and edge (what DependencyResolved brought).
	remote    map[string]map[*Task]int32
	results   map[*Task][][]byte
	finishing []*Task
	// released holds the tasks the last record released (Released), and
	// ended those it ended (Ended).
	released []*Task
	ended    []*Task
}

// New returns an empty state that expects LSN 1 next.
func New() *State {
	s := &State{
		leases: newHashIndex(),
		queues: make(map[QueueKey]*queueIndex),
		expiry: newExpiryHeap(),

		schedules: make(map[ScheduleKey]*Schedule),
		watched:   make(map[string]int),
	}
	s.tasks = newPosIndex(&s.slab, taskHash)
	s.requests = newPosIndex(&s.slab, requestHash)
	return s
}

// taskHash and requestHash are the hashes of the keys of s.tasks and
// s.requests.
func taskHash(t *Task) uint64    { return hashString(t.ID) }
func requestHash(t *Task) uint64 { return hashRequest(t.Namespace, t.RequestID) }

// LastLSN is the LSN of the last applied record.
func (s *State) LastLSN() uint64 { return s.lastLSN }

// Epoch is the epoch of the last Fence record (0 before any).
func (s *State) Epoch() uint64 { return s.epoch }

// Len is the number of tasks held.
func (s *State) Len() int { return s.tasks.n }

// Count is the number of tasks in state ts.
func (s *State) Count(ts TaskState) int {
	if int(ts) >= len(s.counts) {
		return 0
	}
	return s.counts[ts]
}

// Task returns the task or nil. The result must not be modified and is only
// valid until the next Apply.
func (s *State) Task(id string) *Task {
	return s.tasks.find(hashString(id), func(t *Task) bool { return t.ID == id })
}

// ByRequest returns the task submitted with requestID in namespace, or nil.
func (s *State) ByRequest(namespace, requestID string) *Task {
	return s.requests.find(hashRequest(namespace, requestID), func(t *Task) bool {
		return t.RequestID == requestID && t.Namespace == namespace
	})
}

// byLease returns the task whose current lease is leaseID, or nil.
func (s *State) byLease(leaseID string) *Task {
	h := hashString(leaseID)
	if t := s.leases.m[h]; t == nil || t.Executions[t.cur].LeaseID == leaseID {
		return t
	}
	for _, t := range s.leases.colliding(h) {
		if t.Executions[t.cur].LeaseID == leaseID {
			return t
		}
	}
	return nil
}

// Schedulable returns up to n tasks of the queue that may be leased at now,
// in lease order (priority, then age), and no more than the queue's flow
// control admits at now: its free slots and whole tokens. It reorganises
// derived indexes but changes no task and no token bucket.
func (s *State) Schedulable(q QueueKey, now Time, n int) []*Task {
	qi := s.queues[q]
	if qi == nil || n <= 0 {
		return nil
	}
	if qi.limits != nil {
		if n = qi.limits.room(qi.leases, now, n); n <= 0 {
			return nil
		}
	}
	if qi.paused != nil {
		return qi.finalizable(now, n)
	}
	qi.promote(now)
	if qi.keys != nil {
		qi.keys.wake(now)
		return qi.keyedLeasable(now, n)
	}
	return qi.leasable(now, n)
}

// NextReady is when a long-poll on the queue that Schedulable left empty
// should look again, if anything but a signal can change its answer: the
// earliest NotBefore among the queue's delayed tasks, or, if the queue has
// tasks to lease and a free slot but its token bucket is empty, when the
// next token arrives, or when the first key that a time holds (its next
// token, its ordered next task's delay) may lease.
func (s *State) NextReady(q QueueKey) (Time, bool) {
	qi := s.queues[q]
	if qi == nil {
		return 0, false
	}
	next, ok := Time(0), false
	if qi.paused == nil && qi.delayed.Len() > 0 {
		next, ok = qi.delayed.items[0].NotBefore, true
	}
	if l := qi.limits; l != nil && (l.MaxConcurrency == 0 || qi.leases < int(l.MaxConcurrency)) {
		leasable := qi.ready.Len() > 0 && (qi.paused == nil || qi.counts[Committed] > 0)
		if tok, empty := l.nextToken(); empty && leasable && (!ok || tok < next) {
			next, ok = tok, true
		}
	}
	if w, held := qi.keys.nextWake(); held && qi.paused == nil && (!ok || w < next) {
		next, ok = w, true
	}
	return next, ok
}

// Expired returns up to max tasks whose current lease expires at or before
// now.
func (s *State) Expired(now Time, max int) []*Task {
	return collectExpired(&s.expiry, now, max, nil)
}

// NextExpiry is the earliest current lease expiry, if any lease is held.
func (s *State) NextExpiry() (Time, bool) {
	if s.expiry.Len() == 0 {
		return 0, false
	}
	return s.expiry.items[0].CurrentLease().LeaseExpiry, true
}

// Scan calls fn for tasks created after afterLSN, in creation order, until
// fn returns false.
func (s *State) Scan(afterLSN uint64, fn func(*Task) bool) {
	for i := s.searchOrder(afterLSN); i < len(s.order); i++ {
		t := s.ordered(i)
		if t == nil {
			continue
		}
		if !fn(t) {
			return
		}
	}
}

// ScanFrom calls fn for tasks after the key after in the creation order
// (OrderKey), in that order, until fn returns false: a listing continues
// from the key of the last task it listed, even inside the tasks of one
// record.
func (s *State) ScanFrom(after OrderKey, fn func(*Task) bool) {
	i := 0
	if after.LSN > 0 {
		i = s.searchOrder(after.LSN - 1)
	}
	for ; i < len(s.order); i++ {
		t := s.ordered(i)
		if t == nil {
			continue
		}
		if t.CreatedLSN == after.LSN && s.OrderKey(t).Seq <= after.Seq {
			continue
		}
		if !fn(t) {
			return
		}
	}
}

// ordered returns the task at index i of the creation order, nil for a
// hole.
func (s *State) ordered(i int) *Task {
	if e := s.order[i]; e != 0 {
		return s.slab.at(e - 1)
	}
	return nil
}

// searchOrder finds the first index in the creation order whose task was
// created after lsn. Holes keep their position's LSN order, so it skips
// them.
func (s *State) searchOrder(lsn uint64) int {
	lo, hi := 0, len(s.order)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		j := m
		for j < hi && s.order[j] == 0 {
			j++
		}
		if j == hi {
			hi = m
			continue
		}
		if s.ordered(j).CreatedLSN <= lsn {
			lo = j + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Apply applies one record at lsn, which must be LastLSN()+1. It either
// applies the record whole or, if a precondition fails, changes nothing
// and returns an *ApplyError. Apply takes ownership of the record's byte
// slices.
func (s *State) Apply(lsn uint64, r Record) error {
	if lsn != s.lastLSN+1 {
		return s.fail(lsn, r, fmt.Sprintf("lsn is not dense: expected %d", s.lastLSN+1))
	}
	if r == nil {
		return s.fail(lsn, r, "nil record")
	}
	if s.copying != nil {
		s.copying.preserve(r)
	}
	if len(s.released) > 0 {
		clear(s.released)
		s.released = s.released[:0]
	}
	if len(s.ended) > 0 {
		clear(s.ended)
		s.ended = s.ended[:0]
	}
	reason := r.apply(s, lsn)
	if len(s.keysPending) > 0 {
		s.settleKeys()
	}
	if t := s.changed; t != nil {
		// Once the record's whole effect is in (touch need not be its
		// last step).
		s.changed = nil
		s.account(t)
	}
	if reason != "" {
		return s.fail(lsn, r, reason)
	}
	if len(s.finishing) > 0 {
		panic(fmt.Sprintf("state: %T ended tasks with dependents without settling them", r))
	}
	s.lastLSN = lsn
	return nil
}

// SkipTo advances LastLSN to lsn without a record: the log's first LSN after
// its older segments were replaced by a snapshot at lsn.
func (s *State) SkipTo(lsn uint64) {
	if lsn > s.lastLSN {
		s.lastLSN = lsn
	}
}

func (s *State) fail(lsn uint64, r Record, reason string) error {
	e := &ApplyError{LSN: lsn, Reason: reason}
	if r != nil {
		t := reflect.TypeOf(r)
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		e.Record, e.TaskID = t.Name(), r.Task()
	}
	return e
}

// allowed lists the task state transitions a record may cause. A record
// that leaves the state unchanged is always allowed.
var allowed = map[[2]TaskState]bool{
	{Waiting, Leased}:      true,
	{Waiting, Dead}:        true,
	{Waiting, Failed}:      true, // TaskDeadlineExceeded
	{Leased, Waiting}:      true,
	{Leased, Committed}:    true,
	{Leased, Completed}:    true,
	{Leased, Failed}:       true,
	{Leased, Dead}:         true,
	{Committed, Completed}: true,
	{Committed, Dead}:      true,
	{Failed, Waiting}:      true, // TaskRetried
	{Dead, Waiting}:        true, // TaskRetried
	{Blocked, Waiting}:     true, // released: its last dependency completed
	{Blocked, Dead}:        true, // a dependency failed, or killed
	{Blocked, Failed}:      true, // TaskDeadlineExceeded
	{Failed, Blocked}:      true, // TaskRetried with a dependency pending
	{Dead, Blocked}:        true, // TaskRetried with a dependency pending
}

// transition moves t to state to after checking that the move is legal; it
// is the only place that writes Task.State after creation. A broken
// transition is a bug in this package, so it panics rather than leave a
// half-applied record behind.
func (s *State) transition(t *Task, to TaskState) {
	from := t.State
	if from == to {
		return
	}
	if !allowed[[2]TaskState{from, to}] {
		panic(fmt.Sprintf("state: illegal transition %s -> %s for task %q", from, to, t.ID))
	}
	s.counts[from]--
	s.counts[to]++
	qi := s.queue(t)
	qi.counts[from]--
	qi.counts[to]++
	if from == Waiting {
		qi.ages.remove(dueMillis(t))
	}
	if from == Blocked && t.graph {
		s.dropRefs(t)
	}
	t.State = to
	if to.Terminal() && !from.Terminal() {
		s.ended = append(s.ended, t)
	}
	if from.Terminal() != to.Terminal() {
		s.slab.setFinished(t.pos, to.Terminal())
		if t.keyed {
			if to.Terminal() {
				s.finished(qi, t)
			} else {
				s.opened(qi, t, s.lastLSN+1)
			}
		}
	}
	if to == Waiting {
		qi.ages.add(dueMillis(t))
	}
	if to == Committed || to.Terminal() {
		// Past the commit boundary the task is finalised whatever the
		// time, and a finished one has nothing left to fail.
		s.deadlines.remove(t)
	}
	if t.graph {
		n := s.graph[t]
		if w := n.wf; w != nil {
			w.counts[from]--
			w.counts[to]++
		}
		if to.Terminal() && len(n.dependents) > 0 {
			// Its dependents are settled once the record's own effect is
			// in (State.resolveDependents).
			s.finishing = append(s.finishing, t)
		}
	}
}

// touch records that the record at lsn touched t; Apply accounts for
// what the record changed of t once it is applied (HeldBytes).
func (s *State) touch(t *Task, lsn uint64, at Time) {
	t.touched(lsn)
	if at > t.UpdatedAt {
		t.UpdatedAt = at
	}
	s.changed = t
}

// leaseOf returns the task and its current lease if that lease is leaseID;
// otherwise cur is nil and why says what is missing.
func (s *State) leaseOf(taskID, leaseID string) (t *Task, cur *Execution, why string) {
	t = s.Task(taskID)
	if t == nil {
		return nil, nil, "task does not exist"
	}
	cur = t.CurrentLease()
	if cur == nil {
		return t, nil, fmt.Sprintf("task has no current lease (state %s)", t.State)
	}
	if cur.LeaseID != leaseID {
		return t, nil, fmt.Sprintf("lease %q is not the current lease %q", leaseID, cur.LeaseID)
	}
	return t, cur, ""
}

func (s *State) queue(t *Task) *queueIndex {
	return s.queueOf(t.Namespace, t.Queue)
}

// queueOf returns the index of a queue, creating it if needed.
func (s *State) queueOf(namespace, queue string) *queueIndex {
	k := QueueKey{namespace, queue}
	qi := s.queues[k]
	if qi == nil {
		qi = newQueueIndex(k, s)
		s.queues[k] = qi
	}
	return qi
}

// addTask copies a new task of queue k with policy p into the slab,
// indexes it by id, request id and creation order, counts it in its state
// and queue, and points it at the shared copies of k (its queue index) and
// p, and at noProgress if it has no Progress of its own. It returns the
// task in the slab and its queue index.
func (s *State) addTask(proto *Task, k QueueKey, p Policy) (*Task, *queueIndex) {
	t := s.slab.alloc()
	pos := t.pos
	*t = *proto
	t.pos = pos
	qi := s.queueOf(k.Namespace, k.Queue)
	t.QueueKey = qi.shared
	t.Policy = s.policy(p)
	if t.Progress == nil {
		t.Progress = &noProgress
	}
	s.tasks.add(hashString(t.ID), t)
	if t.RequestID != "" {
		s.requests.add(hashRequest(t.Namespace, t.RequestID), t)
	}
	s.order = append(s.order, t.pos+1)
	s.counts[t.State]++
	qi.counts[t.State]++
	if qi.total() == 1 {
		s.held += heldByQueue(k)
	}
	if t.Progress != &noProgress {
		t.Progress.held = uint32(heldByProgress(t.Progress))
	}
	s.held += heldByTask(t)
	if t.State.Terminal() {
		s.slab.setFinished(t.pos, true)
	}
	if t.State == Waiting {
		qi.ages.add(dueMillis(t))
	}
	if t.cur >= 0 {
		qi.leases++
	}
	return t, qi
}

// dropLease clears t's current lease from the lease indexes.
func (s *State) dropLease(t *Task) {
	cur := t.CurrentLease()
	s.leases.remove(hashString(cur.LeaseID), t)
	heap.Remove(&s.expiry, int(t.heapIdx))
	t.cur = -1
	qi := s.queue(t)
	qi.leases--
	if t.keyed {
		qi.keys.released(t)
	}
	s.dropReport(t) // a report is the lease's
}

// maxPolicies bounds the policies a State shares between its tasks. Past
// it, a task with a policy not yet shared gets a copy of its own, so that a
// client giving every task another policy cannot grow the table forever.
const maxPolicies = 1024

// policy returns the State's shared copy of p.
func (s *State) policy(p Policy) *Policy {
	if sp := s.policies[p]; sp != nil {
		return sp
	}
	sp := &p
	if len(s.policies) < maxPolicies {
		if s.policies == nil {
			s.policies = make(map[Policy]*Policy)
		}
		s.policies[p] = sp
	}
	return sp
}
