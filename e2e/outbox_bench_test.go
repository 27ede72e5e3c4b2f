package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// TestOutboxBench measures the transactional outbox on each database
// (servers of the test's own): how fast the relay in the server drains a
// backlog (TENURE_BENCH_ROWS rows, 100,000 by default, written before the
// server starts), with the server's CPU per 100,000 rows; and, under a
// steady load (TENURE_BENCH_RATE committed rows per second, 1000 by
// default, for 20 s, one row per transaction from 40 writers), the time
// from each transaction's commit to its task's creation, p50 and p99.
// TENURE_BENCH_POLL sets the relay's --outbox-poll. Only with
// TENURE_BENCH_OUTBOX set: it measures, it checks nothing.
func TestOutboxBench(t *testing.T) {
	measurement(t, "TENURE_BENCH_OUTBOX")
	rows := envInt(t, "TENURE_BENCH_ROWS", 100_000)
	rate := envInt(t, "TENURE_BENCH_RATE", 1000)
	for _, kind := range []sdkoutbox.Database{sdkoutbox.PostgreSQL, sdkoutbox.MySQL} {
		t.Run(kind.String(), func(t *testing.T) {
			db := startAppDB(t, kind)
			// The backlog, a thousand rows a transaction.
			for lo := 0; lo < rows; lo += 1000 {
				outboxRows(t, kind, db.pool, "backlog", lo, min(lo+1000, rows))
			}
			start := clock.Real.Now()
			args := []string{"--outbox-" + db.flag, db.dsn}
			if poll := os.Getenv("TENURE_BENCH_POLL"); poll != "" {
				args = append(args, "--outbox-poll", poll)
			}
			srv := startServerProc(t, t.TempDir(), args...)
			cpu0 := procCPU(t, srv.cmd.Process.Pid)
			eventually.True(t, "the backlog drained", func() bool { return db.count(t, "tenure_outbox") == 0 })
			took := clock.Real.Now().Sub(start)
			cpu := procCPU(t, srv.cmd.Process.Pid) - cpu0
			q, err := sdk(t, srv.url()).GetQueue(t.Context(), client.GetQueueRequest{Queue: "backlog"})
			if err != nil || q.Tasks.Waiting != uint64(rows) {
				t.Fatalf("queue backlog: %+v, %v; want %d tasks waiting", q.Tasks, err, rows)
			}
			t.Logf("%v: backlog of %d rows drained in %v: %.0f rows/s, server %.2f CPU-s per 100,000 rows (relay and log)",
				kind, rows, took.Round(time.Millisecond), float64(rows)/took.Seconds(), cpu.Seconds()*100_000/float64(rows))

			// Steady load: each row carries the time its transaction
			// committed; its task the time it was created.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			const writers = 40
			every := time.Duration(float64(time.Second) * writers / float64(rate))
			var mu sync.Mutex
			committedAt := map[string]time.Time{}
			ob, err := sdkoutbox.New(sdkoutbox.Options{Database: kind})
			if err != nil {
				t.Fatal(err)
			}
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					next := clock.Real.Now()
					for i := 0; ctx.Err() == nil; i++ {
						clock.Sleep(ctx, clock.Real, next.Sub(clock.Real.Now()))
						next = next.Add(every)
						id := fmt.Sprintf("w%d-%d", w, i)
						tx, err := db.pool.BeginTx(context.WithoutCancel(ctx), nil)
						if err != nil {
							t.Error(err)
							return
						}
						if _, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Queue: "steady", Payload: []byte(id)}); err != nil {
							tx.Rollback()
							continue
						}
						if err := tx.Commit(); err != nil {
							t.Error(err)
							return
						}
						at := clock.Real.Now()
						mu.Lock()
						committedAt[id] = at
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			c := sdk(t, srv.url())
			eventually.True(t, "every committed row relayed", func() bool {
				q, err := c.GetQueue(t.Context(), client.GetQueueRequest{Queue: "steady"})
				return err == nil && q.Tasks.Waiting == uint64(len(committedAt))
			})
			var lat []time.Duration
			for task, err := range c.ListTasks(t.Context(), client.ListTasksRequest{Queue: "steady", PageSize: 1000}) {
				if err != nil {
					t.Fatal(err)
				}
				if at, ok := committedAt[string(task.Payload)]; ok {
					lat = append(lat, max(0, task.CreatedAt.Sub(at)))
				}
			}
			slices.Sort(lat)
			pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
			t.Logf("%v: steady load of %d rows/s offered for 20s, %d rows committed (%.0f/s): commit to task p50 %v, p90 %v, p99 %v, max %v",
				kind, rate, len(lat), float64(len(lat))/20, pct(0.5), pct(0.9), pct(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
			stop(t, srv)
		})
	}
}
