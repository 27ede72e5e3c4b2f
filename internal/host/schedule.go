package host

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// Defaults of Schedule.
const (
	DefaultSnapshotEveryRecords  = 1_000_000
	DefaultSnapshotEvery         = 10 * time.Minute
	DefaultSnapshotCheckInterval = time.Second
)

// Schedule says when a partition is snapshotted. Zero fields take their
// defaults.
type Schedule struct {
	// EveryRecords: a snapshot once this many records were appended since
	// the last one (default 1,000,000).
	EveryRecords uint64
	// Every: a snapshot this long after the last one, if any record was
	// appended since (default 10 min).
	Every time.Duration
	// Either way, a snapshot is not due until ten times the last one's
	// duration has passed since it started (snapshotSpacing).
	// CheckInterval is how often the schedule is checked (default 1 s, at
	// most Every).
	CheckInterval time.Duration
	// Retention: COMPLETED, FAILED and DEAD tasks leave the state at the
	// first purge after they are this old (default 7 days); their request
	// ids stop deduplicating then.
	Retention time.Duration
	// PurgeEvery is how often the retention period is applied between
	// snapshots (each snapshot applies it too): default a tenth of
	// Retention, at least CheckInterval and at most Every. A purge that
	// finds nothing to drop writes nothing.
	PurgeEvery time.Duration
	// Keep is how many snapshots are kept (default 2); log records below
	// the oldest are deleted.
	Keep int
	// Disabled turns the schedule off; Host.Snapshot still works.
	Disabled bool
}

func (s *Schedule) withDefaults() error {
	if s.Every < 0 || s.CheckInterval < 0 || s.Retention < 0 || s.PurgeEvery < 0 || s.Keep < 0 {
		return fmt.Errorf("host: snapshot interval (%v), check interval (%v), retention (%v), purge interval (%v) and snapshots kept (%d) must not be negative",
			s.Every, s.CheckInterval, s.Retention, s.PurgeEvery, s.Keep)
	}
	s.EveryRecords = cmp.Or(s.EveryRecords, DefaultSnapshotEveryRecords)
	s.Every = cmp.Or(s.Every, DefaultSnapshotEvery)
	s.CheckInterval = cmp.Or(s.CheckInterval, DefaultSnapshotCheckInterval)
	s.CheckInterval = min(s.CheckInterval, s.Every)
	s.Retention = cmp.Or(s.Retention, coordinator.DefaultRetention)
	s.PurgeEvery = cmp.Or(s.PurgeEvery, min(max(s.Retention/10, s.CheckInterval), s.Every))
	s.Keep = cmp.Or(s.Keep, coordinator.DefaultSnapshotsKept)
	return nil
}

// PurgeInterval is how often the retention period is applied with s (its
// defaults filled in): the longest a finished task past its retention
// keeps its memory, and so the wait a refusal for a full memory budget
// advises (coordinator.MemoryBudget). 0 if s is invalid.
func (s Schedule) PurgeInterval() time.Duration {
	if s.withDefaults() != nil {
		return 0
	}
	return s.PurgeEvery
}

// snapshotSpacing bounds the share of time spent on snapshots: after a
// snapshot that took d, the next is not due until snapshotSpacing × d
// after the last one started. A snapshot writes every task the state
// holds; with a large state (a backlog of millions of waiting tasks) and
// a short interval, snapshot after snapshot would take the server's time
// and make every request wait, and the backlog, and so each snapshot,
// would grow. Spaced this way, snapshots take at most a tenth of the time
// whatever the state's size, and the log between them grows instead.
const snapshotSpacing = 10

// due reports whether a snapshot is due: the log is at lastLSN, the last
// snapshot (or the opening state) at snapLSN, started (or tried) at snapAt
// and taking took.
func (s Schedule) due(lastLSN, snapLSN uint64, snapAt time.Time, took time.Duration, now time.Time) bool {
	if lastLSN <= snapLSN || now.Sub(snapAt) < snapshotSpacing*took {
		return false
	}
	return lastLSN-snapLSN >= s.EveryRecords || now.Sub(snapAt) >= s.Every
}
