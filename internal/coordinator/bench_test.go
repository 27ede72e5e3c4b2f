package coordinator

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
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
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: payload}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
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
			b.ReportMetric(float64(c.Stats().LastLSN-start)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
