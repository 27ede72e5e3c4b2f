package state

import "fmt"

// Flow control of a queue (docs/design/state-machine.md, "Flow control"): at most
// MaxConcurrency leases live at once, and leases granted at most at Rate
// per second with bursts of Burst (a token bucket). A QueueLimited record
// sets them; every LeaseGranted of the queue takes a slot and a token, and
// does not apply without one, so no replay can exceed them either.
//
// The bucket is integer arithmetic only: its level counts tokens in units
// of 1/TokenUnit, and a rate of r milli-leases per second adds exactly r
// units per nanosecond. Apply stays bit-for-bit deterministic.

// TokenUnit is one token in bucket units: 1000 (milli-leases) × 1e9 (ns
// per second), so that Rate units accrue per nanosecond.
const TokenUnit = int64(1_000_000_000_000)

// Bounds on limits, which keep the bucket's arithmetic within int64 (a full
// bucket is at most MaxBurst × TokenUnit = 1e18 units).
const (
	// MaxConcurrencyLimit bounds Limits.MaxConcurrency.
	MaxConcurrencyLimit = 1_000_000
	// MaxBurst bounds Limits.Burst.
	MaxBurst = 1_000_000
	// MaxRateMilli bounds Limits.RateMilli: a million leases per second.
	MaxRateMilli = 1_000_000_000
)

// Limits are the flow-control limits of a queue. A zero field is no limit.
type Limits struct {
	// MaxConcurrency is the most leases of the queue live at once (LEASED
	// tasks and COMMITTED ones being finalised); 0: no limit.
	MaxConcurrency uint32
	// RateMilli is the rate of the token bucket in milli-leases per second
	// (1500: 1.5 leases per second); 0: no rate limit.
	RateMilli uint64
	// Burst is the capacity of the token bucket in leases: set exactly
	// when RateMilli is.
	Burst uint32
}

// None reports whether l limits nothing.
func (l Limits) None() bool { return l == Limits{} }

// check says why l is not a valid set of limits, or "".
func (l Limits) check() string {
	switch {
	case l.MaxConcurrency > MaxConcurrencyLimit:
		return fmt.Sprintf("max concurrency %d is above %d", l.MaxConcurrency, MaxConcurrencyLimit)
	case l.RateMilli > MaxRateMilli:
		return fmt.Sprintf("rate %d milli-leases per second is above %d", l.RateMilli, MaxRateMilli)
	case l.Burst > MaxBurst:
		return fmt.Sprintf("burst %d is above %d", l.Burst, MaxBurst)
	case (l.RateMilli == 0) != (l.Burst == 0):
		return fmt.Sprintf("rate %d and burst %d: a rate needs a burst and a burst a rate", l.RateMilli, l.Burst)
	}
	return ""
}

// within says why share is not a share of l (each limit set exactly when
// l's is, and not above it), or "".
func (share Limits) within(l Limits) string {
	switch {
	case (share.MaxConcurrency == 0) != (l.MaxConcurrency == 0) || share.MaxConcurrency > l.MaxConcurrency:
		return fmt.Sprintf("partition max concurrency %d is not a share of the queue's %d", share.MaxConcurrency, l.MaxConcurrency)
	case (share.RateMilli == 0) != (l.RateMilli == 0) || share.RateMilli > l.RateMilli:
		return fmt.Sprintf("partition rate %d is not a share of the queue's %d", share.RateMilli, l.RateMilli)
	case share.Burst > l.Burst:
		return fmt.Sprintf("partition burst %d is not a share of the queue's %d", share.Burst, l.Burst)
	}
	return ""
}

// QueueLimits is the flow control of a queue in one partition: the
// partition's share, which it enforces, and what it was split from.
type QueueLimits struct {
	// Limits is this partition's share.
	Limits
	// Queue is the queue-wide limits as set, split over Partitions
	// partitions (1 in embedded mode).
	Queue      Limits
	Partitions uint32
	// Keys is the flow control of the queue's keys (docs/design/keys.md):
	// whole in every partition, never split (a key's tasks are all in
	// one).
	Keys KeyLimits
	// By is who set them, Reason why, as given; At when.
	By     string
	Reason string
	At     Time
}

// check says why q is not a valid QueueLimits, or "".
func (q *QueueLimits) check() string {
	if why := q.Limits.check(); why != "" {
		return why
	}
	if why := q.Queue.check(); why != "" {
		return "queue-wide: " + why
	}
	if why := q.Limits.within(q.Queue); why != "" {
		return why
	}
	if !q.Limits.None() && q.Partitions == 0 {
		return "limits split over 0 partitions"
	}
	return q.Keys.Check()
}

// none reports whether q limits nothing, neither the queue nor its keys.
func (q *QueueLimits) none() bool { return q.Limits.None() && q.Keys.None() }

// TokenBucket is the state of a queue's rate limit: Level, in units of
// 1/TokenUnit token, as of Refilled (the latest time a record refilled it).
type TokenBucket struct {
	Level    int64
	Refilled Time
}

// limiter is a queue's limits and its token bucket.
type limiter struct {
	QueueLimits
	bucket TokenBucket
}

// capacity is the full bucket in units.
func (l *limiter) capacity() int64 { return int64(l.Burst) * TokenUnit }

// levelAt is the bucket's level at at, refilled at the rate since
// Refilled, without changing it. Time before Refilled (a clock that went
// back) adds nothing.
func (l *limiter) levelAt(at Time) int64 {
	b := l.bucket
	dt := int64(at - b.Refilled)
	if dt <= 0 || l.RateMilli == 0 {
		return b.Level
	}
	missing := l.capacity() - b.Level
	rate := int64(l.RateMilli)
	if missing <= 0 || dt >= (missing+rate-1)/rate {
		return l.capacity()
	}
	return b.Level + dt*rate // < capacity + rate: no overflow
}

// refill brings the bucket to at (never back).
func (l *limiter) refill(at Time) {
	l.bucket.Level = l.levelAt(at)
	l.bucket.Refilled = max(l.bucket.Refilled, at)
}

// room caps n by the free slots of a queue with leases live and the whole
// tokens in the bucket at now.
func (l *limiter) room(leases int, now Time, n int) int {
	if l.MaxConcurrency > 0 {
		n = min(n, int(l.MaxConcurrency)-leases)
	}
	if l.RateMilli > 0 {
		n = int(min(int64(n), l.levelAt(now)/TokenUnit))
	}
	return n
}

// admit says why one more lease at at would exceed the limits, or "".
func (l *limiter) admit(leases int, at Time) string {
	if l.MaxConcurrency > 0 && leases >= int(l.MaxConcurrency) {
		return fmt.Sprintf("the queue has %d live leases: its max concurrency here is %d", leases, l.MaxConcurrency)
	}
	if l.RateMilli > 0 && l.levelAt(at) < TokenUnit {
		return fmt.Sprintf("the queue's token bucket is empty at %s (rate %d milli-leases per second)", at, l.RateMilli)
	}
	return ""
}

// take takes the token of a lease granted at at, which admit allowed.
func (l *limiter) take(at Time) {
	if l.RateMilli > 0 {
		l.refill(at)
		l.bucket.Level -= TokenUnit
	}
}

// nextToken is when the bucket next holds a whole token, if it has none
// as of its last refill.
func (l *limiter) nextToken() (Time, bool) {
	if l.RateMilli == 0 || l.bucket.Level >= TokenUnit {
		return 0, false
	}
	rate := int64(l.RateMilli)
	return l.bucket.Refilled + Time((TokenUnit-l.bucket.Level+rate-1)/rate), true
}

// setLimits replaces the queue's limits with q (none: removes them). A
// bucket starts full; a new rate keeps the level the old one had reached
// at q.At, capped at the new burst. The key limits go to the key index
// (State.setKeyLimits).
func (qi *queueIndex) setLimits(q QueueLimits) {
	if q.none() {
		qi.limits = nil
		return
	}
	l := &limiter{QueueLimits: q}
	if l.RateMilli > 0 {
		l.bucket = TokenBucket{Level: l.capacity(), Refilled: q.At}
		if old := qi.limits; old != nil && old.RateMilli > 0 {
			old.refill(q.At)
			l.bucket = TokenBucket{Level: min(old.bucket.Level, l.capacity()), Refilled: old.bucket.Refilled}
		}
	}
	qi.limits = l
}

// restoreLimits puts a snapshot's limits and bucket back.
func (qi *queueIndex) restoreLimits(q *QueueLimits, b TokenBucket) string {
	if q == nil {
		if b != (TokenBucket{}) {
			return "a token bucket without limits"
		}
		return ""
	}
	if why := q.check(); why != "" {
		return why
	}
	if q.none() {
		return "limits that limit nothing"
	}
	l := &limiter{QueueLimits: *q, bucket: b}
	if b.Level < 0 || b.Level > l.capacity() || l.RateMilli == 0 && b != (TokenBucket{}) {
		return fmt.Sprintf("token bucket level %d is outside 0..%d", b.Level, l.capacity())
	}
	qi.limits = l
	return ""
}

// Limits returns the flow control of a queue in this partition, if it has
// any.
func (s *State) Limits(k QueueKey) (QueueLimits, bool) {
	if qi := s.queues[k]; qi != nil && qi.limits != nil {
		return qi.limits.QueueLimits, true
	}
	return QueueLimits{}, false
}

// Tokens is the number of whole tokens in the queue's bucket at now, and
// whether the queue has a rate limit.
func (s *State) Tokens(k QueueKey, now Time) (int64, bool) {
	if qi := s.queues[k]; qi != nil && qi.limits != nil && qi.limits.RateMilli > 0 {
		return qi.limits.levelAt(now) / TokenUnit, true
	}
	return 0, false
}

// limiterErrors checks a queue's limits and bucket.
func (qi *queueIndex) limiterErrors() []error {
	l := qi.limits
	if l == nil {
		return nil
	}
	var errs []error
	if why := l.check(); why != "" || l.none() {
		errs = append(errs, fmt.Errorf("queue %v has invalid limits %+v: %s", qi.key, l.QueueLimits, why))
	}
	if b := l.bucket; b.Level < 0 || b.Level > l.capacity() {
		errs = append(errs, fmt.Errorf("queue %v token bucket level %d is outside 0..%d", qi.key, b.Level, l.capacity()))
	}
	return errs
}

// Admits reports whether the queue's flow control admits one more lease at
// at (a queue without limits always does).
func (s *State) Admits(k QueueKey, at Time) bool {
	qi := s.queues[k]
	return qi == nil || qi.limits == nil || qi.limits.admit(qi.leases, at) == ""
}

// AdmitsKey reports whether the limits of t's key admit a lease of t, a
// schedulable task of the state, at at (a task without a key, or of a
// queue without key limits, always is; docs/design/keys.md).
func (s *State) AdmitsKey(t *Task, at Time) bool {
	qi := s.queues[*t.QueueKey]
	return qi == nil || qi.limits == nil || s.admitKey(qi, t, at) == ""
}
