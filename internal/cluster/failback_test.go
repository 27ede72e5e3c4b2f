package cluster

import (
	"strings"
	"testing"
	"time"
)

// The move back to an earlier database of the list: only after a run of
// passed checks that lasts FailbackAfter and counts failbackChecks checks;
// a failed check starts the count again; the earliest database that
// qualifies wins, and a later one waits while an earlier one is on its way;
// runs of databases the pool is not below are forgotten.
func TestFailback(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type check struct {
		idx   int
		ready bool
		at    float64
	}
	for _, c := range []struct {
		name   string
		after  time.Duration
		cur    int
		checks []check
		now    float64
		want   int // -1: no move
	}{
		{"no checks", 10 * time.Second, 1, nil, 100, -1},
		{"ready long enough", 10 * time.Second, 1, []check{{0, true, 0}, {0, true, 1}, {0, true, 5}, {0, true, 10}}, 10, 0},
		{"ready, not yet long enough", 10 * time.Second, 1, []check{{0, true, 0}, {0, true, 1}, {0, true, 5}, {0, true, 9.9}}, 9.9, -1},
		{"long enough but two checks", 10 * time.Second, 1, []check{{0, true, 0}, {0, true, 30}}, 30, -1},
		{"a failed check restarts the run", 10 * time.Second, 1, []check{{0, true, 0}, {0, true, 5}, {0, false, 6}, {0, true, 7}, {0, true, 12}, {0, true, 16}}, 16, -1},
		{"the restarted run qualifies", 10 * time.Second, 1, []check{{0, true, 0}, {0, true, 5}, {0, false, 6}, {0, true, 7}, {0, true, 12}, {0, true, 17}}, 17, 0},
		{"the earliest qualifying wins", 10 * time.Second, 2, []check{{1, true, 0}, {0, true, 1}, {1, true, 5}, {0, true, 6}, {1, true, 11}, {0, true, 11}}, 11, 0},
		{"a later one when the first is not ready", 10 * time.Second, 2, []check{{1, true, 0}, {0, false, 1}, {1, true, 5}, {0, false, 6}, {1, true, 11}, {0, false, 11}}, 11, 1},
		{"a later one waits while an earlier one's run is under way", 10 * time.Second, 2, []check{{1, true, 0}, {1, true, 5}, {0, true, 6}, {1, true, 11}, {0, true, 11}}, 11, -1},
		{"and moves once the earlier one fails", 10 * time.Second, 2, []check{{1, true, 0}, {1, true, 5}, {0, true, 6}, {1, true, 11}, {0, true, 11}, {0, false, 12}, {1, true, 12}}, 12, 1},
		{"not the current one or after it", 0, 1, []check{{1, true, 0}, {1, true, 1}, {1, true, 2}, {2, true, 0}, {2, true, 1}, {2, true, 2}}, 5, -1},
		{"zero after: at the third check", 0, 1, []check{{0, true, 0}, {0, true, 1}, {0, true, 2}}, 2, 0},
	} {
		fb := newFailback(c.after)
		for _, ch := range c.checks {
			fb.observe(ch.idx, ch.ready, at(ch.at))
		}
		idx, why, ok := fb.due(c.cur, at(c.now))
		if !ok {
			idx = -1
		}
		if idx != c.want {
			t.Errorf("%s: due = %d (%q), want %d", c.name, idx, why, c.want)
		}
		if ok && (!strings.Contains(why, "passed every readiness check") || !strings.Contains(why, c.after.String())) {
			t.Errorf("%s: why %q does not say what the database passed and the threshold", c.name, why)
		}
	}
}

// observe says when a run begins and ends (for the log), and keepBelow
// forgets the runs the pool is not below: a database checked again after a
// pause starts a new run.
func TestFailbackRuns(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fb := newFailback(time.Second)
	if began, ended := fb.observe(0, false, t0); began || ended {
		t.Fatalf("a failed first check: began %v, ended %v", began, ended)
	}
	if began, ended := fb.observe(0, true, t0); !began || ended {
		t.Fatalf("the first passed check: began %v, ended %v", began, ended)
	}
	if began, ended := fb.observe(0, true, t0.Add(time.Second)); began || ended {
		t.Fatalf("a second passed check: began %v, ended %v", began, ended)
	}
	if began, ended := fb.observe(0, false, t0.Add(2*time.Second)); began || !ended {
		t.Fatalf("a failed check after passed ones: began %v, ended %v", began, ended)
	}
	for i := range 3 {
		fb.observe(1, true, t0.Add(time.Duration(i)*time.Second))
	}
	if idx, _, ok := fb.due(2, t0.Add(3*time.Second)); !ok || idx != 1 {
		t.Fatalf("due(2) = %d, %v; want 1", idx, ok)
	}
	fb.keepBelow(1) // the pool moved to 1 (or before): 1's run is over
	fb.observe(1, true, t0.Add(time.Hour))
	if _, _, ok := fb.due(2, t0.Add(time.Hour)); ok {
		t.Fatal("a run forgotten by keepBelow still counted after a pause")
	}
}
