package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/wal"
)

// LSNRange is the inclusive range of LSNs First..Last. The zero value is
// the empty range.
type LSNRange struct{ First, Last uint64 }

// IsZero reports whether r is the empty range.
func (r LSNRange) IsZero() bool { return r == LSNRange{} }

// String is "First-Last", the form ParseLSNRange reads.
func (r LSNRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParseLSNRange reads "FIRST-LAST" (two LSNs, 1 <= FIRST <= LAST).
func ParseLSNRange(s string) (LSNRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(a, 10, 64)
	last, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || first < 1 || first > last {
		return LSNRange{}, fmt.Errorf("%q is not an lsn range: want FIRST-LAST, two lsns with 1 <= FIRST <= LAST (e.g. 251-501)", s)
	}
	return LSNRange{First: first, Last: last}, nil
}

// LostRecordsError is Recover's refusal to start when the log ends before
// records it is known to have held durably, and so acknowledged work:
//
//   - a snapshot that verifies ends after the log's last record. A
//     snapshot is saved only once the log holds every record up to its LSN
//     durably (or, with fsync off, written);
//   - the log's own record of how far it reached says so (the file WAL's
//     tail file: written at every new segment and at a clean close), and
//     a segment or the end of one is gone.
//
// Records after the last one known may be gone too; nothing tells.
//
// Serving the log as it is would answer as if those records had never
// been: an acknowledged task missing, its request id free to create a new
// one. Recover does that only when Config.AcceptLostRecords is exactly
// Lost.
type LostRecordsError struct {
	// Snapshot names the newest snapshot that verifies and ends after the
	// log (a path in embedded mode); SnapshotLSN is its LSN. Both are
	// zero when no snapshot does.
	Snapshot    string
	SnapshotLSN uint64
	// Missing is what the log itself records it lacks (nil when it does
	// not know, or lacks nothing).
	Missing *wal.Missing
	// LogLastLSN is the log's last record (0 for an empty log).
	LogLastLSN uint64
	// Lost is LogLastLSN+1 up to the last record known: SnapshotLSN or
	// Missing.Last, whichever is later.
	Lost LSNRange
	// Accepted is Config.AcceptLostRecords when it was set to another
	// range; zero otherwise.
	Accepted LSNRange
}

func (e *LostRecordsError) Error() string {
	var known []string
	if e.Snapshot != "" {
		known = append(known, fmt.Sprintf("%s verifies and holds the state up to lsn %d", e.Snapshot, e.SnapshotLSN))
	}
	if e.Missing != nil {
		known = append(known, e.Missing.String())
	}
	msg := fmt.Sprintf("coordinator: cannot start: the log ends at lsn %d, but %s: "+
		"records %s (at least) are gone from the log, and acknowledged work with them",
		e.LogLastLSN, strings.Join(known, "; and "), e.Lost)
	if !e.Accepted.IsZero() {
		msg += fmt.Sprintf("; the loss accepted, %s, is not this one, so nothing was accepted", e.Accepted)
	}
	return msg
}
