package coordinator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/wal"
)

// benchCoordinator opens a coordinator on a real WAL that fsyncs every
// batch (the production default), with the real clock.
func benchCoordinator(b *testing.B) *Coordinator {
	b.Helper()
	l, err := wal.Open(wal.Options{Dir: filepath.Join(b.TempDir(), "wal"), Sync: wal.SyncAlways})
	if err != nil {
		b.Fatal(err)
	}
	c, err := Open(context.Background(), l, Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); l.Close() })
	return c
}

// processCPU is the process's user and system CPU so far, in seconds.
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// reportCPU reports the process's CPU since start per operation (one task
// submitted, or one leased and completed), as CPU-seconds per 100,000
// tasks: the floor under `tenure bench`'s figure of the same name, without
// HTTP, clients or protocol (BENCHMARKS.md, "CPU per task"). It counts the
// WAL's writer and fsync goroutines too.
func reportCPU(b *testing.B, start float64) {
	b.ReportMetric((processCPU(b)-start)*1e5/float64(b.N), "cpu-s/100k-tasks")
}

func reportRecords(b *testing.B, c *Coordinator) {
	b.ReportMetric(float64(c.Stats().LastLSN)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSubmit submits one task per call from many goroutines: each
// answer waits for its fsync, so throughput comes from group commit.
func BenchmarkSubmit(b *testing.B) {
	for _, par := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("clients=%d", par*2), func(b *testing.B) {
			c := benchCoordinator(b)
			payload := make([]byte, 128)
			b.SetParallelism(par)
			b.ResetTimer()
			cpu := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: payload}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportCPU(b, cpu)
			reportRecords(b, c)
		})
	}
}

// BenchmarkLeaseComplete leases and completes pre-submitted tasks, one per
// call pair, from many goroutines.
func BenchmarkLeaseComplete(b *testing.B) {
	for _, par := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("workers=%d", par*2), func(b *testing.B) {
			c := benchCoordinator(b)
			payload := make([]byte, 128)
			for left := b.N; left > 0; left -= 1000 {
				reqs := make([]SubmitRequest, min(left, 1000))
				for i := range reqs {
					reqs[i] = SubmitRequest{Queue: "q", Payload: payload}
				}
				if _, err := c.SubmitBatch(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
			start := c.Stats().LastLSN
			var worker atomic.Int64
			b.SetParallelism(par)
			b.ResetTimer()
			cpu := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				id := fmt.Sprintf("w%d", worker.Add(1))
				for pb.Next() {
					ls, err := c.Lease(ctx, LeaseRequest{WorkerID: id, Queue: "q"})
					if err != nil || len(ls) != 1 {
						b.Errorf("lease: %v (%d)", err, len(ls))
						return
					}
					if err := c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			reportCPU(b, cpu)
			b.ReportMetric(float64(c.Stats().LastLSN-start)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkBatchedPhases is `tenure bench`'s default workload on the
// coordinator alone (state, WAL with fsync, group commit; no HTTP, no
// protocol, no client): 16 submitters of SubmitBatch calls of 100 tasks,
// then 8 workers that lease up to 64 tasks and complete each answer in one
// CompleteBatch call. One op is one task; cpu-s/100k-tasks is the floor the
// API layers add to (BENCHMARKS.md, "CPU per task").
func BenchmarkBatchedPhases(b *testing.B) {
	const submitters, batch, workers, leaseBatch = 16, 100, 8, 64
	payload := make([]byte, 64)
	submitAll := func(b *testing.B, c *Coordinator) {
		calls := (b.N + batch - 1) / batch
		var next atomic.Int64
		var wg sync.WaitGroup
		for range submitters {
			wg.Go(func() {
				reqs := make([]SubmitRequest, 0, batch)
				for {
					i := int(next.Add(1)) - 1
					if i >= calls {
						return
					}
					reqs = reqs[:0]
					for range min(batch, b.N-i*batch) {
						reqs = append(reqs, SubmitRequest{Queue: "q", Payload: payload})
					}
					if _, err := c.SubmitBatch(ctx, reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	b.Run("submit", func(b *testing.B) {
		c := benchCoordinator(b)
		b.ResetTimer()
		cpu := processCPU(b)
		submitAll(b, c)
		b.StopTimer()
		reportCPU(b, cpu)
	})
	b.Run("lease+complete", func(b *testing.B) {
		c := benchCoordinator(b)
		submitAll(b, c)
		b.ResetTimer()
		cpu := processCPU(b)
		var completed atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				id := fmt.Sprintf("w%d", w)
				items := make([]CompleteItem, 0, leaseBatch)
				for {
					ls, err := c.Lease(ctx, LeaseRequest{WorkerID: id, Queue: "q", MaxTasks: leaseBatch})
					if err != nil {
						b.Error(err)
						return
					}
					if len(ls) == 0 {
						return // every task is leased
					}
					items = items[:0]
					for _, l := range ls {
						items = append(items, CompleteItem{TaskID: l.TaskID, LeaseID: l.LeaseID})
					}
					errs, err := c.CompleteBatch(ctx, items)
					if err == nil {
						err = errors.Join(errs...)
					}
					if err != nil {
						b.Error(err)
						return
					}
					completed.Add(int64(len(items)))
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		reportCPU(b, cpu)
		if n := completed.Load(); n != int64(b.N) {
			b.Errorf("%d tasks completed, want %d", n, b.N)
		}
	})
}
