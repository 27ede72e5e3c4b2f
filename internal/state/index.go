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

	counts [NumStates]int
	leases int
	paused *Pause
	limits *limiter // nil: no limits
	// keys is the index of the queue's keys (keys.go), nil while the
	// queue has no task with a key and no key setting.
	keys   *keyIndex
	ages   ageIndex
	events events
}

func newQueueIndex(k QueueKey, s *State) *queueIndex {
	shared := k
	return &queueIndex{key: k, shared: &shared, ready: readyHeap{slab: &s.slab, st: s}, delayed: newDelayedHeap(s)}
}

func (q *queueIndex) len() int {
	n := q.ready.Len() + q.delayed.Len()
	if q.keys != nil {
		for _, ks := range q.keys.byName {
			n += ks.ready.Len()
		}
	}
	return n
}

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
	q.readyHeapOf(t).push(t)
}

// readyHeapOf returns the heap that holds t when it is ready: its key's,
// or the queue's for a task without a key.
func (q *queueIndex) readyHeapOf(t *Task) *readyHeap {
	if !t.keyed {
		return &q.ready
	}
	ks := q.keys.stateOf(t)
	q.keys.touch(ks)
	return &ks.ready
}

func (q *queueIndex) remove(t *Task) {
	if t.delayed {
		heap.Remove(&q.delayed, int(t.heapIdx))
	} else {
		q.readyHeapOf(t).remove(int(t.heapIdx))
	}
	t.heapIdx = -1
	t.delayed = false
}

// finalizable returns up to n COMMITTED tasks of the queue that wait to be
// finalised and may be leased at now, in lease order: what a paused queue
// may still lease. It walks the ready heaps, but only when the queue has a
// COMMITTED task.
func (q *queueIndex) finalizable(now Time, n int) []*Task {
	if q.counts[Committed] == 0 {
		return nil
	}
	if q.keys != nil {
		return q.keyedFinalizable(now, n)
	}
	return q.finalizableIn(&q.ready, n)
}

// finalizableIn returns up to n COMMITTED tasks of h, in lease order.
func (q *queueIndex) finalizableIn(h *readyHeap, n int) []*Task {
	var out []*Task
	for _, e := range h.slots {
		if t := h.slab.at(e.pos); t.State == Committed {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Task) int {
		if q.ready.st.before(a, b) {
			return -1
		}
		return 1
	})
	return out[:min(n, len(out))]
}

// promote moves every delayed task whose NotBefore is at or before now to
// the ready heap: its key's for a task with a key, which is placed again.
func (q *queueIndex) promote(now Time) {
	for q.delayed.Len() > 0 && q.delayed.items[0].NotBefore <= now {
		t := heap.Pop(&q.delayed).(*Task)
		t.delayed = false
		if !t.keyed {
			q.ready.push(t)
			continue
		}
		ks := q.keys.stateOf(t)
		ks.ready.push(t)
		q.keys.place(ks, now, true)
	}
}

// leasable returns up to n tasks of the ready heap that may be leased at
// now, in lease order, leaving them in the heap (the grants remove them).
// It walks the heap from the top (heapWalk): O(n log n) comparisons of
// tasks it looks at anyway, where popping n tasks and pushing them back
// cost two passes through the depth of the whole heap per task. A task
// promoted at a later time than now (the clock went back) goes back to
// the delayed heap.
func (q *queueIndex) leasable(now Time, n int) []*Task {
	out := make([]*Task, 0, min(n, q.ready.Len()))
	var notDue []*Task
	for w := q.ready.walk(n); len(out) < n && !w.empty(); {
		if t := q.ready.slab.at(q.ready.slots[w.pop()].pos); t.State == Waiting && t.NotBefore > now {
			notDue = append(notDue, t)
		} else {
			out = append(out, t)
		}
	}
	for _, t := range notDue {
		q.undue(&q.ready, t)
	}
	return out
}

// undue moves t, a task of h not due yet (the clock went back since it
// was promoted), back to the delayed heap.
func (q *queueIndex) undue(h *readyHeap, t *Task) {
	h.remove(int(t.heapIdx))
	t.delayed = true
	heap.Push(&q.delayed, t)
}

// heapWalk yields the indexes of a binary heap's entries in the heap's
// order without changing it: it keeps the indexes that may come next in a
// small heap of its own (a node enters it when its parent is taken), so
// its top is the first entry not yet taken.
type heapWalk struct {
	next []int32
	n    int32
	less func(i, j int32) bool
}

// newWalk starts a walk of a heap of n entries ordered by less; hint is
// how many entries the caller expects to take.
func newWalk(n int, less func(i, j int32) bool, hint int) heapWalk {
	w := heapWalk{n: int32(n), less: less}
	if n > 0 {
		w.next = make([]int32, 1, 2*min(hint, n)+1)
	}
	return w
}

func (w *heapWalk) empty() bool { return len(w.next) == 0 }

// peek returns the index of the next entry.
func (w *heapWalk) peek() int32 { return w.next[0] }

// pop returns the index of the next entry and moves past it.
func (w *heapWalk) pop() int32 {
	less := func(a, b int) bool { return w.less(w.next[a], w.next[b]) }
	swap := func(a, b int) { w.next[a], w.next[b] = w.next[b], w.next[a] }
	i := w.next[0]
	last := len(w.next) - 1
	w.next[0] = w.next[last]
	w.next = w.next[:last]
	siftDown(len(w.next), less, swap)
	for c := 2*i + 1; c <= 2*i+2 && c < w.n; c++ {
		w.next = append(w.next, c)
		siftUp(len(w.next)-1, less, swap)
	}
	return i
}

// walk starts a walk of h in lease order.
func (h *readyHeap) walk(hint int) heapWalk {
	return newWalk(len(h.slots), func(i, j int32) bool { return h.slots[i].before(h.slots[j]) }, hint)
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
// (earlier in the creation order) first.
func (s *State) before(a, b *Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return s.packedKey(a) < s.packedKey(b)
}

// packedKey is t's OrderKey in one number: its creation LSN above its
// place in its record (LSNs stay below 2^48).
func (s *State) packedKey(t *Task) uint64 {
	k := s.OrderKey(t)
	return k.LSN<<16 | uint64(k.Seq)
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
	st    *State
}

// readySlot is a readyHeap entry: 16 bytes. key is the task's
// State.packedKey.
type readySlot struct {
	key      uint64
	priority int32
	pos      uint32
}

func (h *readyHeap) slotOf(t *Task) readySlot {
	return readySlot{key: h.st.packedKey(t), priority: t.Priority, pos: t.pos}
}

// before is before (the function) of the entries' tasks.
func (a readySlot) before(b readySlot) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.key < b.key
}

func (h *readyHeap) Len() int { return len(h.slots) }

// set puts e at i and records i in its task.
func (h *readyHeap) set(i int, e readySlot) {
	h.slots[i] = e
	h.slab.at(e.pos).heapIdx = int32(i)
}

func (h *readyHeap) push(t *Task) {
	h.slots = append(h.slots, readySlot{})
	h.up(len(h.slots)-1, h.slotOf(t))
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
	posHeap[*Task]
	less func(a, b *Task) bool
}

func (h *taskHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }

func (t *Task) heapPos() *int32 { return &t.heapIdx }

func newDelayedHeap(s *State) taskHeap {
	return taskHeap{less: func(a, b *Task) bool {
		if a.NotBefore != b.NotBefore {
			return a.NotBefore < b.NotBefore
		}
		return s.before(a, b)
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
		if i >= len(h.items) || len(out) >= max {
			return
		}
		if h.items[i].CurrentLease().LeaseExpiry > now {
			return
		}
		out = append(out, h.items[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}
