package state

import (
	"container/heap"
	"slices"
)

// QueueKey names a queue within a namespace.
type QueueKey struct {
	Namespace string
	Queue     string
}

// queueIndex holds the schedulable tasks of one queue. Tasks whose NotBefore
// has passed (as of the last promotion) are in ready, ordered by priority
// then age; the others wait in delayed, ordered by NotBefore. Which heap
// holds a task depends on the times the coordinator has asked about, so the
// split is derived state and never part of state equality.
//
// It also holds the queue's statistics and its pause (queue.go), and its
// flow control (limits.go). A queue's index lives while the queue has a
// task, is paused, has limits, or has counted an event within the last hour.
type queueIndex struct {
	key QueueKey
	// shared is the copy of key that the queue's tasks point at
	// (Task.QueueKey): a separate allocation, so that a task that outlives
	// its queue index (dropped while the task was leased) keeps 32 bytes
	// alive rather than the index.
	shared  *QueueKey
	ready   readyHeap
	delayed taskHeap

	counts [Dead + 1]int
	leases int
	paused *Pause
	limits *limiter // nil: no limits
	ages   ageIndex
	events events
}

func newQueueIndex(k QueueKey, slab *taskSlab) *queueIndex {
	shared := k
	return &queueIndex{key: k, shared: &shared, ready: readyHeap{slab: slab}, delayed: newDelayedHeap()}
}

func (q *queueIndex) len() int { return q.ready.Len() + q.delayed.Len() }

// add adds a schedulable task. The task shares the queue's key from then on
// (its own may be another copy if the queue index was dropped and made anew
// while the task was leased).
func (q *queueIndex) add(t *Task) {
	t.QueueKey = q.shared
	if t.State == Waiting && t.NotBefore > 0 {
		t.delayed = true
		heap.Push(&q.delayed, t)
		return
	}
	t.delayed = false
	q.ready.push(t)
}

func (q *queueIndex) remove(t *Task) {
	if t.delayed {
		heap.Remove(&q.delayed, int(t.heapIdx))
	} else {
		q.ready.remove(int(t.heapIdx))
	}
	t.heapIdx = -1
	t.delayed = false
}

// finalizable returns up to n COMMITTED tasks of the queue that wait to be
// finalised, in lease order: what a paused queue may still lease. It walks
// the ready heap, but only when the queue has a COMMITTED task.
func (q *queueIndex) finalizable(n int) []*Task {
	if q.counts[Committed] == 0 {
		return nil
	}
	var out []*Task
	for _, e := range q.ready.slots {
		if t := q.ready.slab.at(e.pos); t.State == Committed {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Task) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	return out[:min(n, len(out))]
}

// promote moves every delayed task whose NotBefore is at or before now to
// the ready heap.
func (q *queueIndex) promote(now Time) {
	for q.delayed.Len() > 0 && q.delayed.tasks[0].NotBefore <= now {
		t := heap.Pop(&q.delayed).(*Task)
		t.delayed = false
		q.ready.push(t)
	}
}

// leasable returns up to n tasks of the ready heap that may be leased at
// now, in lease order, leaving them in the heap (the grants remove them).
// It walks the heap from the top, keeping the nodes that may come next in
// a small heap of its own: O(n log n) comparisons of tasks it looks at
// anyway, where popping n tasks and pushing them back cost two passes
// through the depth of the whole heap per task. A task promoted at a later
// time than now (the clock went back) goes back to the delayed heap.
func (q *queueIndex) leasable(now Time, n int) []*Task {
	h := q.ready.slots
	out := make([]*Task, 0, min(n, len(h)))
	if len(h) == 0 {
		return out
	}
	var notDue []*Task
	// next holds indexes into h, a heap by before: a node enters it when
	// its parent is taken, so its top is the first task not yet taken.
	next := make([]int32, 1, 2*min(n, len(h))+1)
	less := func(i, j int) bool { return h[next[i]].before(h[next[j]]) }
	for len(out) < n && len(next) > 0 {
		i := next[0]
		last := len(next) - 1
		next[0] = next[last]
		next = next[:last]
		siftDown(len(next), less, func(a, b int) { next[a], next[b] = next[b], next[a] })
		if t := q.ready.slab.at(h[i].pos); t.State == Waiting && t.NotBefore > now {
			notDue = append(notDue, t)
		} else {
			out = append(out, t)
		}
		for c := 2*i + 1; c <= 2*i+2 && int(c) < len(h); c++ {
			next = append(next, c)
			siftUp(len(next)-1, less, func(a, b int) { next[a], next[b] = next[b], next[a] })
		}
	}
	for _, t := range notDue {
		q.ready.remove(int(t.heapIdx))
		t.delayed = true
		heap.Push(&q.delayed, t)
	}
	return out
}

// siftUp and siftDown restore a binary heap of n elements after the
// element at i was added (siftUp) or the root replaced (siftDown).
func siftUp(i int, less func(i, j int) bool, swap func(i, j int)) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(i, p) {
			return
		}
		swap(i, p)
		i = p
	}
}

func siftDown(n int, less func(i, j int) bool, swap func(i, j int)) {
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && less(c+1, c) {
			c++
		}
		if !less(c, i) {
			return
		}
		swap(i, c)
		i = c
	}
}

// before orders schedulable tasks: higher priority first, then older
// (lower creation LSN) first.
func before(a, b *Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.CreatedLSN < b.CreatedLSN
}

// readyHeap is the binary heap of a queue's ready tasks, by before. Each
// entry holds the task's sort key, so that ordering the heap reads no Task
// (a task of a large State is mostly a cache miss away), and the task's
// slab position. Like taskHeap it records each task's position in
// Task.heapIdx, writing it for the entries it moves only. A task's
// Priority and CreatedLSN never change, so its entry's key stays its own.
type readyHeap struct {
	slots []readySlot
	slab  *taskSlab
}

// readySlot is a readyHeap entry: 16 bytes.
type readySlot struct {
	lsn      uint64
	priority int32
	pos      uint32
}

func slotOf(t *Task) readySlot {
	return readySlot{lsn: t.CreatedLSN, priority: t.Priority, pos: t.pos}
}

// before is before (the function) of the entries' tasks.
func (a readySlot) before(b readySlot) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.lsn < b.lsn
}

func (h *readyHeap) Len() int { return len(h.slots) }

// set puts e at i and records i in its task.
func (h *readyHeap) set(i int, e readySlot) {
	h.slots[i] = e
	h.slab.at(e.pos).heapIdx = int32(i)
}

func (h *readyHeap) push(t *Task) {
	h.slots = append(h.slots, readySlot{})
	h.up(len(h.slots)-1, slotOf(t))
}

// remove removes the entry at i and marks its task as in no heap.
func (h *readyHeap) remove(i int) {
	t := h.slab.at(h.slots[i].pos)
	n := len(h.slots) - 1
	last := h.slots[n]
	h.slots = h.slots[:n]
	if i < n && !h.down(i, last) {
		h.up(i, last)
	}
	t.heapIdx = -1
}

// up places e at the hole i or above it, moving down the entries it
// passes.
func (h *readyHeap) up(i int, e readySlot) {
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(h.slots[p]) {
			break
		}
		h.set(i, h.slots[p])
		i = p
	}
	h.set(i, e)
}

// down places e at the hole i or below it, moving up the entries it
// passes, and reports whether it went below i.
func (h *readyHeap) down(i int, e readySlot) bool {
	i0, n := i, len(h.slots)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h.slots[c+1].before(h.slots[c]) {
			c++
		}
		if !h.slots[c].before(e) {
			break
		}
		h.set(i, h.slots[c])
		i = c
	}
	h.set(i, e)
	return i > i0
}

// taskHeap is a binary heap of tasks that records each task's position in
// Task.heapIdx, so a task can be removed or re-ordered in O(log n). A task is
// in at most one heap at a time.
type taskHeap struct {
	tasks []*Task
	less  func(a, b *Task) bool
}

func (h *taskHeap) Len() int           { return len(h.tasks) }
func (h *taskHeap) Less(i, j int) bool { return h.less(h.tasks[i], h.tasks[j]) }
func (h *taskHeap) Swap(i, j int) {
	h.tasks[i], h.tasks[j] = h.tasks[j], h.tasks[i]
	h.tasks[i].heapIdx, h.tasks[j].heapIdx = int32(i), int32(j)
}
func (h *taskHeap) Push(x any) {
	t := x.(*Task)
	t.heapIdx = int32(len(h.tasks))
	h.tasks = append(h.tasks, t)
}
func (h *taskHeap) Pop() any {
	n := len(h.tasks) - 1
	t := h.tasks[n]
	h.tasks[n] = nil
	h.tasks = h.tasks[:n]
	t.heapIdx = -1
	return t
}

func newDelayedHeap() taskHeap {
	return taskHeap{less: func(a, b *Task) bool {
		if a.NotBefore != b.NotBefore {
			return a.NotBefore < b.NotBefore
		}
		return before(a, b)
	}}
}

func newExpiryHeap() taskHeap {
	return taskHeap{less: func(a, b *Task) bool {
		return a.CurrentLease().LeaseExpiry < b.CurrentLease().LeaseExpiry
	}}
}

// collectExpired appends to out the tasks whose lease expires at or before
// now, visiting only those heap nodes (a pruned walk, no mutation).
func collectExpired(h *taskHeap, now Time, max int, out []*Task) []*Task {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h.tasks) || len(out) >= max {
			return
		}
		if h.tasks[i].CurrentLease().LeaseExpiry > now {
			return
		}
		out = append(out, h.tasks[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}
