package state

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The cost of keys (docs/design/keys.md, "Memory" and "What the
// coordinator asks"): the heap a key with waiting tasks holds, and a
// lease's cost as the keys grow.

// keyedCreated is benchCreated with a key.
func keyedCreated(i, payload int, key string) *TaskCreated {
	r := benchCreated(i, payload)
	r.Key = key
	return r
}

// benchKey is the key of key number k, as long as a customer id.
func benchKey(k int) string { return fmt.Sprintf("customer-%09d", k) }

// BenchmarkMemoryPerKey reports the Go heap a key with one waiting task
// holds beyond a task without a key (B/key), for memTasks keys, with and
// without key limits and fair leasing; and HeldBytes' figure for it, which
// should be close.
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, fair := range []bool{false, true} {
		b.Run(fmt.Sprintf("fair=%v", fair), func(b *testing.B) {
			reportBytesPer(b, "key", memTasks, func(keyed bool) *State {
				s := New()
				if fair {
					s.Apply(1, &QueueLimited{Namespace: "default", Queue: benchQueue, KeyMaxConcurrency: 2, Fair: true, At: 1})
				}
				for i := range memTasks {
					r := benchCreated(i, memPayload)
					if keyed {
						r.Key = benchKey(i)
					}
					if err := s.Apply(s.LastLSN()+1, r); err != nil {
						b.Fatal(err)
					}
				}
				// Place every key once, as a lease would.
				s.Schedulable(QueueKey{"default", benchQueue}, Time(time.Second), 1)
				return s
			})
		})
	}
}

// BenchmarkKeyedLease grants and completes one task at a time, as the
// coordinator offers them (Schedulable), on a queue of n keys with
// tasksPerKey waiting tasks each, a key max concurrency and fair leasing:
// the cost per lease should grow as log n at most.
func BenchmarkKeyedLease(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			const tasksPerKey = 2
			s := New()
			q := QueueKey{"default", benchQueue}
			if err := s.Apply(1, &QueueLimited{Namespace: q.Namespace, Queue: q.Queue, KeyMaxConcurrency: 1, Fair: true, At: 1}); err != nil {
				b.Fatal(err)
			}
			for i := range n * tasksPerKey {
				if err := s.Apply(s.LastLSN()+1, keyedCreated(i, 8, benchKey(i%n))); err != nil {
					b.Fatal(err)
				}
			}
			now := Time(time.Second)
			lease := 0
			grant := func() {
				ts := s.Schedulable(q, now, 1)
				if len(ts) != 1 {
					b.Fatalf("Schedulable offers %d tasks", len(ts))
				}
				t := ts[0]
				lease++
				id := benchID('l', lease)
				if err := s.Apply(s.LastLSN()+1, &LeaseGranted{TaskID: t.ID, LeaseID: id, WorkerID: "w", Attempt: t.Attempt + 1, GrantedAt: now, LeaseExpiry: now.Add(time.Hour)}); err != nil {
					b.Fatal(err)
				}
				if err := s.Apply(s.LastLSN()+1, &TaskCompleted{TaskID: t.ID, LeaseID: id, At: now}); err != nil {
					b.Fatal(err)
				}
				// A new task of the key keeps the queue's shape.
				if err := s.Apply(s.LastLSN()+1, keyedCreated(n*tasksPerKey+lease, 8, s.KeyOf(t))); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			cpu := cpuTime()
			for range b.N {
				grant()
			}
			// The machine is shared: CPU time per lease says more than
			// wall time.
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
