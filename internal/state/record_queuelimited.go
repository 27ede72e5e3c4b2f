package state

// QueueLimited replaces the flow control of a queue in this partition
// (docs/design/state-machine.md, "Flow control"): MaxConcurrency, RateMilli and
// Burst are this partition's share, which LeaseGranted enforces; the Queue…
// fields are the queue-wide limits as set, split over Partitions partitions
// (1 in embedded mode), kept for display. A zero limit is none; a record
// with no limit at all removes them. The queue need not have a task: in
// cluster mode the limits are recorded in every partition of the queue.
//
// A token bucket starts full; a new rate keeps the level the bucket had
// reached, capped at the new burst.
type QueueLimited struct {
	Namespace string
	Queue     string

	MaxConcurrency uint32
	RateMilli      uint64
	Burst          uint32

	QueueMaxConcurrency uint32
	QueueRateMilli      uint64
	QueueBurst          uint32
	Partitions          uint32

	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time

	// The flow control of the queue's keys (docs/design/keys.md), whole
	// in every partition: at most KeyMaxConcurrency live leases of a
	// key, a bucket of KeyBurst refilled at KeyRateMilli per key, a key's
	// tasks one at a time in creation order (KeyOrdered), turns across
	// the keys (Fair).
	KeyMaxConcurrency uint32
	KeyRateMilli      uint64
	KeyBurst          uint32
	KeyOrdered        bool
	Fair              bool
	// KeyWeights is the keys' fair weights other than 1, ordered by key:
	// the whole set, replacing the queue's (docs/design/keys.md).
	KeyWeights []KeyWeight
}

func (*QueueLimited) Task() string { return "" }

// Limits returns what the record sets.
func (r *QueueLimited) Limits() QueueLimits {
	return QueueLimits{
		Limits:     Limits{MaxConcurrency: r.MaxConcurrency, RateMilli: r.RateMilli, Burst: r.Burst},
		Queue:      Limits{MaxConcurrency: r.QueueMaxConcurrency, RateMilli: r.QueueRateMilli, Burst: r.QueueBurst},
		Partitions: r.Partitions,
		Keys: KeyLimits{MaxConcurrency: r.KeyMaxConcurrency, RateMilli: r.KeyRateMilli, Burst: r.KeyBurst,
			Ordered: r.KeyOrdered, Fair: r.Fair},
		By:     r.By,
		Reason: r.Reason,
		At:     r.At,
	}
}

func (r *QueueLimited) apply(s *State, _ uint64) string {
	if r.Namespace == "" || r.Queue == "" {
		return "namespace and queue must be set"
	}
	q := r.Limits()
	if why := q.check(); why != "" {
		return why
	}
	if why := checkKeyWeights(r.KeyWeights); why != "" {
		return why
	}
	qi := s.queueOf(r.Namespace, r.Queue)
	qi.setLimits(q)
	s.setKeyLimits(qi, q.Keys, r.At)
	s.setKeyWeights(qi, r.KeyWeights)
	s.maybeDropKeys(qi)
	s.maybeForget(qi, r.At)
	return ""
}
