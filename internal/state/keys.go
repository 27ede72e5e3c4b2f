package state

import (
	"cmp"
	"fmt"
	"slices"
)

// Flow control per key (docs/design/keys.md): a task may carry a key, and a
// queue's KeyLimits hold each key — at most MaxConcurrency live leases of a
// key, a token bucket per key, a key's tasks one at a time in creation
// order, and leasing that takes turns across the keys. Like the queue's
// limits they are checked by LeaseGranted's apply, so no replay can exceed
// them.
//
// Everything here hangs off the queue's index (queueIndex.keys), nil for a
// queue that never had a key or a key setting: a queue without keys pays
// one pointer check.

// MaxKeyBytes is the longest key a task may have.
const MaxKeyBytes = 128

// KeyLimits are the flow control of a queue's keys. A zero field is none.
type KeyLimits struct {
	// MaxConcurrency is the most live leases of one key at once.
	MaxConcurrency uint32
	// RateMilli and Burst are each key's token bucket: RateMilli
	// milli-leases per second, holding up to Burst; set together.
	RateMilli uint64
	Burst     uint32
	// Ordered runs a key's tasks one at a time in creation order.
	Ordered bool
	// Fair takes turns across the keys (stride scheduling, weight 1).
	Fair bool
}

// None reports whether k sets nothing.
func (k KeyLimits) None() bool { return k == KeyLimits{} }

// Check says why k is not a valid set of key limits, or "": each limit
// within the bounds of a queue's, and ordered keys run one task at a
// time.
func (k KeyLimits) Check() string {
	if why := (Limits{MaxConcurrency: k.MaxConcurrency, RateMilli: k.RateMilli, Burst: k.Burst}).check(); why != "" {
		return "key " + why
	}
	if k.Ordered && k.MaxConcurrency > 1 {
		return fmt.Sprintf("ordered keys run one task at a time: a key max concurrency of %d contradicts it", k.MaxConcurrency)
	}
	return ""
}

// bucket returns a limiter holding the key bucket's settings (its own
// bucket is the key's).
func (k KeyLimits) bucket(b TokenBucket) limiter {
	return limiter{QueueLimits: QueueLimits{Limits: Limits{RateMilli: k.RateMilli, Burst: k.Burst}}, bucket: b}
}

// keyIndex holds the keys of one queue: the state of each key that has an
// open task (one not finished) or a bucket not full, the key of every
// task of the queue that has one, and the heaps that say which keys may
// lease (docs/design/keys.md, "In the state").
type keyIndex struct {
	// set is the queue's key limits (a copy of its limiter's).
	set KeyLimits
	// byName holds the key states.
	byName map[string]*keyState
	// taskKey holds the key of each task of the queue that has one
	// (Task.keyed), the string in the task's own allocation.
	taskKey map[*Task]string
	// eligible holds the keys that may lease now, held those that may at
	// a known time (wake), idle those with no open task whose bucket is
	// full at wake (keyState.heap says which).
	eligible, held, idle keyHeap
	// vt is the fair virtual time, unkeyed the pass of the queue's tasks
	// without a key (seq 0); weights the keys' fair weights other than 1
	// (keyweights.go).
	vt      uint64
	unkeyed uint64
	weights map[string]uint32
	// holding counts the keys by hold as last placed; holds counts each
	// time a key was held back by a limit since the index was made.
	holding [NumKeyHolds]int
	holds   [NumKeyHolds]uint64
	// dirty lists the keys a record changed, placed again at the end of
	// Apply (State.settleKeys); pending is the state's list of the key
	// indexes that have some, and qi this one's queue.
	dirty   []*keyState
	pending *[]*queueIndex
	qi      *queueIndex
}

// Where a key state is (keyState.heap).
const (
	inNone uint8 = iota
	inEligible
	inHeld
	inIdle
)

// keyState is the state of one key of a queue.
type keyState struct {
	name string
	// ready holds the key's ready tasks, by priority then age.
	ready readyHeap
	// open holds (lazily) the place in the creation order and position
	// of each of the key's open tasks; its top, once stale entries are gone, is the
	// oldest (openTop).
	open []openSlot
	// nopen counts the open tasks, leases the live leases.
	nopen  int32
	leases int32
	bucket TokenBucket
	// pass and seq are the key's fair turn (zero while it has no open
	// task).
	pass, seq uint64
	// cand is the sort key of the task the key would lease next, for the
	// eligible heap without fair.
	cand readySlot
	// heap is where the key is (inNone, ...), idx its index there, wake
	// the time that orders held and idle keys.
	heap uint8
	// hold is what limit holds the key back as last placed (KeyHold).
	hold  KeyHold
	dirty bool
	// restored marks a key state a Loader has the image of.
	restored bool
	idx      int32
	wake     Time
}

// openSlot is an entry of keyState.open: lsn is the task's place in the
// creation order (State.packedKey: its creation LSN, then its place in its
// record), pos its slab position.
type openSlot struct {
	lsn uint64
	pos uint32
}

// Stride is the fair step of a key of weight 1 (docs/design/keys.md, "Fair
// leasing").
const Stride = 1 << 20

func newKeyIndex(s *State, qi *queueIndex) *keyIndex {
	ki := &keyIndex{byName: make(map[string]*keyState), taskKey: make(map[*Task]string), pending: &s.keysPending, qi: qi}
	ki.held.less = func(a, b *keyState) bool { return a.wake < b.wake }
	ki.idle.less = ki.held.less
	ki.order()
	return ki
}

// order sets the order of the eligible heap from the settings.
func (ki *keyIndex) order() {
	if ki.set.Fair {
		ki.eligible.less = turnBefore
	} else {
		ki.eligible.less = func(a, b *keyState) bool { return a.cand.before(b.cand) }
	}
}

// turnBefore orders keys by fair turn, then by name: keys whose turns are
// equal are placed in an order that depends on nothing else (the heap a
// snapshot or another replica rebuilds must pop them alike).
func turnBefore(a, b *keyState) bool {
	if a.pass == b.pass && a.seq == b.seq {
		return a.name < b.name
	}
	return turnLess(a.pass, a.seq, b.pass, b.seq)
}

// turnLess orders fair turns: by pass, then by arrival.
func turnLess(pa, sa, pb, sb uint64) bool {
	if pa != pb {
		return pa < pb
	}
	return sa < sb
}

// keysOf returns the key index of qi, creating it.
func (s *State) keysOf(qi *queueIndex) *keyIndex {
	if qi.keys == nil {
		qi.keys = newKeyIndex(s, qi)
		if l := qi.limits; l != nil {
			qi.keys.set = l.Keys
			qi.keys.order()
		}
		s.held += keyIndexHeld
	}
	return qi.keys
}

// KeyOf returns the key of t, a task of the state ("" for none).
func (s *State) KeyOf(t *Task) string {
	if !t.keyed {
		return ""
	}
	return s.queues[*t.QueueKey].keys.taskKey[t]
}

// keyed gives t, a new task of qi, its key (packed with its strings).
func (s *State) keyed(t *Task, qi *queueIndex, key string) {
	ki := s.keysOf(qi)
	t.keyed = true
	ki.taskKey[t] = key
	s.held += heldByKeyedTask(key)
}

// stateOf returns the key state of t, a task with a key, if it has one.
func (ki *keyIndex) stateOf(t *Task) *keyState {
	return ki.byName[ki.taskKey[t]]
}

// opened counts t, a task with a key, as open: it was created, or retried
// by an operator. A key that had no open task starts its fair turn at the
// queue's virtual time and its arrival at lsn; a key with no state starts
// with a full bucket.
func (s *State) opened(qi *queueIndex, t *Task, lsn uint64) {
	ki := qi.keys
	name := ki.taskKey[t]
	ks := ki.byName[name]
	if ks == nil {
		ks = s.keyState(ki, name)
		if ki.set.RateMilli > 0 {
			ks.bucket = TokenBucket{Level: int64(ki.set.Burst) * TokenUnit}
		}
	}
	if ks.nopen == 0 {
		ks.pass, ks.seq = ki.vt, lsn
	}
	ks.nopen++
	ks.open = append(ks.open, openSlot{lsn: s.packedKey(t), pos: t.pos})
	openUp(ks.open, len(ks.open)-1)
	ki.touch(ks)
}

// finished counts t, a task with a key, as no longer open.
func (s *State) finished(qi *queueIndex, t *Task) {
	ki := qi.keys
	ks := ki.stateOf(t)
	ks.nopen--
	ki.touch(ks)
}

// touch marks ks to be placed again at the end of the record.
func (ki *keyIndex) touch(ks *keyState) {
	if !ks.dirty {
		ks.dirty = true
		if len(ki.dirty) == 0 {
			*ki.pending = append(*ki.pending, ki.qi)
		}
		ki.dirty = append(ki.dirty, ks)
	}
}

// settleKeys places again every key the record changed, in every queue
// whose key index it touched: a key with open tasks in its heap, one
// without in the idle heap (its bucket not full) or out of the state.
func (s *State) settleKeys() {
	for _, qi := range s.keysPending {
		if qi.keys != nil {
			s.settle(qi)
		}
	}
	clear(s.keysPending)
	s.keysPending = s.keysPending[:0]
}

func (s *State) settle(qi *queueIndex) {
	ki := qi.keys
	for _, ks := range ki.dirty {
		ks.dirty = false
		if ks.nopen > 0 {
			ki.place(ks, 0, false)
			continue
		}
		s.rest(ki, ks)
	}
	clear(ki.dirty)
	ki.dirty = ki.dirty[:0]
	s.maybeDropKeys(qi)
}

// rest puts a key with no open task in the idle heap if its bucket is not
// full, or forgets it.
func (s *State) rest(ki *keyIndex, ks *keyState) {
	ks.pass, ks.seq, ks.open = 0, 0, nil
	ki.unplace(ks)
	ki.setHold(ks, HoldNone)
	if ki.set.RateMilli > 0 {
		b := ki.set.bucket(ks.bucket)
		if full, ok := b.fullAt(); ok {
			ks.wake = full
			ks.heap = inIdle
			ki.idle.push(ks)
			return
		}
	}
	delete(ki.byName, ks.name)
	s.held -= heldByKeyState(ks.name)
}

// maybeDropKeys removes the key index of a queue that has no key setting,
// no key state and no task with a key.
func (s *State) maybeDropKeys(qi *queueIndex) {
	if ki := qi.keys; ki != nil && ki.set.None() && len(ki.byName) == 0 && len(ki.taskKey) == 0 && len(ki.weights) == 0 {
		qi.keys = nil
		s.held -= keyIndexHeld
	}
}

// forgetIdle forgets the idle keys whose bucket is full at at (a purge's
// time).
func (s *State) forgetIdle(qi *queueIndex, at Time) {
	ki := qi.keys
	if ki == nil {
		return
	}
	for ki.idle.len() > 0 && ki.idle.ks[0].wake <= at {
		ks := ki.idle.pop()
		ks.heap = inNone
		delete(ki.byName, ks.name)
		s.held -= heldByKeyState(ks.name)
	}
	s.maybeDropKeys(qi)
}

// fullAt is when the bucket is full, if it is not full as of its last
// refill.
func (l *limiter) fullAt() (Time, bool) {
	missing := l.capacity() - l.bucket.Level
	if l.RateMilli == 0 || missing <= 0 {
		return 0, false
	}
	rate := int64(l.RateMilli)
	return l.bucket.Refilled + Time((missing+rate-1)/rate), true
}

// openTop returns the oldest open task of ks, dropping stale entries
// (tasks that finished or left) from the top of its heap, and filtering
// the heap once it holds more than twice the open tasks.
func (ki *keyIndex) openTop(ks *keyState) *Task {
	slab := ks.ready.slab
	live := func(e openSlot) bool {
		t := slab.at(e.pos)
		return t.ID != "" && ks.ready.st.packedKey(t) == e.lsn && !t.State.Terminal()
	}
	if len(ks.open) > 2*int(ks.nopen)+16 {
		kept := ks.open[:0]
		for _, e := range ks.open {
			if live(e) {
				kept = append(kept, e)
			}
		}
		clear(ks.open[len(kept):])
		ks.open = dedupOpen(kept)
	}
	for len(ks.open) > 0 {
		if e := ks.open[0]; live(e) {
			return slab.at(e.pos)
		}
		n := len(ks.open) - 1
		ks.open[0] = ks.open[n]
		ks.open = ks.open[:n]
		openDown(ks.open, 0)
	}
	return nil
}

// dedupOpen sorts the entries of an open heap by LSN (a sorted array is a
// heap) and drops repeated ones (a task retried twice has one per opening).
func dedupOpen(es []openSlot) []openSlot {
	sortOpen(es)
	out := es[:0]
	for i, e := range es {
		if i == 0 || e.lsn != es[i-1].lsn {
			out = append(out, e)
		}
	}
	return out
}

func sortOpen(es []openSlot) {
	slices.SortFunc(es, func(a, b openSlot) int { return cmp.Compare(a.lsn, b.lsn) })
}

func openUp(h []openSlot, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].lsn <= h[i].lsn {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func openDown(h []openSlot, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].lsn < h[c].lsn {
			c++
		}
		if h[i].lsn <= h[c].lsn {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// keyHeap is a binary heap of key states that records each one's index
// in keyState.idx (a key is in at most one heap at a time).
type keyHeap struct {
	ks   []*keyState
	less func(a, b *keyState) bool
}

func (h *keyHeap) len() int { return len(h.ks) }

func (h *keyHeap) swap(i, j int) {
	h.ks[i], h.ks[j] = h.ks[j], h.ks[i]
	h.ks[i].idx, h.ks[j].idx = int32(i), int32(j)
}

func (h *keyHeap) push(ks *keyState) {
	ks.idx = int32(len(h.ks))
	h.ks = append(h.ks, ks)
	h.up(len(h.ks) - 1)
}

func (h *keyHeap) pop() *keyState {
	ks := h.ks[0]
	h.remove(0)
	return ks
}

func (h *keyHeap) remove(i int) {
	n := len(h.ks) - 1
	if i != n {
		h.swap(i, n)
	}
	h.ks[n].idx = -1
	h.ks[n] = nil
	h.ks = h.ks[:n]
	if i < n {
		h.fix(i)
	}
}

func (h *keyHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *keyHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.ks[i], h.ks[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *keyHeap) down(i0 int) bool {
	i, n := i0, len(h.ks)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h.less(h.ks[c+1], h.ks[c]) {
			c++
		}
		if !h.less(h.ks[c], h.ks[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > i0
}

// heapOf returns the heap a key is in.
func (ki *keyIndex) heapOf(where uint8) *keyHeap {
	switch where {
	case inEligible:
		return &ki.eligible
	case inHeld:
		return &ki.held
	case inIdle:
		return &ki.idle
	}
	return nil
}

// unplace takes ks out of its heap.
func (ki *keyIndex) unplace(ks *keyState) {
	if h := ki.heapOf(ks.heap); h != nil {
		h.remove(int(ks.idx))
	}
	ks.heap, ks.idx = inNone, -1
}

// place puts ks, a key with open tasks, where it belongs: eligible, held
// until a time, or in no heap (nothing to lease, or its concurrency
// full). With timed it decides as of now; without, for every time from
// the last record on (a delayed next task or a missing token holds it
// until it is due or arrives).
func (ki *keyIndex) place(ks *keyState, now Time, timed bool) {
	where, wake, hold := ki.status(ks, now, timed)
	ki.setHold(ks, hold)
	if where == ks.heap && where != inNone {
		ks.wake = wake
		ki.heapOf(where).fix(int(ks.idx))
		return
	}
	ki.unplace(ks)
	if h := ki.heapOf(where); h != nil {
		ks.heap, ks.wake = where, wake
		h.push(ks)
	}
}

// status says where ks belongs (place) and what holds it back, setting
// its next task's sort key.
func (ki *keyIndex) status(ks *keyState, now Time, timed bool) (where uint8, wake Time, hold KeyHold) {
	set := ki.set
	waiting := ks.nopen > ks.leases
	if set.MaxConcurrency > 0 && ks.leases >= int32(set.MaxConcurrency) {
		if waiting {
			hold = HoldConcurrency
		}
		return inNone, 0, hold
	}
	if set.Ordered {
		t := ki.openTop(ks)
		if t == nil || ks.leases > 0 || !t.Schedulable() {
			if waiting {
				hold = HoldOrder
			}
			return inNone, 0, hold
		}
		ks.cand = ks.ready.slotOf(t)
		if t.State == Waiting && (timed && t.NotBefore > now || !timed && t.delayed) {
			wake = t.NotBefore
			if ks.nopen > 1 {
				hold = HoldOrder // its later tasks wait for it
			}
		}
	} else {
		if ks.ready.Len() == 0 {
			return inNone, 0, HoldNone
		}
		ks.cand = ks.ready.slots[0]
	}
	if set.RateMilli > 0 {
		b := set.bucket(ks.bucket)
		if timed && b.levelAt(now) < TokenUnit || !timed && b.bucket.Level < TokenUnit {
			next, _ := b.nextToken()
			wake = max(wake, next)
			hold = HoldRate
		}
	}
	if wake != 0 {
		return inHeld, wake, hold
	}
	return inEligible, 0, HoldNone
}

// setHold records what holds ks back now, counting a new hold.
func (ki *keyIndex) setHold(ks *keyState, hold KeyHold) {
	if hold == ks.hold {
		return
	}
	if ks.hold != HoldNone {
		ki.holding[ks.hold]--
	}
	if hold != HoldNone {
		ki.holding[hold]++
		ki.holds[hold]++
	}
	ks.hold = hold
}

// room is how many leases ks may take at now: its free slots and whole
// tokens, one for an ordered key (0: none, or the key is not eligible at
// now).
func (ki *keyIndex) room(ks *keyState, now Time, n int) int {
	set := ki.set
	if set.MaxConcurrency > 0 {
		n = min(n, int(set.MaxConcurrency)-int(ks.leases))
	}
	if set.Ordered {
		n = min(n, 1-int(ks.leases))
	}
	if set.RateMilli > 0 {
		b := set.bucket(ks.bucket)
		n = int(min(int64(n), b.levelAt(now)/TokenUnit))
	}
	return n
}

// admitKey says why a lease of t, a task of qi, at at would break its
// key's limits, or "" (docs/design/keys.md, "What a LeaseGranted checks").
func (s *State) admitKey(qi *queueIndex, t *Task, at Time) string {
	ki := qi.keys
	if !t.keyed || ki == nil {
		return ""
	}
	set := ki.set
	ks := ki.stateOf(t)
	switch {
	case set.MaxConcurrency > 0 && ks.leases >= int32(set.MaxConcurrency):
		return fmt.Sprintf("key %q has %d live leases: its max concurrency is %d", ks.name, ks.leases, set.MaxConcurrency)
	case set.Ordered && ks.leases > 0:
		return fmt.Sprintf("key %q is ordered and %d task(s) of it hold a lease", ks.name, ks.leases)
	}
	if set.Ordered {
		if top := ki.openTop(ks); top != t {
			return fmt.Sprintf("key %q is ordered and task %q, created before, is not finished", ks.name, top.ID)
		}
	}
	if set.RateMilli > 0 {
		if b := set.bucket(ks.bucket); b.levelAt(at) < TokenUnit {
			return fmt.Sprintf("key %q has an empty token bucket at %s (key rate %d milli-leases per second)", ks.name, at, set.RateMilli)
		}
	}
	return ""
}

// grantKey counts a lease of t, a task of qi, granted at at, which
// admitKey allowed: its key takes a token and a slot, and the key (or the
// queue's tasks without a key) moves its fair turn.
func (s *State) grantKey(qi *queueIndex, t *Task, at Time) {
	ki := qi.keys
	if ki == nil {
		return
	}
	if !t.keyed {
		ki.unkeyed = ki.turn(ki.unkeyed, 1)
		return
	}
	ks := ki.stateOf(t)
	if ki.set.RateMilli > 0 {
		b := ki.set.bucket(ks.bucket)
		b.take(at)
		ks.bucket = b.bucket
	}
	ks.leases++
	ks.pass = ki.turn(ks.pass, ki.weight(ks.name))
	ki.touch(ks)
}

// turn moves the fair turn of a key of weight w by one lease
// (docs/design/keys.md, "Fair leasing") and returns the key's new pass.
func (ki *keyIndex) turn(pass uint64, w uint32) uint64 {
	start := max(pass, ki.vt)
	ki.vt = start
	return start + Stride/uint64(w)
}

// released counts the end of a lease of t, a task with a key.
func (ki *keyIndex) released(t *Task) {
	ks := ki.stateOf(t)
	ks.leases--
	ki.touch(ks)
}

// setKeyLimits replaces the key limits of qi by set at at: a new key rate
// or burst refills every key's bucket to at at the old rate and caps it at
// the new burst (a bucket starts full when a rate is set); every key is
// placed again. It is O(keys).
func (s *State) setKeyLimits(qi *queueIndex, set KeyLimits, at Time) {
	ki := qi.keys
	if ki == nil {
		if set.None() {
			return
		}
		ki = s.keysOf(qi)
	}
	old := ki.set
	if old == set {
		return
	}
	ki.set = set
	if old.RateMilli != set.RateMilli || old.Burst != set.Burst {
		capacity := int64(set.Burst) * TokenUnit
		for _, ks := range ki.byName {
			switch {
			case set.RateMilli == 0:
				ks.bucket = TokenBucket{}
			case old.RateMilli == 0:
				ks.bucket = TokenBucket{Level: capacity}
			default:
				b := old.bucket(ks.bucket)
				b.refill(at)
				ks.bucket = TokenBucket{Level: min(b.bucket.Level, capacity), Refilled: b.bucket.Refilled}
			}
		}
	}
	s.rebuildKeys(qi)
}

// rebuildKeys places every key of qi again, from nothing: after its
// settings changed, or a Loader restored it.
func (s *State) rebuildKeys(qi *queueIndex) {
	ki := qi.keys
	ki.order()
	for _, h := range []*keyHeap{&ki.eligible, &ki.held, &ki.idle} {
		for _, ks := range h.ks {
			ks.heap, ks.idx = inNone, -1
		}
		clear(h.ks)
		h.ks = h.ks[:0]
	}
	for _, ks := range ki.byName {
		if ks.nopen > 0 {
			ki.place(ks, 0, false)
		} else {
			s.rest(ki, ks)
		}
	}
	s.maybeDropKeys(qi)
}
