package state

import "fmt"

// TasksPurgedRange is TasksPurged over one slice of the creation order: it
// drops the terminal tasks last updated before Before (unless an outbox's
// row holds their request id) that were created
// after AfterLSN and at or before ThroughLSN, and forgets the queues with
// nothing left to report at At, as TasksPurged does. The coordinator
// applies the retention period as a run of these, each over a slice that
// State.PurgeSlice bounds, so that no record holds the partition for long
// however many tasks expire at once; between them it serves requests. The
// range is part of the record, so a replay drops exactly the same tasks.
type TasksPurgedRange struct {
	Before Time
	At     Time
	// AfterLSN and ThroughLSN bound the creation LSNs of the tasks
	// considered: AfterLSN < CreatedLSN <= ThroughLSN. An empty range
	// (AfterLSN = ThroughLSN) drops nothing and only forgets queues.
	AfterLSN   uint64
	ThroughLSN uint64
}

func (*TasksPurgedRange) Task() string { return "" }

// apply is O(tasks in the range + queues).
func (r *TasksPurgedRange) apply(s *State, lsn uint64) string {
	switch {
	case r.Before > r.At:
		return fmt.Sprintf("purge cut-off %s is after the purge time %s", r.Before, r.At)
	case r.AfterLSN > r.ThroughLSN:
		return fmt.Sprintf("range after lsn %d ends before it, through lsn %d", r.AfterLSN, r.ThroughLSN)
	case r.ThroughLSN >= lsn:
		return fmt.Sprintf("range through lsn %d reaches this record's lsn %d", r.ThroughLSN, lsn)
	}
	s.purge(r.Before, r.At, r.AfterLSN, r.ThroughLSN)
	return ""
}
