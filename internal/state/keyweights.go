package state

import (
	"cmp"
	"fmt"
	"slices"
)

// Weights of fair leasing (docs/design/keys.md, "Fair leasing"): a key of
// weight w takes w times the turns of a key of weight 1 (its pass moves
// by Stride/w per lease). Weights are set per queue with its limits
// (QueueLimited.KeyWeights, the whole set each time) and kept while set,
// whether the key has tasks or not.

// Bounds on key weights.
const (
	// MaxKeyWeight bounds a key's weight.
	MaxKeyWeight = 1000
	// MaxKeyWeights bounds the keys of a queue with a weight of their own.
	MaxKeyWeights = 1000
)

// KeyWeight is the fair weight of one key (1, the default, is never
// listed).
type KeyWeight struct {
	Key    string
	Weight uint32
}

// checkKeyWeights says why ws cannot be a queue's set of weights, or "":
// at most MaxKeyWeights, ordered by key without repeats, each key a valid
// one and each weight in 2..MaxKeyWeight.
func checkKeyWeights(ws []KeyWeight) string {
	if len(ws) > MaxKeyWeights {
		return fmt.Sprintf("%d key weights, over the limit of %d", len(ws), MaxKeyWeights)
	}
	for i, w := range ws {
		switch {
		case w.Key == "" || len(w.Key) > MaxKeyBytes:
			return fmt.Sprintf("key weight %d names key %q", i, w.Key)
		case w.Weight < 2 || w.Weight > MaxKeyWeight:
			return fmt.Sprintf("key %q has weight %d, outside 2..%d (1 is the default, not listed)", w.Key, w.Weight, MaxKeyWeight)
		case i > 0 && ws[i-1].Key >= w.Key:
			return fmt.Sprintf("key weights are not ordered by key without repeats at %q", w.Key)
		}
	}
	return ""
}

// weight is key's weight in ki (1 unless set).
func (ki *keyIndex) weight(key string) uint32 {
	if w, ok := ki.weights[key]; ok {
		return w
	}
	return 1
}

// setKeyWeights replaces the weights of qi's keys by ws (checked). It
// moves no turn: the new weights apply from each key's next lease. The
// caller drops a key index left empty (maybeDropKeys).
func (s *State) setKeyWeights(qi *queueIndex, ws []KeyWeight) {
	ki := qi.keys
	if ki == nil {
		if len(ws) == 0 {
			return
		}
		ki = s.keysOf(qi)
	}
	for k := range ki.weights {
		s.held -= heldByKeyWeight(k)
	}
	ki.weights = nil
	if len(ws) > 0 {
		ki.weights = make(map[string]uint32, len(ws))
		for _, w := range ws {
			ki.weights[w.Key] = w.Weight
			s.held += heldByKeyWeight(w.Key)
		}
	}
}

// keyWeights returns ki's weights, ordered by key.
func (ki *keyIndex) keyWeights() []KeyWeight {
	if len(ki.weights) == 0 {
		return nil
	}
	out := make([]KeyWeight, 0, len(ki.weights))
	for k, w := range ki.weights {
		out = append(out, KeyWeight{k, w})
	}
	slices.SortFunc(out, func(a, b KeyWeight) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// KeyWeights returns the fair weights of a queue's keys in this partition,
// ordered by key (nil: every key weighs 1).
func (s *State) KeyWeights(k QueueKey) []KeyWeight {
	if qi := s.queues[k]; qi != nil && qi.keys != nil {
		return qi.keys.keyWeights()
	}
	return nil
}
