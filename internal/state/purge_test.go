package state

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func withRequest(r *TaskCreated, id string) *TaskCreated { r.RequestID = id; return r }

func completedAt(id, lease string, at Time) []Record {
	return []Record{granted(id, lease, 1, at-2*sec), &TaskCompleted{TaskID: id, LeaseID: lease, At: at}}
}

func TestPurgeDropsOnlyOldTerminalTasks(t *testing.T) {
	recs := []Record{
		withRequest(created("done-old"), "r1"), created("failed-old"), created("dead-old"),
		created("done-new"), created("waiting"), created("leased"), created("committed"),
	}
	recs = append(recs, completedAt("done-old", "l1", 5*sec)...)
	recs = append(recs, granted("failed-old", "l2", 1, 3*sec),
		&TaskFailed{TaskID: "failed-old", LeaseID: "l2", Permanent: true, At: 4 * sec},
		&TaskDead{TaskID: "dead-old", At: 5 * sec})
	recs = append(recs, completedAt("done-new", "l3", 20*sec)...)
	recs = append(recs, granted("leased", "l4", 1, 2*sec), granted("committed", "l5", 1, 2*sec),
		&TaskCommitted{TaskID: "committed", LeaseID: "l5", At: 3 * sec})
	s := run(t, recs...)

	s = runOn(t, s, &TasksPurged{Before: 10 * sec, At: 30 * sec})
	var left []string
	s.Scan(0, func(t *Task) bool { left = append(left, t.ID); return true })
	if want := []string{"done-new", "waiting", "leased", "committed"}; !reflect.DeepEqual(left, want) {
		t.Fatalf("after purge: %v, want %v", left, want)
	}
	if s.Len() != 4 || s.Count(Completed) != 1 || s.Count(Failed) != 0 || s.Count(Dead) != 0 {
		t.Fatalf("counts after purge: len %d completed %d failed %d dead %d", s.Len(), s.Count(Completed), s.Count(Failed), s.Count(Dead))
	}
	if s.Task("done-old") != nil || s.ByRequest("default", "r1") != nil {
		t.Fatal("purged task still reachable")
	}
	// Its request id is free again: a new task may use it.
	s = runOn(t, s, withRequest(created("again"), "r1"))
	if s.ByRequest("default", "r1").ID != "again" {
		t.Fatal("request id not reusable after the purge")
	}
	// The three purged were the oldest: sliced off the order's front.
	if s.holes != 0 || len(s.order) != 5 {
		t.Fatalf("order has %d entries, %d holes; want 5 and 0", len(s.order), s.holes)
	}
	if err := s.Apply(s.LastLSN()+1, &TasksPurged{Before: 25 * sec, At: 40 * sec}); err != nil {
		t.Fatal(err)
	}
	if s.holes != 0 || s.Len() != 4 || len(s.order) != 4 {
		t.Fatalf("%d holes, %d tasks, %d entries; want 0, 4 and 4", s.holes, s.Len(), len(s.order))
	}
	s = runOn(t, s, granted("waiting", "l6", 1, 41*sec), &TaskCompleted{TaskID: "waiting", LeaseID: "l6", At: 42 * sec},
		&TasksPurged{Before: 50 * sec, At: 50 * sec})
	if s.holes != 0 || len(s.order) != s.Len() || s.Len() != 3 {
		t.Fatalf("order not compacted: %d entries, %d holes, %d tasks", len(s.order), s.holes, s.Len())
	}
	var after []string
	s.Scan(0, func(t *Task) bool { after = append(after, t.ID); return true })
	if want := []string{"leased", "committed", "again"}; !reflect.DeepEqual(after, want) {
		t.Fatalf("after the last purge: %v, want %v", after, want)
	}
}

func TestPurgeNeverTouchesLiveTasks(t *testing.T) {
	s := run(t, created("w"), created("l"), created("c"), granted("l", "l1", 1, 2*sec),
		granted("c", "l2", 1, 2*sec), &TaskCommitted{TaskID: "c", LeaseID: "l2", At: 3 * sec},
		&LeaseExpired{TaskID: "c", LeaseID: "l2", At: 12 * sec})
	before := s.Export()
	s = runOn(t, s, &TasksPurged{Before: 1000 * sec, At: 1000 * sec})
	after := s.Export()
	before.LastLSN = after.LastLSN
	if !reflect.DeepEqual(before, after) {
		t.Fatal("a purge changed tasks that are not terminal")
	}
}

func TestPurgePrecondition(t *testing.T) {
	s := New()
	err := s.Apply(1, &TasksPurged{Before: 10 * sec, At: 5 * sec})
	if err == nil || !strings.Contains(err.Error(), "after the purge time") {
		t.Fatalf("got %v", err)
	}
}

func TestScanSkipsHoles(t *testing.T) {
	recs := []Record{created("a"), created("b"), created("c"), created("d")}
	recs = append(recs, completedAt("b", "l1", 5*sec)...)
	s := run(t, recs...)
	s = runOn(t, s, &TasksPurged{Before: 10 * sec, At: 10 * sec})
	var got []string
	s.Scan(2, func(t *Task) bool { got = append(got, t.ID); return true })
	if want := []string{"c", "d"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("scan after lsn 2 over a hole: %v, want %v", got, want)
	}
}

// TestPurgeTrimsTheOrdersFront checks that a purge of the oldest tasks
// leaves no holes at the front of the creation order (searchOrder would
// walk them at every probe that lands there), that a hole further on stays
// until holes are half the order, and that once the front sliced off is
// larger than what is left the order is copied into an array of its size.
func TestPurgeTrimsTheOrdersFront(t *testing.T) {
	recs := []Record{created("a"), created("b"), created("c"), created("d"), created("e")}
	recs = append(recs, completedAt("a", "l1", 5*sec)...)
	recs = append(recs, completedAt("b", "l2", 5*sec)...)
	recs = append(recs, completedAt("d", "l3", 5*sec)...)
	s := run(t, recs...)
	s = runOn(t, s, &TasksPurgedRange{Before: 10 * sec, At: 10 * sec, AfterLSN: 0, ThroughLSN: 5})
	if len(s.order) != 3 || s.holes != 1 || s.order[0] == 0 {
		t.Fatalf("after purging a, b and d: order %v with %d holes, want c's entry first and d's hole kept", s.order, s.holes)
	}
	var got []string
	s.Scan(0, func(t *Task) bool { got = append(got, t.ID); return true })
	if want := []string{"c", "e"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("scan: %v, want %v", got, want)
	}

	const n = 10_000
	s = New()
	for i := range n {
		s = runOn(t, s, created("t"+strconv.Itoa(i)))
	}
	for i := range n - 100 {
		id := "t" + strconv.Itoa(i)
		for _, r := range completedAt(id, "l"+id, 5*sec) {
			if err := s.Apply(s.LastLSN()+1, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	s = runOn(t, s, &TasksPurged{Before: 10 * sec, At: 10 * sec})
	if len(s.order) != 100 || s.holes != 0 || cap(s.order) != 100 {
		t.Fatalf("after purging all but the newest 100 of %d: order of %d entries (capacity %d) with %d holes, want 100 in an array of 100",
			n, len(s.order), cap(s.order), s.holes)
	}
	if s.Task("t9900") == nil || s.ordered(0).ID != "t9900" {
		t.Fatal("the oldest task left is not first in the order")
	}
}

func TestInvariantsCatchOrderDamage(t *testing.T) {
	s := run(t, created("a"), created("b"))
	s.order[0], s.order[1] = s.order[1], s.order[0]
	if err := s.Invariants(); err == nil || !strings.Contains(err.Error(), "creation order") {
		t.Fatalf("swapped order not reported: %v", err)
	}
}

// runOn applies recs to s, checking the invariants after each.
func runOn(t *testing.T, s *State, recs ...Record) *State {
	t.Helper()
	for i, r := range recs {
		if err := s.Apply(s.LastLSN()+1, r); err != nil {
			t.Fatalf("record %d (%T): %v", i, r, err)
		}
		if err := s.Invariants(); err != nil {
			t.Fatalf("after record %d (%T): %v", i, r, err)
		}
	}
	return s
}

// TestPurgedSlotsAreReused checks that the slab of a state that purges its
// finished tasks stays at the most tasks it held at once: the tasks created
// after a purge take the slots of the purged ones, and the state stays
// whole (Invariants, run by runOn).
func TestPurgedSlotsAreReused(t *testing.T) {
	s := New()
	n := 0
	for round := range 5 {
		var recs []Record
		for i := range 300 {
			id := "t" + strconv.Itoa(n)
			n++
			recs = append(recs, withRequest(created(id), "r"+id))
			if i%3 != 0 { // a third stay waiting, the rest finish
				recs = append(recs, completedAt(id, "l"+id, Time(round+1)*100*sec)...)
			}
		}
		s = runOn(t, s, recs...)
		s = runOn(t, s, &TasksPurged{Before: Time(round+1)*100*sec + sec, At: Time(round+1)*100*sec + sec})
		if want := 100 * (round + 1); s.Len() != want {
			t.Fatalf("round %d: %d tasks, want %d", round, s.Len(), want)
		}
	}
	// At most 100*4 waiting + 300 new at once: 700 positions.
	if got := s.slab.len() + len(s.slab.free); got > 700 {
		t.Fatalf("the slab handed out %d positions for at most 700 tasks at once", got)
	}
}

// TestPurgeRangeBounds: a TasksPurgedRange drops only the purgeable tasks
// created in its range, and an empty range drops nothing.
func TestPurgeRangeBounds(t *testing.T) {
	var recs []Record
	for _, id := range []string{"a", "b", "c", "d"} { // lsns 1-4
		recs = append(recs, withRequest(created(id), "r"+id))
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		recs = append(recs, completedAt(id, "l"+id, 5*sec)...)
	}
	s := run(t, recs...)
	s = runOn(t, s, &TasksPurgedRange{Before: 10 * sec, At: 10 * sec, AfterLSN: 2, ThroughLSN: 2})
	if s.Len() != 4 {
		t.Fatalf("an empty range dropped %d tasks", 4-s.Len())
	}
	s = runOn(t, s, &TasksPurgedRange{Before: 10 * sec, At: 10 * sec, AfterLSN: 1, ThroughLSN: 3})
	var left []string
	s.Scan(0, func(t *Task) bool { left = append(left, t.ID); return true })
	if want := []string{"a", "d"}; !reflect.DeepEqual(left, want) {
		t.Fatalf("after purging the range (1, 3]: %v, want %v", left, want)
	}
	if s.ByRequest("default", "rb") != nil || s.ByRequest("default", "ra") == nil {
		t.Fatal("the range's request ids are not freed, or another's is")
	}
	// The planner agrees: from lsn 1, b and c are gone, and d is the one
	// task left to drop.
	lim := PurgeLimits{Pass: 10, Read: 10, Drop: 10}
	if through, drop, done := s.PurgeSlice(10*sec, 1, lim); through != 4 || drop != 1 || !done {
		t.Fatalf("PurgeSlice after lsn 1 = %d, %d, %v; want 4, 1, true", through, drop, done)
	}
	if through, drop, done := s.PurgeSlice(10*sec, 0, PurgeLimits{Pass: 10, Read: 1, Drop: 10}); through != 1 || drop != 1 || done {
		t.Fatalf("PurgeSlice reading 1 task = %d, %d, %v; want 1, 1, false", through, drop, done)
	}
	if through, drop, done := s.PurgeSlice(5*sec, 0, lim); through != 4 || drop != 0 || !done {
		t.Fatalf("PurgeSlice with an earlier cut-off = %d, %d, %v; want 4, 0, true", through, drop, done)
	}
	// A waiting task costs a pass, not a read: the slice stops at the pass
	// limit on it.
	s = runOn(t, s, created("e"), created("f")) // waiting
	if through, drop, done := s.PurgeSlice(10*sec, 4, PurgeLimits{Pass: 1, Read: 1, Drop: 1}); through != s.Task("e").CreatedLSN || drop != 0 || done {
		t.Fatalf("PurgeSlice passing 1 waiting task = %d, %d, %v; want %d, 0, false", through, drop, done, s.Task("e").CreatedLSN)
	}
	if through, drop, done := s.PurgeSlice(10*sec, 4, PurgeLimits{Pass: 5, Read: 1, Drop: 1}); through != s.Task("f").CreatedLSN || drop != 0 || !done {
		t.Fatalf("PurgeSlice over 2 waiting tasks with 1 read = %d, %d, %v; want %d, 0, true", through, drop, done, s.Task("f").CreatedLSN)
	}
}

func TestPurgeRangePreconditions(t *testing.T) {
	s := run(t, created("a"), created("b"))
	for _, tc := range []struct {
		r    *TasksPurgedRange
		want string
	}{
		{&TasksPurgedRange{Before: 10 * sec, At: 5 * sec, ThroughLSN: 1}, "after the purge time"},
		{&TasksPurgedRange{Before: sec, At: sec, AfterLSN: 2, ThroughLSN: 1}, "ends before it"},
		{&TasksPurgedRange{Before: sec, At: sec, ThroughLSN: 3}, "reaches this record's lsn 3"},
	} {
		before := s.Export()
		err := s.Apply(3, tc.r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.r, err, tc.want)
		}
		if !reflect.DeepEqual(before, s.Export()) {
			t.Errorf("%+v: a refused record changed the state", tc.r)
		}
	}
}
