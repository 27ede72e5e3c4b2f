package state

import "time"

// Time is an absolute instant in Unix nanoseconds. Records carry every time
// they need as a Time chosen by the coordinator before the append, so apply
// never reads a clock and replay is deterministic.
type Time int64

// TimeOf converts a time.Time to a Time.
func TimeOf(t time.Time) Time { return Time(t.UnixNano()) }

// Std converts t to a time.Time in UTC. The zero Time is the zero time.Time.
func (t Time) Std() time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

func (t Time) String() string { return t.Std().Format(time.RFC3339Nano) }

// Record is one fact in the log. Every mutation of State is exactly one
// Record applied by State.Apply. The record types are the structs of this
// package that implement it, one file each (record_*.go): the struct, its
// Task method and its apply method, which holds the record's precondition
// and effect. Their numbers, names and encodings are in package record
// (internal/record/registry.go); docs/design/records.md describes them all.
type Record interface {
	// Task is the id of the task the record touches ("" for a record about
	// the partition as a whole, such as Fence and TasksPurgedRange).
	Task() string
	// apply checks the record's preconditions against s and, if they hold,
	// applies it as the record at lsn and returns "". Otherwise it returns
	// why the record does not apply, having changed nothing. It reads
	// nothing but s and the record: no clock, no randomness, so that a
	// replay makes the same decisions.
	apply(s *State, lsn uint64) string
}

// Creates returns the tasks record r creates in its partition: a
// TaskCreated's, a TasksSubmitted's Tasks, a commit's or a completion's
// Spawn (nil for none; a record's deliveries are created by another
// partition's TasksSubmitted).
func Creates(r Record) []TaskCreated {
	switch r := r.(type) {
	case *TaskCreated:
		return []TaskCreated{*r}
	case *TasksSubmitted:
		return r.Tasks
	case *TaskCommitted:
		return r.Spawn
	case *TaskCompleted:
		return r.Spawn
	}
	return nil
}

// RetryPolicy decides what a failed attempt leads to.
type RetryPolicy struct {
	// MaxAttempts is the number of leases a task may be granted before a
	// failure or an expiry fails it for good. At least 1. A committed task
	// is finalised whatever its attempt count.
	MaxAttempts uint32
	// InitialBackoff is the wait before the second attempt.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts.
	MaxBackoff time.Duration
	// Multiplier grows the wait after each attempt (>= 1).
	Multiplier float64
}

// Backoff is the wait before the attempt that follows attempt n (n >= 1):
// InitialBackoff * Multiplier^(n-1), capped at MaxBackoff.
func (p RetryPolicy) Backoff(n uint32) time.Duration {
	d := float64(p.InitialBackoff)
	for i := uint32(1); i < n; i++ {
		d *= p.Multiplier
		if d >= float64(p.MaxBackoff) {
			return p.MaxBackoff
		}
	}
	if d > float64(p.MaxBackoff) {
		return p.MaxBackoff
	}
	return time.Duration(d)
}
