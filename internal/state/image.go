package state

import (
	"container/heap"
	"errors"
	"fmt"
)

// Image is a point-in-time copy of a State's logical content: what a
// snapshot writes. The State may move on while an Image is being written.
type Image struct {
	LastLSN uint64
	Epoch   uint64
	// Tasks in creation order. Each is a copy of the task as it was when
	// the Image was taken, with its current lease (LeaseIndex). To keep the
	// copy cheap it shares with the State the memory that the State never
	// modifies in place: payload, result and the prefix of the record
	// history. It must be treated as read-only.
	Tasks []*Task
	// Deadlines[i] is the deadline of Tasks[i] (0: none); nil when no task
	// has one. The state keeps deadlines beside its tasks, not in them.
	Deadlines []Time
	// Traces[i] is the trace context of Tasks[i], and Reports[i] the last
	// progress report of its current lease (zero: none); each nil when no
	// task has one. They too are kept beside the tasks.
	Traces  []TraceContext
	Reports []LastReport
	// Keys[i] is the key of Tasks[i] ("" for none); nil when no task has
	// one.
	Keys []string
	// Queues holds what the state keeps of its queues beyond their tasks
	// (pauses, recent event counts), ordered by namespace and queue.
	Queues []QueueImage
	// Schedules holds deep copies of every schedule, ordered by key.
	Schedules []*Schedule
	// Graphs[i] is what Tasks[i] has of the graph (docs/design/workflows.md);
	// nil when no task has any. Workflows holds every workflow, ordered by
	// key.
	Graphs    []GraphInfo
	Workflows []WorkflowImage
	// Holds holds the outboxes' holds (outbox.go), ordered by outbox and
	// row.
	Holds []OutboxHold
	// Deliveries holds the pending deliveries (deliveries.go), in record
	// order.
	Deliveries []Delivery
}

// Image copies the state for a snapshot in one step (see ImageCopy for
// one in many). It is O(tasks) and copies no byte of payload.
func (s *State) Image() *Image {
	c := newImageCopy(s)
	c.Step(len(c.order))
	img, err := c.finish()
	if err != nil {
		panic(err) // nothing applied during the copy: a bug in ImageCopy
	}
	return img
}

// copyTasks makes the copies of ts that an Image holds, in three
// allocations whatever their number (one array of task copies, one of
// their Progress, one of executions): the fields the state changes in place
// are copied, and what it never changes in place (payload, result, the
// prefix of the record history) is shared.
func copyTasks(ts []*Task) []*Task {
	execs, progs := 0, 0
	for _, t := range ts {
		execs += len(t.Executions)
		if t.Progress != &noProgress {
			progs++
		}
	}
	out := make([]*Task, len(ts))
	copies := make([]Task, len(ts))
	pbuf := make([]Progress, 0, progs)
	ebuf := make([]Execution, 0, execs)
	for i, t := range ts {
		c := &copies[i]
		*c = *t
		if t.Progress != &noProgress {
			pbuf = append(pbuf, *t.Progress)
			p := &pbuf[len(pbuf)-1]
			p.first = [1]Execution{}
			start := len(ebuf)
			ebuf = append(ebuf, t.Executions...)
			p.Executions = ebuf[start:len(ebuf):len(ebuf)]
			if len(t.Executions) == 0 {
				p.Executions = nil
			}
			// Appends to the history never write below its current
			// length, so the copy may share the array if it cannot grow
			// into it.
			p.History = p.History[:len(p.History):len(p.History)]
			c.Progress = p
		}
		c.heapIdx = -1
		c.delayed = false
		c.keyed = false
		c.graph = false // the image holds its GraphInfo beside it
		c.pos = 0
		out[i] = c
	}
	return out
}

// Deadline is the deadline of Tasks[i] (0: none).
func (img *Image) Deadline(i int) Time {
	if img.Deadlines == nil {
		return 0
	}
	return img.Deadlines[i]
}

// Beside is what the state kept beside Tasks[i].
func (img *Image) Beside(i int) Beside {
	b := Beside{Deadline: img.Deadline(i)}
	if img.Traces != nil {
		b.Trace = img.Traces[i]
	}
	if img.Reports != nil {
		b.Report = img.Reports[i]
	}
	if img.Keys != nil {
		b.Key = img.Keys[i]
	}
	if img.Graphs != nil {
		b.Graph = img.Graphs[i]
	}
	return b
}

// LeaseIndex is the index in Executions of the execution that holds the
// task's current lease, or -1 when no lease is current. (A COMMITTED task's
// last execution is COMMITTED whether or not its lease is still current, so
// a snapshot must store this; it cannot be derived.)
func (t *Task) LeaseIndex() int { return int(t.cur) }

// ErrRestore is wrapped by every error a Loader returns: the tasks given to
// it cannot be the content of a State (a corrupt or foreign snapshot).
var ErrRestore = errors.New("state: invalid snapshot content")

// Loader rebuilds a State from the tasks of an Image (a snapshot), one task
// at a time, so that a decoder never holds more than a chunk of encoded
// tasks. It checks each task as Invariants would and builds every derived
// index (request ids, leases, expiry and queue heaps, creation order). Apply
// can continue from the result at LastLSN+1.
type Loader struct {
	s         *State
	err       error
	queues    map[QueueKey]bool
	workflows map[WorkflowKey]bool
	// last is the creation order key of the last task added.
	last OrderKey
}

// NewLoader starts a State whose last applied record is lastLSN, in epoch
// epoch.
func NewLoader(lastLSN, epoch uint64) *Loader {
	s := New()
	s.lastLSN, s.epoch = lastLSN, epoch
	return &Loader{s: s}
}

// Add adds the next task in creation order, with the index of its current
// lease in t.Executions (-1 for none) and what the state keeps beside it
// (its deadline, trace context and progress report). The Loader takes
// ownership of t. After an error the Loader refuses everything.
func (l *Loader) Add(t *Task, leaseIndex int, b Beside) error {
	if l.err != nil {
		return l.err
	}
	if err := l.add(t, leaseIndex, b); err != nil {
		l.err = err
		return err
	}
	return nil
}

func (l *Loader) add(t *Task, leaseIndex int, b Beside) error {
	deadline := b.Deadline
	s := l.s
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: task %d (%q): %s", ErrRestore, s.Len()+1, t.ID, fmt.Sprintf(format, args...))
	}
	if t == nil {
		return fail("nil task")
	}
	if t.Progress != nil && len(t.History) == 1 && t.History[0] == t.CreatedLSN {
		t.History = nil // the creation alone, which Task.LSNs gives without it
	}
	if t.Progress == nil || t.Progress.empty() {
		t.Progress = &noProgress
	}
	switch {
	case t.QueueKey == nil:
		return fail("namespace and queue must be set")
	case t.Policy == nil:
		return fail("execution window and retry policy must be set")
	case t.ID == "":
		return fail("task id is empty")
	case s.Task(t.ID) != nil:
		return fail("task id appears twice")
	case t.Namespace == "" || t.Queue == "":
		return fail("namespace and queue must be set")
	case t.Window <= 0:
		return fail("execution window %v is not positive", t.Window)
	case t.Retry.MaxAttempts < 1:
		return fail("retry policy needs at least one attempt")
	case t.CreatedLSN == 0 || t.CreatedLSN > s.lastLSN:
		return fail("creation lsn %d is outside 1..%d", t.CreatedLSN, s.lastLSN)
	case len(s.order) > 0 && !l.last.Less(OrderKey{t.CreatedLSN, b.Graph.Seq}):
		return fail("creation lsn %d and place %d in its record are not after the previous task's (%d, %d)", t.CreatedLSN, b.Graph.Seq, l.last.LSN, l.last.Seq)
	case leaseIndex < -1 || leaseIndex >= len(t.Executions):
		return fail("current lease index %d is outside its %d executions", leaseIndex, len(t.Executions))
	}
	t.cur = int32(leaseIndex)
	t.heapIdx = -1
	t.delayed = false
	t.graph = false
	var problems []string
	checkTask(t, s.lastLSN, func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	})
	if len(problems) > 0 {
		return fail("%s", problems[0])
	}
	if t.RequestID != "" && s.ByRequest(t.Namespace, t.RequestID) != nil {
		return fail("request id %q is used twice in namespace %q", t.RequestID, t.Namespace)
	}
	cur := t.CurrentLease()
	if cur != nil && s.byLease(cur.LeaseID) != nil {
		return fail("lease id %q is current for two tasks", cur.LeaseID)
	}
	switch {
	case deadline < 0:
		return fail("deadline %d is negative", deadline)
	case deadline != 0 && t.State != Waiting && t.State != Leased && t.State != Blocked:
		return fail("a %s task has a deadline: only WAITING and LEASED ones keep theirs", t.State)
	case deadline != 0 && cur != nil && cur.LeaseExpiry > deadline:
		return fail("lease %q expires at %s, after the deadline %s", cur.LeaseID, cur.LeaseExpiry, deadline)
	case checkTrace(b.Trace) != "":
		return fail("%s", checkTrace(b.Trace))
	case b.Report.At != 0 && cur == nil:
		return fail("a progress report without a current lease")
	case b.Report.At != 0 && checkReport(&b.Report.Report) != "":
		return fail("%s", checkReport(&b.Report.Report))
	case b.Report.At == 0 && b.Report.Report != (Report{}):
		return fail("a progress report without a time")
	case len(b.Key) > MaxKeyBytes:
		return fail("a key of %d bytes, over %d", len(b.Key), MaxKeyBytes)
	}

	t, qi := s.addTask(t, *t.QueueKey, *t.Policy)
	l.last = OrderKey{t.CreatedLSN, b.Graph.Seq}
	// Its node first: its place in the creation order is its key's order.
	if why := s.restoreNode(t, b.Graph); why != "" {
		return fail("%s", why)
	}
	if b.Key != "" {
		s.loadKeyed(qi, t, b.Key)
	}
	if cur != nil {
		s.leases.add(hashString(cur.LeaseID), t)
		heap.Push(&s.expiry, t)
	}
	if t.Schedulable() {
		qi.add(t)
	}
	if deadline != 0 {
		s.deadlines.add(t, deadline)
	}
	s.setTrace(t, b.Trace)
	if b.Report.At != 0 {
		s.setReport(t, b.Report)
	}
	return nil
}

// AddQueue restores what an Image keeps of a queue beyond its tasks, before
// or after the queue's tasks. After an error the Loader refuses everything.
func (l *Loader) AddQueue(q QueueImage) error {
	if l.err != nil {
		return l.err
	}
	fail := func(format string, args ...any) error {
		l.err = fmt.Errorf("%w: queue %q in namespace %q: %s", ErrRestore, q.Key.Queue, q.Key.Namespace, fmt.Sprintf(format, args...))
		return l.err
	}
	switch {
	case q.Key.Namespace == "" || q.Key.Queue == "":
		return fail("namespace and queue must be set")
	case l.queues[q.Key]:
		return fail("queue appears twice")
	}
	if l.queues == nil {
		l.queues = make(map[QueueKey]bool)
	}
	l.queues[q.Key] = true
	if why := l.s.queueOf(q.Key.Namespace, q.Key.Queue).restore(l.s, q); why != "" {
		return fail("%s", why)
	}
	return nil
}

// State returns the rebuilt State, or the first error Add returned. The
// Loader must not be used afterwards.
func (l *Loader) State() (*State, error) {
	if l.err != nil {
		return nil, l.err
	}
	s := l.s
	if err := s.graphRestoreErrors(); err != nil {
		l.err = err
		return nil, err
	}
	l.s, l.err = nil, errors.New("state: Loader already finished")
	if err := s.finishKeys(); err != nil {
		return nil, err
	}
	return s, nil
}

// Grow tells a Loader that has no task yet that about n tasks will be
// added (a hint, such as the count a snapshot's trailer claims), so that it
// sizes the creation order once instead of growing it task by task (the
// slab and the indexes grow a chunk or a table at a time anyway). It
// changes no content; a wrong hint costs only memory or time.
func (l *Loader) Grow(n int) {
	if l.err != nil || n <= 0 || len(l.s.order) > 0 {
		return
	}
	l.s.order = make([]uint32, 0, n)
}
