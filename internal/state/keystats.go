package state

import (
	"cmp"
	"slices"
)

// What the state tells of a queue's keys (docs/design/keys.md, "Seeing
// it"): counts kept as keys are placed, so that every queue's statistics
// stay O(queues), and the keys with the most tasks, which cost a pass over
// the queue's keys.

// KeyHold is what holds a key with waiting tasks back from leasing.
type KeyHold uint8

const (
	// HoldNone: nothing (the key may lease, or has nothing to lease).
	HoldNone KeyHold = iota
	// HoldConcurrency: the key has its key max concurrency of live leases.
	HoldConcurrency
	// HoldRate: the key's token bucket is empty.
	HoldRate
	// HoldOrder: the key is ordered, and its oldest unfinished task holds
	// a lease or waits for its retry.
	HoldOrder

	// NumKeyHolds is the number of kinds of KeyHold.
	NumKeyHolds
)

var keyHoldNames = [NumKeyHolds]string{"none", "concurrency", "rate", "order"}

func (h KeyHold) String() string {
	if h < NumKeyHolds {
		return keyHoldNames[h]
	}
	return "KeyHold(?)"
}

// KeyCounts counts the keys of a queue in one partition.
type KeyCounts struct {
	// Keys is the number of keys with an unfinished task.
	Keys int
	// Held counts the keys a limit holds back, by KeyHold, as of when
	// they were last placed (a key whose token arrived since counts as
	// held until the next lease looks at it).
	Held [NumKeyHolds]int
	// Holds counts each time a key was held back by a limit, by KeyHold,
	// since the queue's key index was made (this process's replay of the
	// log, or the first key or key setting since): for a counter metric.
	Holds [NumKeyHolds]uint64
}

// counts returns ki's counts.
func (ki *keyIndex) counts() *KeyCounts {
	return &KeyCounts{Keys: len(ki.byName) - ki.idle.len(), Held: ki.holding, Holds: ki.holds}
}

// KeyStats describes one key of a queue in one partition.
type KeyStats struct {
	Key string
	// Waiting counts its unfinished tasks that hold no lease (ready,
	// delayed, or committed and waiting to be finalised); Leased its live
	// leases.
	Waiting, Leased int
	// Held is what holds it back at the asked time.
	Held KeyHold
}

// TopKeys returns the n keys of the queue with the most waiting tasks,
// then the most leased, then by name, as of now. It is O(keys log n).
func (s *State) TopKeys(q QueueKey, now Time, n int) []KeyStats {
	qi := s.queues[q]
	if qi == nil || qi.keys == nil || n <= 0 {
		return nil
	}
	ki := qi.keys
	order := func(a, b KeyStats) int {
		return cmp.Or(cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(b.Leased, a.Leased), cmp.Compare(a.Key, b.Key))
	}
	// top is a heap of the best n so far, the worst of them on top.
	var top []KeyStats
	less := func(i, j int) bool { return order(top[i], top[j]) > 0 }
	swap := func(i, j int) { top[i], top[j] = top[j], top[i] }
	for _, ks := range ki.byName {
		if ks.nopen == 0 {
			continue
		}
		k := KeyStats{Key: ks.name, Waiting: int(ks.nopen - ks.leases), Leased: int(ks.leases)}
		if len(top) == n && order(k, top[0]) >= 0 {
			continue
		}
		_, _, k.Held = ki.status(ks, now, true)
		if len(top) < n {
			top = append(top, k)
			siftUp(len(top)-1, less, swap)
			continue
		}
		top[0] = k
		siftDown(len(top), less, swap)
	}
	slices.SortFunc(top, order)
	return top
}
