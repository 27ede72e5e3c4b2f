package state

import "hash/maphash"

// hashIndex maps a 64-bit hash of a key to the task that holds the key: the
// lease index, of the leased tasks only (ids and request ids, of every task,
// are in the more compact posIndex). It replaces a map from the key itself:
// a task's key (its lease id) already lives in the task, so storing it again in the map, with
// its string header, would cost 16 or 32 bytes per entry for nothing.
//
// Keys are hashed with a seed chosen per process, so no input can be made
// to collide on purpose; tasks whose keys do collide anyway are kept in
// more, and every lookup compares the key itself, so a collision costs time,
// never correctness. Its owner does the hashing and the comparing.
type hashIndex struct {
	m map[uint64]*Task
	// more holds, for a hash whose entry in m is taken, the other tasks
	// with that hash. It is almost always empty.
	more map[uint64][]*Task
}

var hashSeed = maphash.MakeSeed()

// hashMask is all ones except in tests, which make hashes collide on
// purpose to exercise the collision paths.
var hashMask = ^uint64(0)

func hashString(s string) uint64 { return maphash.String(hashSeed, s) & hashMask }

func hashRequest(namespace, requestID string) uint64 {
	return (maphash.String(hashSeed, namespace)*0x9e3779b97f4a7c15 ^ maphash.String(hashSeed, requestID)) & hashMask
}

func newHashIndex() hashIndex { return hashIndex{m: make(map[uint64]*Task)} }

func (x *hashIndex) len() int {
	n := len(x.m)
	for _, ts := range x.more {
		n += len(ts)
	}
	return n
}

// colliding returns the tasks with hash h other than the one in m.
func (x *hashIndex) colliding(h uint64) []*Task {
	if len(x.more) == 0 {
		return nil
	}
	return x.more[h]
}

// add adds t under h. The caller has checked that no task holds t's key.
func (x *hashIndex) add(h uint64, t *Task) {
	if _, taken := x.m[h]; !taken {
		x.m[h] = t
		return
	}
	if x.more == nil {
		x.more = make(map[uint64][]*Task)
	}
	x.more[h] = append(x.more[h], t)
}

// remove removes t, which is indexed under h.
func (x *hashIndex) remove(h uint64, t *Task) {
	if x.m[h] == t {
		ts := x.more[h]
		if len(ts) == 0 {
			delete(x.m, h)
			return
		}
		x.m[h] = ts[0]
		t = ts[0]
	}
	ts := x.more[h]
	for i, o := range ts {
		if o == t {
			ts = append(ts[:i], ts[i+1:]...)
			break
		}
	}
	if len(ts) == 0 {
		delete(x.more, h)
	} else {
		x.more[h] = ts
	}
}

// all calls fn with the hash of every task indexed.
func (x *hashIndex) all(fn func(h uint64, t *Task)) {
	for h, t := range x.m {
		fn(h, t)
	}
	for h, ts := range x.more {
		for _, t := range ts {
			fn(h, t)
		}
	}
}
