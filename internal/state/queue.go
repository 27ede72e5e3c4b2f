package state

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// The statistics of a queue are kept up to date as records are applied, so
// that asking for them never scans the queue's tasks and a replay rebuilds
// them exactly (docs/design/state-machine.md, "Queues").

// Pause says who paused a queue, when and why. A paused queue leases
// nothing but finalisations of COMMITTED tasks; it still takes submits.
type Pause struct {
	By     string
	Reason string
	At     Time
}

// Event is something that happens to a queue's tasks and is counted over
// the recent past.
type Event uint8

const (
	// EventSubmitted: a task was created (TaskCreated).
	EventSubmitted Event = iota
	// EventCompleted: a task became COMPLETED.
	EventCompleted
	// EventFailed: a task became FAILED (its attempts ran out, or its
	// worker failed it permanently).
	EventFailed
	// EventLeaseExpired: a lease expired (LeaseExpired), whatever followed.
	EventLeaseExpired

	// NumEvents is the number of kinds of Event.
	NumEvents
)

var eventNames = [NumEvents]string{"submitted", "completed", "failed", "lease_expired"}

func (e Event) String() string {
	if e < NumEvents {
		return eventNames[e]
	}
	return "Event(?)"
}

// EventCounts counts each kind of Event.
type EventCounts [NumEvents]uint64

// Bucket widths of the two rings of event counts. The last minute is
// counted in 10-second buckets, the last hour in 1-minute buckets.
const (
	fineWidth    = Time(10 * time.Second)
	fineBuckets  = 6
	coarseWidth  = Time(time.Minute)
	coarseBucket = 60
)

// Bucket counts the events of one interval: number N of its width, the
// interval [N*width, (N+1)*width) in Unix time.
type Bucket struct {
	N int64
	C [NumEvents]uint32
}

func (b *Bucket) empty() bool { return b.C == [NumEvents]uint32{} }

// ring counts events in len(b) consecutive buckets of one width: bucket
// number n lives in slot n mod len(b), and a slot holding an older number is
// reset when a later bucket needs it. An event older than the whole ring
// (the clock went back that far) is not counted.
type ring []Bucket

func (r ring) add(n int64, e Event) {
	b := &r[n%int64(len(r))]
	switch {
	case b.N == n:
	case b.N < n:
		*b = Bucket{N: n}
	default:
		return
	}
	b.C[e]++
}

// sum adds the buckets numbered from-to (inclusive) into c.
func (r ring) sum(from, to int64, c *EventCounts) {
	for i := range r {
		if b := &r[i]; b.N >= from && b.N <= to {
			for e, v := range b.C {
				c[e] += uint64(v)
			}
		}
	}
}

// newest is the largest bucket number with a count, or -1.
func (r ring) newest() int64 {
	n := int64(-1)
	for i := range r {
		if !r[i].empty() {
			n = max(n, r[i].N)
		}
	}
	return n
}

// events holds a queue's recent event counts.
type events struct {
	fine   [fineBuckets]Bucket
	coarse [coarseBucket]Bucket
}

func bucketOf(at, width Time) int64 {
	if at < 0 {
		return -1
	}
	return int64(at / width)
}

func (ev *events) add(at Time, e Event) {
	if at < 0 {
		return
	}
	ring(ev.fine[:]).add(bucketOf(at, fineWidth), e)
	ring(ev.coarse[:]).add(bucketOf(at, coarseWidth), e)
}

// quietSince reports whether no event was counted at or after since.
func (ev *events) quietSince(since Time) bool {
	n := ring(ev.coarse[:]).newest()
	return n < 0 || Time(n+1)*coarseWidth <= since
}

// ageIndex counts the WAITING tasks of a queue by the millisecond since
// which each is due (max of creation and NotBefore), in a heap of the
// distinct milliseconds so that the earliest is at hand: the oldest waiting
// task's age without a scan.
type ageIndex struct {
	slots map[int64]*ageSlot
	posHeap[*ageSlot]
}

type ageSlot struct {
	ms    int64
	count int32
	pos   int32
}

func (a *ageIndex) Less(i, j int) bool { return a.items[i].ms < a.items[j].ms }

func (s *ageSlot) heapPos() *int32 { return &s.pos }

// dueMillis is the millisecond since which a WAITING task is due.
func dueMillis(t *Task) int64 { return int64(max(t.CreatedAt, t.NotBefore)) / int64(time.Millisecond) }

func (a *ageIndex) add(ms int64) {
	if a.slots == nil {
		a.slots = make(map[int64]*ageSlot)
	}
	s := a.slots[ms]
	if s == nil {
		s = &ageSlot{ms: ms}
		a.slots[ms] = s
		heap.Push(a, s)
	}
	s.count++
}

func (a *ageIndex) remove(ms int64) {
	s := a.slots[ms]
	if s == nil {
		panic("state: waiting-age index lost a task")
	}
	if s.count--; s.count == 0 {
		heap.Remove(a, int(s.pos))
		delete(a.slots, ms)
	}
}

// oldest is the earliest millisecond a waiting task is due since, if any.
func (a *ageIndex) oldest() (int64, bool) {
	if len(a.items) == 0 {
		return 0, false
	}
	return a.items[0].ms, true
}

// QueueStats describes one queue at one time.
type QueueStats struct {
	Key QueueKey
	// Now is the time the statistics are for.
	Now Time
	// Tasks counts the queue's tasks by state (index: TaskState).
	Tasks [NumStates]int
	// Leases is the number of leases held now (LEASED tasks, and COMMITTED
	// ones being finalised).
	Leases int
	// OldestDue is the time since which the queue's oldest waiting task
	// that is due at the asked time has been due (to the millisecond), or
	// 0 if none is due.
	OldestDue Time
	// Paused is set while the queue is paused.
	Paused *Pause
	// Limits is set while the queue has flow control.
	Limits *QueueLimits
	// Keys counts the queue's keys (nil: none, and no key setting), and
	// KeyWeights are their fair weights other than 1, ordered by key.
	Keys       *KeyCounts
	KeyWeights []KeyWeight
	// LastMinute, Last5Minutes and LastHour count the events of the
	// buckets that end after the asked time minus the window: the current
	// bucket, partly elapsed, and those before it (so the last minute
	// covers 50 to 60 seconds, the last 5 minutes and hour 4 to 5 and 59
	// to 60 minutes).
	LastMinute, Last5Minutes, LastHour EventCounts
	// PerMinute counts the events of each of the last 60 minutes, oldest
	// first, the last one the current minute.
	PerMinute [coarseBucket]EventCounts
}

// Waiting is the number of tasks in state WAITING.
func (q *QueueStats) Waiting() int { return q.Tasks[Waiting] }

// Total is the number of tasks of the queue.
func (q *QueueStats) Total() int {
	n := 0
	for _, c := range q.Tasks {
		n += c
	}
	return n
}

func (qi *queueIndex) total() int {
	n := 0
	for _, c := range qi.counts {
		n += c
	}
	return n
}

func (qi *queueIndex) stats(now Time) QueueStats {
	st := QueueStats{Key: qi.key, Now: now, Tasks: qi.counts, Leases: qi.leases}
	if qi.paused != nil {
		p := *qi.paused
		st.Paused = &p
	}
	if l := qi.limits; l != nil {
		q := l.QueueLimits
		st.Limits = &q
	}
	if qi.keys != nil {
		st.Keys = qi.keys.counts()
		st.KeyWeights = qi.keys.keyWeights()
	}
	if ms, ok := qi.ages.oldest(); ok {
		if due := Time(ms) * Time(time.Millisecond); due <= now {
			st.OldestDue = due
		}
	}
	f := bucketOf(now, fineWidth)
	ring(qi.events.fine[:]).sum(f-fineBuckets+1, f, &st.LastMinute)
	c := bucketOf(now, coarseWidth)
	ring(qi.events.coarse[:]).sum(c-4, c, &st.Last5Minutes)
	ring(qi.events.coarse[:]).sum(c-coarseBucket+1, c, &st.LastHour)
	for i := range st.PerMinute {
		n := c - coarseBucket + 1 + int64(i)
		ring(qi.events.coarse[:]).sum(n, n, &st.PerMinute[i])
	}
	return st
}

// Queues returns the statistics of every queue the state knows (one with
// tasks, paused, with limits, or with events in the last hour), as of now, ordered by
// namespace and queue. It is O(queues), whatever the number of tasks.
func (s *State) Queues(now Time) []QueueStats {
	out := make([]QueueStats, 0, len(s.queues))
	for _, qi := range s.queues {
		out = append(out, qi.stats(now))
	}
	slices.SortFunc(out, func(a, b QueueStats) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Queue, b.Key.Queue))
	})
	return out
}

// Queue returns the statistics of one queue as of now, if the state knows
// it.
func (s *State) Queue(k QueueKey, now Time) (QueueStats, bool) {
	qi := s.queues[k]
	if qi == nil {
		return QueueStats{}, false
	}
	return qi.stats(now), true
}

// Paused returns how a queue was paused, or nil if it is not.
func (s *State) Paused(k QueueKey) *Pause {
	if qi := s.queues[k]; qi != nil && qi.paused != nil {
		p := *qi.paused
		return &p
	}
	return nil
}

// event counts e for t's queue at time at.
func (s *State) event(t *Task, e Event, at Time) {
	s.queue(t).events.add(at, e)
}

// QueueImage is what a snapshot keeps of a queue beyond its tasks: its
// pause, its limits and token bucket, and its recent event counts (only
// the buckets that count).
type QueueImage struct {
	Key    QueueKey
	Paused *Pause
	Limits *QueueLimits
	// Bucket is the token bucket of a rate limit (zero without one).
	Bucket TokenBucket
	Fine   []Bucket
	Coarse []Bucket
	// Keys is what the state keeps of the queue's keys beyond its tasks
	// (nil: the queue has no key index).
	Keys *KeysImage
}

func nonEmpty(r ring) []Bucket {
	var out []Bucket
	for _, b := range r {
		if !b.empty() {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Bucket) int { return cmp.Compare(a.N, b.N) })
	return out
}

// image returns the queue's image, or false if a snapshot need not keep
// anything of it beyond its tasks.
func (qi *queueIndex) image() (QueueImage, bool) {
	img := QueueImage{Key: qi.key, Fine: nonEmpty(qi.events.fine[:]), Coarse: nonEmpty(qi.events.coarse[:])}
	if qi.paused != nil {
		p := *qi.paused
		img.Paused = &p
	}
	if l := qi.limits; l != nil {
		q := l.QueueLimits
		img.Limits, img.Bucket = &q, l.bucket
	}
	if qi.keys != nil {
		img.Keys = qi.keys.image()
	}
	return img, img.Paused != nil || img.Limits != nil || img.Keys != nil || len(img.Fine) > 0 || len(img.Coarse) > 0
}

// queueImages returns the images of the queues that need one, ordered by
// key.
func (s *State) queueImages() []QueueImage {
	var out []QueueImage
	for _, qi := range s.queues {
		if img, ok := qi.image(); ok {
			out = append(out, img)
		}
	}
	slices.SortFunc(out, func(a, b QueueImage) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Queue, b.Key.Queue))
	})
	return out
}

// restore puts a snapshot's image of the queue back, into s.
func (qi *queueIndex) restore(s *State, img QueueImage) string {
	if img.Paused != nil {
		p := *img.Paused
		qi.paused = &p
	}
	if why := qi.restoreLimits(img.Limits, img.Bucket); why != "" {
		return why
	}
	if img.Keys != nil {
		if why := s.restoreKeys(qi, img.Keys); why != "" {
			return why
		}
	}
	for _, set := range []struct {
		r  ring
		bs []Bucket
	}{{qi.events.fine[:], img.Fine}, {qi.events.coarse[:], img.Coarse}} {
		for _, b := range set.bs {
			if b.N < 0 {
				return "a bucket has a negative number"
			}
			slot := &set.r[b.N%int64(len(set.r))]
			if !slot.empty() {
				return "two buckets share a slot"
			}
			*slot = b
		}
	}
	return ""
}

// maybeForget removes a queue's index once nothing is left to say about it
// (forgettable).
func (s *State) maybeForget(qi *queueIndex, at Time) {
	if forgettable(qi, at) {
		delete(s.queues, qi.key)
	}
}

// forgettable reports whether nothing is left to say about a queue at at:
// no task, not paused, no limits, and no event within the hour before at.
func forgettable(qi *queueIndex, at Time) bool {
	return qi.total() == 0 && qi.paused == nil && qi.limits == nil && qi.keys == nil && qi.events.quietSince(at-coarseWidth*coarseBucket)
}

// Forgettable reports whether a purge at at would forget a queue: whether
// one has nothing left to say then (no task, not paused, no limits, and no
// event within the hour before). It changes nothing.
func (s *State) Forgettable(at Time) bool {
	for _, qi := range s.queues {
		if forgettable(qi, at) {
			return true
		}
	}
	return false
}
