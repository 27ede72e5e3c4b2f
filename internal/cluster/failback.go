package cluster

import (
	"fmt"
	"time"
)

// failbackChecks is the fewest readiness checks in a row a database
// earlier in the list must pass, besides lasting DBOptions.FailbackAfter,
// before the pool moves back to it: with a slow check interval the
// duration alone could rest on one or two answers.
const failbackChecks = 3

// failback decides when a pool that left a database of its list moves back
// to it (docs/design/cluster.md, "A replicated database"). Every database earlier
// in the list than the current one is checked each interval; a run of
// passed checks starts at the first one that passes and ends at the first
// that fails. The pool moves back to the earliest database whose run has
// lasted after and counts failbackChecks checks at least: a server that
// rejoined and flaps (a crash loop, a joiner that falls back to a state
// transfer) never gets there, one that stays synced does.
//
// It is pure: the caller passes the time of each check (the pool's clock).
type failback struct {
	after time.Duration
	runs  map[int]run
}

// run is a database's passed checks in a row.
type run struct {
	since  time.Time // the first passed check of the run
	checks int
}

func newFailback(after time.Duration) *failback {
	return &failback{after: after, runs: make(map[int]run)}
}

// observe records a check of database idx at now: passed (ready) or not.
// It reports whether the check began a run (the database is ready after
// not being) or ended one, for the log.
func (f *failback) observe(idx int, ready bool, now time.Time) (began, ended bool) {
	r, running := f.runs[idx]
	if !ready {
		delete(f.runs, idx)
		return false, running
	}
	if !running {
		r.since = now
	}
	r.checks++
	f.runs[idx] = r
	return !running, false
}

// due returns the database below cur the pool moves to at now, and why;
// ok is false when it stays. That is the earliest database in a run, if
// its run qualifies: while an earlier database's run is under way, a
// later one's waits (at most after, by when the earlier run qualifies or
// has ended), so that the pool does not move twice in a row when both
// come back together (a Galera joiner and its donor).
func (f *failback) due(cur int, now time.Time) (idx int, why string, ok bool) {
	for i := range cur {
		r, running := f.runs[i]
		if !running {
			continue
		}
		held := now.Sub(r.since)
		if r.checks < failbackChecks || held < f.after {
			return 0, "", false
		}
		return i, fmt.Sprintf("it is earlier in the list and passed every readiness check for %v (%d checks in a row; the threshold is %v)",
			held.Round(time.Millisecond), r.checks, f.after), true
	}
	return 0, "", false
}

// keepBelow forgets the runs of the databases at cur and after it: they
// are not checked while the pool is on cur, so a run of theirs would not
// be of checks in a row when the pool leaves cur for a later database.
func (f *failback) keepBelow(cur int) {
	for i := range f.runs {
		if i >= cur {
			delete(f.runs, i)
		}
	}
}
