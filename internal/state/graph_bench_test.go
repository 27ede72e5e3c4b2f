package state

import (
	"testing"
	"time"
)

// The cost of a fan-out's join (docs/design/workflows.md, "How the state
// holds the graph"): the heap an edge holds, and what the completions of
// the children cost with a join that depends on them all beside the same
// completions without one.

const fanOut = 10_000

// fanOutState is a state of fanOut waiting children and a join created
// after them, depending on them all if edges.
func fanOutState(tb testing.TB, edges bool) *State {
	s := New()
	deps := make([]string, 0, fanOut)
	for i := range fanOut {
		r := benchCreated(i, 8)
		if err := s.Apply(s.LastLSN()+1, r); err != nil {
			tb.Fatal(err)
		}
		deps = append(deps, r.TaskID)
	}
	join := benchCreated(fanOut, 8)
	if edges {
		join.DependsOn = deps
	}
	if err := s.Apply(s.LastLSN()+1, join); err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkMemoryPerEdge reports the Go heap one edge of a join holds
// (B/edge): a join of fanOut dependencies beside the same tasks with an
// independent last one; and HeldBytes' figure for it.
func BenchmarkMemoryPerEdge(b *testing.B) {
	reportBytesPer(b, "edge", fanOut, func(edges bool) *State { return fanOutState(b, edges) })
}

// BenchmarkFanOutJoin leases and completes the fanOut children, one
// record each, and reports the CPU per child (ns/child), with the join
// depending on them (each completion settles one edge, the last releases
// the join) and without.
func BenchmarkFanOutJoin(b *testing.B) {
	for _, edges := range []bool{false, true} {
		name := "join=independent"
		if edges {
			name = "join=depends-on-all"
		}
		b.Run(name, func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				s := fanOutState(b, edges)
				now := Time(time.Second)
				q := QueueKey{"default", benchQueue}
				start := cpuTime()
				for i := range fanOut {
					id := benchID('t', i)
					lease := benchID('l', i)
					if err := s.Apply(s.LastLSN()+1, &LeaseGranted{TaskID: id, LeaseID: lease, WorkerID: "w", Attempt: 1, GrantedAt: now, LeaseExpiry: now.Add(time.Hour)}); err != nil {
						b.Fatal(err)
					}
					if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: id, LeaseID: lease, At: now}); err != nil {
						b.Fatal(err)
					}
				}
				cpu += cpuTime() - start
				if ts := s.Schedulable(q, now, 2); len(ts) != 1 || ts[0].ID != benchID('t', fanOut) {
					b.Fatalf("after the children, Schedulable offers %v, not the join alone", ts)
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*fanOut), "ns/child")
		})
	}
}
