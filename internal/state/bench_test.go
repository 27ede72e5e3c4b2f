package state

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// benchQueue is shaped like the queue name of `tenure bench`.
const benchQueue = "bench-1-20261121T125330.549367"

var benchRetry = RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2}

// benchID returns a 26-character id like the coordinator's, in its own
// allocation.
func benchID(prefix byte, i int) string {
	return fmt.Sprintf("%c%025d", prefix, i)
}

// benchCreated returns the TaskCreated of task i as a server would decode it
// from a request: every string and the payload in their own allocations,
// a 64-byte payload and a request id like the bench's.
func benchCreated(i int, payload int) *TaskCreated {
	return &TaskCreated{
		TaskID:          benchID('t', i),
		Namespace:       strings.Clone("default"),
		Queue:           strings.Clone(benchQueue),
		Payload:         make([]byte, payload),
		ExecutionWindow: 30 * time.Second,
		Retry:           benchRetry,
		RequestID:       fmt.Sprintf("%s-%d", benchQueue, i),
		CreatedAt:       Time(i+1) * Time(time.Microsecond),
	}
}

// waitingState is a state of n waiting tasks (benchCreated) with payloads
// of payload bytes.
func waitingState(tb testing.TB, n, payload int) *State {
	s := New()
	for i := range n {
		if err := s.Apply(s.LastLSN()+1, benchCreated(i, payload)); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// reportBytesPer reports the Go heap (B/unit) and the HeldBytes
// (held-B/unit) that each of n things adds to a state: the difference
// between the state build(true) makes, with the n things, and the one
// build(false) makes, without them, divided by n.
func reportBytesPer(b *testing.B, unit string, n int, build func(with bool) *State) {
	var heap, held float64
	for range b.N {
		var heaps, helds [2]float64
		for i, with := range []bool{false, true} {
			before := heapAlloc()
			s := build(with)
			heaps[i] = float64(heapAlloc()) - float64(before)
			helds[i] = float64(s.HeldBytes())
			runtime.KeepAlive(s)
		}
		heap = (heaps[1] - heaps[0]) / float64(n)
		held = (helds[1] - helds[0]) / float64(n)
	}
	b.ReportMetric(heap, "B/"+unit)
	b.ReportMetric(held, "held-B/"+unit)
}

const memTasks = 100_000
const memPayload = 64

// BenchmarkMemoryPerTask reports the Go heap a State holds per task beyond
// its payload (B/task), for memTasks tasks created with 64-byte payloads:
// waiting (created, never leased), leased (one lease each, granted 64 per
// worker call as the bench does) and completed (not yet purged).
func BenchmarkMemoryPerTask(b *testing.B) {
	for _, stage := range []string{"waiting", "leased", "completed"} {
		b.Run(stage, func(b *testing.B) {
			var perTask float64
			for range b.N {
				before := heapAlloc()
				s := waitingState(b, memTasks, memPayload)
				if stage != "waiting" {
					leaseAll(b, s, stage == "completed")
				}
				after := heapAlloc()
				perTask = (float64(after) - float64(before) - memTasks*memPayload) / memTasks
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perTask, "B/task")
		})
	}
}

// leaseAll leases every task of the bench queue, 64 per call with one
// worker id per call, and completes them if complete is set.
func leaseAll(b testing.TB, s *State, complete bool) {
	q := QueueKey{"default", benchQueue}
	now := Time(time.Second)
	for call := 0; ; call++ {
		ready := s.Schedulable(q, now, 64)
		if len(ready) == 0 {
			return
		}
		worker := fmt.Sprintf("worker-%d", call%4)
		for _, t := range ready {
			lease := benchID('l', int(t.CreatedLSN))
			g := &LeaseGranted{TaskID: t.ID, LeaseID: lease, WorkerID: worker, Attempt: t.Attempt + 1,
				GrantedAt: now, LeaseExpiry: now.Add(t.Window)}
			if err := s.Apply(s.LastLSN()+1, g); err != nil {
				b.Fatal(err)
			}
			if complete {
				if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: g.TaskID, LeaseID: lease, At: now + 1}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkApplyCreated applies TaskCreated records to a state that holds
// 100k waiting tasks (records built outside the timer).
func BenchmarkApplyCreated(b *testing.B) {
	s := waitingState(b, memTasks, memPayload)
	recs := make([]*TaskCreated, b.N)
	for i := range recs {
		recs[i] = benchCreated(memTasks+i, memPayload)
	}
	b.ResetTimer()
	for i := range b.N {
		if err := s.Apply(s.LastLSN()+1, recs[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseCycle is the state's share of one bench task after submit:
// Schedulable (64 at a time), LeaseGranted, TaskCompleted, and a new
// TaskCreated to keep 100k tasks waiting. ns/op is per task.
func BenchmarkLeaseCycle(b *testing.B) {
	s := waitingState(b, memTasks, memPayload)
	const batch = 64
	next := memTasks
	refill := make([]*TaskCreated, 0, batch)
	leases := make([]string, batch)
	for i := range leases {
		leases[i] = benchID('l', i)
	}
	q := QueueKey{"default", benchQueue}
	now := Time(time.Second)
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		refill = refill[:0]
		for range batch {
			refill = append(refill, benchCreated(next, memPayload))
			next++
		}
		b.StartTimer()
		ready := s.Schedulable(q, now, batch)
		for i, t := range ready {
			g := &LeaseGranted{TaskID: t.ID, LeaseID: leases[i], WorkerID: "w", Attempt: t.Attempt + 1,
				GrantedAt: now, LeaseExpiry: now.Add(t.Window)}
			if err := s.Apply(s.LastLSN()+1, g); err != nil {
				b.Fatal(err)
			}
			if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: g.TaskID, LeaseID: g.LeaseID, At: now + 1}); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range refill {
			if err := s.Apply(s.LastLSN()+1, r); err != nil {
				b.Fatal(err)
			}
		}
		done += len(ready)
		now += Time(time.Millisecond)
	}
}

// BenchmarkSchedulable asks for the next 64 ready tasks of a queue of 100k
// without leasing them.
func BenchmarkSchedulable(b *testing.B) {
	s := waitingState(b, memTasks, memPayload)
	q := QueueKey{"default", benchQueue}
	b.ResetTimer()
	for range b.N {
		if len(s.Schedulable(q, Time(time.Second), 64)) != 64 {
			b.Fatal("short")
		}
	}
}

// BenchmarkLookup looks tasks up by id and by request id.
func BenchmarkLookup(b *testing.B) {
	s := New()
	ids := make([]string, memTasks)
	rids := make([]string, memTasks)
	for i := range memTasks {
		r := benchCreated(i, memPayload)
		ids[i], rids[i] = strings.Clone(r.TaskID), strings.Clone(r.RequestID)
		if err := s.Apply(s.LastLSN()+1, r); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Task", func(b *testing.B) {
		for i := range b.N {
			if s.Task(ids[i%memTasks]) == nil {
				b.Fatal("missing")
			}
		}
	})
	b.Run("ByRequest", func(b *testing.B) {
		for i := range b.N {
			if s.ByRequest("default", rids[i%memTasks]) == nil {
				b.Fatal("missing")
			}
		}
	})
}

// BenchmarkPurge drops purgeTasks completed tasks, interleaved in creation
// order with as many waiting ones of another queue, in TasksPurgedRange
// slices of at most 2,048 drops, as the coordinator plans them: ns/task is
// the time per task dropped, planning included, that requests wait for.
func BenchmarkPurge(b *testing.B) {
	const purgeTasks = 200_000
	for range b.N {
		b.StopTimer()
		s := New()
		now := Time(time.Second)
		for i := range 2 * purgeTasks {
			r := benchCreated(i, memPayload)
			if i%2 == 1 {
				r.Queue = "waiting"
			}
			if err := s.Apply(s.LastLSN()+1, r); err != nil {
				b.Fatal(err)
			}
		}
		benchComplete(b, s, now, 0, purgeTasks)
		runtime.GC()
		b.StartTimer()
		benchPurge(b, s, now+1)
		if s.Len() != purgeTasks {
			b.Fatalf("%d tasks left, want the %d waiting", s.Len(), purgeTasks)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*purgeTasks), "ns/task")
}

// BenchmarkPurgeBacklog is a purge pass that finds nothing to drop over a
// backlog of purgeTasks waiting tasks, planned in slices as the coordinator
// plans them: ns/task is the time per task held, that a server with a
// backlog pays every purge interval.
func BenchmarkPurgeBacklog(b *testing.B) {
	const purgeTasks = 400_000
	s := waitingState(b, purgeTasks, memPayload)
	runtime.GC()
	b.ResetTimer()
	for range b.N {
		for after := uint64(0); ; {
			through, drop, done := s.PurgeSlice(Time(time.Hour), after, PurgeLimits{Pass: 64 * 2048, Read: 8 * 2048, Drop: 2048})
			if drop > 0 {
				b.Fatal("a waiting task is purgeable")
			}
			if done {
				break
			}
			after = through
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*purgeTasks), "ns/task")
}

// BenchmarkPurgeRolling is the retention purge of a server under steady
// load behind a backlog: each round creates rollingTasks tasks, completes
// the oldest rollingTasks of the queue (so rollingBacklog wait behind
// them) and purges those completed the round before, in slices as the
// coordinator plans them. The purged tasks are the oldest, so each purge
// leaves its holes at the front of the creation order. ns/task is the
// purge's time per task dropped, planning included, that requests wait
// for.
func BenchmarkPurgeRolling(b *testing.B) {
	const rollingTasks, rollingBacklog = 20_000, 400_000
	s := New()
	created, completed := 0, 0
	create := func(n int) {
		for range n {
			if err := s.Apply(s.LastLSN()+1, benchCreated(created, memPayload)); err != nil {
				b.Fatal(err)
			}
			created++
		}
	}
	complete := func(n int, now Time) {
		benchComplete(b, s, now, completed, n)
		completed += n
	}
	// round i creates and completes a round's tasks and purges those the
	// round before completed, and returns how long the purge took.
	round := func(i int) time.Duration {
		now := Time(i+1) * Time(time.Hour)
		create(rollingTasks)
		complete(rollingTasks, now)
		start := time.Now()
		if n := benchPurge(b, s, now); n != rollingTasks && i > 0 {
			b.Fatalf("round %d purged %d tasks, want %d", i, n, rollingTasks)
		}
		return time.Since(start)
	}
	create(rollingBacklog)
	for i := range 10 { // the order reaches its steady shape
		round(i)
	}
	runtime.GC()
	b.ResetTimer()
	var purgeTime time.Duration
	for i := range b.N {
		purgeTime += round(10 + i)
	}
	b.ReportMetric(float64(purgeTime.Nanoseconds())/float64(b.N*rollingTasks), "ns/task")
}

// benchComplete leases and completes, at now, the next n tasks of the bench
// queue in lease order, 64 at a time as the bench's workers lease them,
// with lease ids numbered from first.
func benchComplete(b *testing.B, s *State, now Time, first, n int) {
	q := QueueKey{"default", benchQueue}
	for done := 0; done < n; {
		ready := s.Schedulable(q, now, min(64, n-done))
		if len(ready) == 0 {
			b.Fatal("ran out of tasks to complete")
		}
		for _, t := range ready {
			g := &LeaseGranted{TaskID: t.ID, LeaseID: benchID('l', first+done), WorkerID: "w", Attempt: 1, GrantedAt: now, LeaseExpiry: now.Add(t.Window)}
			if err := s.Apply(s.LastLSN()+1, g); err != nil {
				b.Fatal(err)
			}
			if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: g.TaskID, LeaseID: g.LeaseID, At: now}); err != nil {
				b.Fatal(err)
			}
			done++
		}
	}
}

// benchPurge applies the retention period with cut-off before in
// TasksPurgedRange slices as the coordinator plans them (at most 2,048
// drops each) and returns how many tasks it dropped.
func benchPurge(b *testing.B, s *State, before Time) int {
	dropped := 0
	for after := uint64(0); ; {
		through, drop, done := s.PurgeSlice(before, after, PurgeLimits{Pass: 64 * 2048, Read: 8 * 2048, Drop: 2048})
		if drop > 0 {
			if err := s.Apply(s.LastLSN()+1, &TasksPurgedRange{Before: before, At: before, AfterLSN: after, ThroughLSN: through}); err != nil {
				b.Fatal(err)
			}
			dropped += drop
		}
		if done {
			return dropped
		}
		after = through
	}
}
