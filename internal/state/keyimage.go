package state

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// What a snapshot keeps of a queue's keys, how a Loader rebuilds them, and
// how Invariants checks them (docs/design/keys.md, "Snapshots and replay
// equality").

// KeysImage is what the state keeps of a queue's keys beyond its tasks:
// the fair virtual time, the turn of the tasks without a key, and each key
// state's bucket and turn (the rest is rebuilt from the tasks).
type KeysImage struct {
	VT      uint64
	Unkeyed uint64
	States  []KeyImage
	// Weights are the keys' fair weights other than 1, by key.
	Weights []KeyWeight
}

// KeyImage is one key state: its bucket (zero without a key rate) and its
// fair turn (zero for a key with no open task, kept for its bucket).
type KeyImage struct {
	Name      string
	Bucket    TokenBucket
	Pass, Seq uint64
}

// image returns the key index's image, its states by name (so that equal
// states have equal images and snapshots). It is O(keys log keys).
func (ki *keyIndex) image() *KeysImage {
	img := &KeysImage{VT: ki.vt, Unkeyed: ki.unkeyed, States: make([]KeyImage, 0, len(ki.byName)), Weights: ki.keyWeights()}
	for _, ks := range ki.byName {
		img.States = append(img.States, KeyImage{Name: ks.name, Bucket: ks.bucket, Pass: ks.pass, Seq: ks.seq})
	}
	slices.SortFunc(img.States, func(a, b KeyImage) int { return cmp.Compare(a.Name, b.Name) })
	return img
}

// restoreKeys puts a snapshot's image of qi's keys back: the key states
// get their bucket and turn, whether the tasks that open them came before
// or come after (Loader.State checks the result).
func (s *State) restoreKeys(qi *queueIndex, img *KeysImage) string {
	if why := checkKeyWeights(img.Weights); why != "" {
		return why
	}
	ki := s.keysOf(qi)
	ki.vt, ki.unkeyed = img.VT, img.Unkeyed
	s.setKeyWeights(qi, img.Weights)
	for _, k := range img.States {
		switch {
		case k.Name == "" || len(k.Name) > MaxKeyBytes:
			return fmt.Sprintf("a key state is named %q", k.Name)
		case (k.Seq == 0) != (k.Pass == 0) && k.Seq == 0:
			return fmt.Sprintf("key %q has a turn (pass %d) but no arrival", k.Name, k.Pass)
		}
		ks := s.keyState(ki, k.Name)
		if ks.restored {
			return fmt.Sprintf("key %q appears twice", k.Name)
		}
		ks.restored = true
		ks.bucket, ks.pass, ks.seq = k.Bucket, k.Pass, k.Seq
	}
	return ""
}

// keyState returns the state of key name in ki, creating it empty.
func (s *State) keyState(ki *keyIndex, name string) *keyState {
	ks := ki.byName[name]
	if ks == nil {
		ks = &keyState{name: strings.Clone(name), ready: readyHeap{slab: &s.slab, st: s}, idx: -1}
		ki.byName[ks.name] = ks
		s.held += heldByKeyState(name)
	}
	return ks
}

// loadKeyed gives t, a task a Loader adds to qi, its key; an open task
// opens its key without starting its turn (the image says it).
func (s *State) loadKeyed(qi *queueIndex, t *Task, key string) {
	s.keyed(t, qi, key)
	if t.State.Terminal() {
		return
	}
	ks := s.keyState(qi.keys, key)
	ks.nopen++
	ks.open = append(ks.open, openSlot{lsn: s.packedKey(t), pos: t.pos})
	openUp(ks.open, len(ks.open)-1)
	if t.cur >= 0 {
		ks.leases++
	}
}

// finishKeys checks the key states a Loader rebuilt against the tasks and
// the images it was given, and places every key. Of several problems it
// reports the first by queue and key name, whatever the maps' order.
func (s *State) finishKeys() error {
	clear(s.keysPending)
	s.keysPending = s.keysPending[:0]
	var first struct {
		q        QueueKey
		key, why string
	}
	for _, qi := range s.queues {
		ki := qi.keys
		if ki == nil {
			continue
		}
		for _, ks := range ki.dirty {
			ks.dirty = false // rebuildKeys places every key
		}
		clear(ki.dirty)
		ki.dirty = ki.dirty[:0]
		ki.set = KeyLimits{}
		if qi.limits != nil {
			ki.set = qi.limits.Keys
		}
		for _, ks := range ki.byName {
			ks.restored = false
			why := ki.checkKeyState(ks)
			if why == "" {
				continue
			}
			q := qi.key
			if first.why == "" || cmp.Or(cmp.Compare(q.Namespace, first.q.Namespace), cmp.Compare(q.Queue, first.q.Queue), cmp.Compare(ks.name, first.key)) < 0 {
				first.q, first.key, first.why = q, ks.name, why
			}
		}
	}
	if first.why != "" {
		return fmt.Errorf("%w: queue %q in namespace %q: key %q: %s", ErrRestore, first.q.Queue, first.q.Namespace, first.key, first.why)
	}
	for _, qi := range s.queues {
		if qi.keys != nil {
			s.rebuildKeys(qi)
		}
	}
	return nil
}

// checkKeyState says why ks cannot be a state of ki's, or "".
func (ki *keyIndex) checkKeyState(ks *keyState) string {
	set := ki.set
	b := set.bucket(ks.bucket)
	switch {
	case ks.nopen > 0 && ks.seq == 0:
		return fmt.Sprintf("%d open task(s) but no fair turn", ks.nopen)
	case ks.nopen == 0 && (ks.pass != 0 || ks.seq != 0):
		return "a fair turn without an open task"
	case set.RateMilli == 0 && ks.bucket != (TokenBucket{}):
		return "a token bucket without a key rate"
	case ks.bucket.Level < 0 || ks.bucket.Level > b.capacity():
		return fmt.Sprintf("token bucket level %d is outside 0..%d", ks.bucket.Level, b.capacity())
	case ks.nopen == 0 && b.bucket.Level == b.capacity():
		return "no open task and a full bucket: nothing to keep"
	case ks.nopen == 0 && set.RateMilli == 0:
		return "no open task and no bucket: nothing to keep"
	case ks.leases > ks.nopen:
		return fmt.Sprintf("%d leases but %d open tasks", ks.leases, ks.nopen)
	}
	return ""
}

// dropKeyed forgets the key of t, a finished task that leaves the state.
func (s *State) dropKeyed(qi *queueIndex, t *Task) {
	ki := qi.keys
	s.held -= heldByKeyedTask(ki.taskKey[t])
	delete(ki.taskKey, t)
	s.maybeDropKeys(qi)
}

// keyErrors checks every key index against a recount over the tasks:
// the key of each task, each key's open tasks, leases and ready heap, the
// heaps of keys, the buckets and the settings.
func (s *State) keyErrors() []error {
	var errs []error
	type recount struct {
		open, leases, ready int32
	}
	want := map[*queueIndex]map[string]*recount{}
	keyed := map[*queueIndex]int{}
	s.tasks.all(func(_ *posTable, t *Task) {
		qi := s.queues[*t.QueueKey]
		if !t.keyed {
			return
		}
		if qi == nil || qi.keys == nil {
			errs = append(errs, fmt.Errorf("task %q has a key but its queue no key index", t.ID))
			return
		}
		key, ok := qi.keys.taskKey[t]
		if !ok || key == "" {
			errs = append(errs, fmt.Errorf("task %q has a key but its queue does not know it", t.ID))
			return
		}
		keyed[qi]++
		if t.State.Terminal() {
			return
		}
		m := want[qi]
		if m == nil {
			m = map[string]*recount{}
			want[qi] = m
		}
		r := m[key]
		if r == nil {
			r = &recount{}
			m[key] = r
		}
		r.open++
		if t.cur >= 0 {
			r.leases++
		}
		if t.Schedulable() && !t.delayed {
			r.ready++
			ks := qi.keys.byName[key]
			if ks == nil || t.heapIdx < 0 || int(t.heapIdx) >= ks.ready.Len() || ks.ready.slots[t.heapIdx] != ks.ready.slotOf(t) {
				errs = append(errs, fmt.Errorf("task %q is ready but not in its key %q's heap", t.ID, key))
			}
		}
	})
	for _, qi := range s.queues {
		ki := qi.keys
		if ki == nil {
			continue
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("queue %v: %s", qi.key, fmt.Sprintf(format, args...)))
		}
		if len(ki.taskKey) != keyed[qi] {
			bad("%d tasks with a key, the key map has %d", keyed[qi], len(ki.taskKey))
		}
		var set KeyLimits
		if qi.limits != nil {
			set = qi.limits.Keys
		}
		if ki.set != set {
			bad("key index settings %+v, the queue's %+v", ki.set, set)
		}
		if ki.set.None() && len(ki.byName) == 0 && len(ki.taskKey) == 0 && len(ki.weights) == 0 {
			bad("an empty key index is kept")
		}
		if why := checkKeyWeights(ki.keyWeights()); why != "" {
			bad("%s", why)
		}
		if len(ki.dirty) > 0 {
			bad("%d keys left to place after the record", len(ki.dirty))
		}
		m := want[qi]
		for name, r := range m {
			if ks := ki.byName[name]; ks == nil {
				bad("key %q has %d open tasks but no state", name, r.open)
			} else if ks.nopen != r.open || ks.leases != r.leases || int32(ks.ready.Len()) != r.ready {
				bad("key %q counts %d open, %d leases, %d ready; recount %d, %d, %d", name, ks.nopen, ks.leases, ks.ready.Len(), r.open, r.leases, r.ready)
			}
		}
		for name, ks := range ki.byName {
			if ks.name != name {
				bad("key %q is indexed under %q", ks.name, name)
			}
			if m[name] == nil && ks.nopen != 0 {
				bad("key %q counts %d open tasks, recount 0", name, ks.nopen)
			}
			if why := ki.checkKeyState(ks); why != "" {
				bad("key %q: %s", name, why)
			}
			if h := ki.heapOf(ks.heap); h != nil && (int(ks.idx) >= h.len() || ks.idx < 0 || h.ks[ks.idx] != ks) {
				bad("key %q is not where it says it is", name)
			}
			if (ks.nopen == 0) != (ks.heap == inIdle) {
				bad("key %q with %d open tasks is in heap %d", name, ks.nopen, ks.heap)
			}
			for i := 1; i < len(ks.ready.slots); i++ {
				if ks.ready.slots[i].before(ks.ready.slots[(i-1)/2]) {
					bad("key %q's ready heap is out of order at %d", name, i)
					break
				}
			}
		}
		for _, h := range []*keyHeap{&ki.eligible, &ki.held, &ki.idle} {
			for i := 1; i < h.len(); i++ {
				if h.less(h.ks[i], h.ks[(i-1)/2]) {
					bad("a heap of keys is out of order at %d", i)
					break
				}
			}
		}
	}
	return errs
}

// heldByKeys is the share of HeldBytes of the key indexes, recounted.
func (s *State) heldByKeys() (n int64) {
	for _, qi := range s.queues {
		if ki := qi.keys; ki != nil {
			n += keyIndexHeld
			for name := range ki.byName {
				n += heldByKeyState(name)
			}
			for _, key := range ki.taskKey {
				n += heldByKeyedTask(key)
			}
			for key := range ki.weights {
				n += heldByKeyWeight(key)
			}
		}
	}
	return n
}

// hasKeyedTasks reports whether a task of the state has a key.
func (s *State) hasKeyedTasks() bool {
	for _, qi := range s.queues {
		if qi.keys != nil && len(qi.keys.taskKey) > 0 {
			return true
		}
	}
	return false
}
