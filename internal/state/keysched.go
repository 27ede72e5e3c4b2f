package state

import "slices"

// What Schedulable offers on a queue with keys (docs/design/keys.md, "What
// the coordinator asks"): the tasks without a key and the eligible keys'
// tasks merged in the order the grants will take them — by each one's
// next task, or with fair by turn — each key giving no more than its
// limits leave at now, without taking anything out of a heap.

// cursor is one source of tasks in the merge: the queue's tasks without a
// key (ks nil) or one key's.
type cursor struct {
	ks *keyState
	h  *readyHeap
	// walk walks h; an ordered key has one task, next, instead.
	walk    heapWalk
	ordered bool
	next    *Task
	top     readySlot
	room    int
	// pass and seq are the turn the merge computes (fair), step the
	// key's step (Stride over its weight).
	pass, seq, step uint64
}

// advance moves c to its next task; false: it has none left.
func (c *cursor) advance() bool {
	if c.room <= 0 {
		return false
	}
	if c.ordered {
		if c.next == nil {
			return false
		}
		c.top = c.h.slotOf(c.next)
		return true
	}
	if c.walk.empty() {
		return false
	}
	c.top = c.h.slots[c.walk.peek()]
	return true
}

// take returns the task at c's top and moves past it.
func (c *cursor) take() *Task {
	if c.ordered {
		t := c.next
		c.next = nil
		return t
	}
	return c.h.slab.at(c.h.slots[c.walk.pop()].pos)
}

// keyedLeasable is leasable for a queue with a key index.
func (q *queueIndex) keyedLeasable(now Time, n int) []*Task {
	ki := q.keys
	fair := ki.set.Fair
	vt := ki.vt
	var cur []*cursor
	before := func(a, b *cursor) bool {
		if fair {
			return turnLess(a.pass, a.seq, b.pass, b.seq)
		}
		return a.top.before(b.top)
	}
	less := func(i, j int) bool { return before(cur[i], cur[j]) }
	swap := func(i, j int) { cur[i], cur[j] = cur[j], cur[i] }
	push := func(c *cursor) {
		if c.advance() {
			cur = append(cur, c)
			siftUp(len(cur)-1, less, swap)
		}
	}
	if q.ready.Len() > 0 {
		push(&cursor{h: &q.ready, walk: q.ready.walk(n), room: n, pass: ki.unkeyed, step: Stride})
	}
	// The eligible keys, in their heap's order, join the merge as the
	// merge reaches them.
	eh := ki.eligible.ks
	ew := newWalk(len(eh), func(i, j int32) bool { return ki.eligible.less(eh[i], eh[j]) }, n)
	// keyFirst reports whether eligible key ks comes before cursor c.
	keyFirst := func(ks *keyState, c *cursor) bool {
		if fair {
			return turnLess(ks.pass, ks.seq, c.pass, c.seq)
		}
		return ks.cand.before(c.top)
	}
	var notDue []*Task
	var unfit []*keyState // eligible keys that are not at now
	out := make([]*Task, 0, min(n, 64))
	for len(out) < n {
		for !ew.empty() && (len(cur) == 0 || keyFirst(eh[ew.peek()], cur[0])) {
			ks := eh[ew.pop()]
			c := &cursor{ks: ks, h: &ks.ready, room: ki.room(ks, now, n), pass: ks.pass, seq: ks.seq, step: Stride / uint64(ki.weight(ks.name))}
			if ki.set.Ordered {
				c.ordered = true
				c.next = ki.openTop(ks)
				if c.next != nil && c.next.State == Waiting && c.next.NotBefore > now {
					c.next = nil
				}
			} else {
				c.walk = ks.ready.walk(c.room)
			}
			if c.room <= 0 || !c.advance() {
				unfit = append(unfit, ks)
				continue
			}
			cur = append(cur, c)
			siftUp(len(cur)-1, less, swap)
		}
		if len(cur) == 0 {
			break
		}
		c := cur[0]
		t := c.take()
		if t.State == Waiting && t.NotBefore > now {
			notDue = append(notDue, t)
		} else {
			out = append(out, t)
			c.room--
			start := max(c.pass, vt)
			vt, c.pass = start, start+c.step
		}
		if c.advance() {
			siftDown(len(cur), less, swap)
		} else {
			last := len(cur) - 1
			cur[0] = cur[last]
			cur = cur[:last]
			siftDown(len(cur), less, swap)
		}
	}
	for _, t := range notDue {
		if !t.keyed {
			q.undue(&q.ready, t)
			continue
		}
		ks := ki.stateOf(t)
		q.undue(&ks.ready, t)
		ki.place(ks, now, true)
	}
	for _, ks := range unfit {
		ki.place(ks, now, true)
	}
	return out
}

// wake moves the held keys whose time has come to where they belong at
// now (eligible, unless the clock went back or something else holds
// them).
func (ki *keyIndex) wake(now Time) {
	for ki.held.len() > 0 && ki.held.ks[0].wake <= now {
		ks := ki.held.pop()
		ks.heap = inNone
		ki.place(ks, now, true)
	}
}

// keyedFinalizable is finalizable for a queue with a key index: the
// COMMITTED tasks of every key that may lease at now, no more of a key
// than its limits leave, and those without a key, in lease order.
func (q *queueIndex) keyedFinalizable(now Time, n int) []*Task {
	out := q.finalizableIn(&q.ready, n)
	ki := q.keys
	for _, ks := range ki.byName {
		room := ki.room(ks, now, n)
		if room <= 0 || ks.nopen == 0 {
			continue
		}
		ts := q.finalizableIn(&ks.ready, room)
		if ki.set.Ordered {
			ts = ts[:0]
			if t := ki.openTop(ks); t != nil && t.State == Committed && t.cur < 0 {
				ts = append(ts, t)
			}
		}
		out = append(out, ts...)
	}
	slices.SortFunc(out, func(a, b *Task) int {
		if q.ready.st.before(a, b) {
			return -1
		}
		return 1
	})
	return out[:min(n, len(out))]
}

// nextWake is the earliest time a held key becomes eligible, if any is
// held.
func (ki *keyIndex) nextWake() (Time, bool) {
	if ki == nil || ki.held.len() == 0 {
		return 0, false
	}
	return ki.held.ks[0].wake, true
}
