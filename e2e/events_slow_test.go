package e2e

// A consumer of the event stream that reads one event a second while the
// server writes 200,000 records: the server's memory does not follow the
// backlog (a stream holds one answer; behind the tail in memory it reads
// the WAL), and the consumer, once it speeds up, still gets every event.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
)

// slowTailBytes is the server's --event-tail-bytes in this test, and
// slowConsumerBound what a slow stream may add to the server's peak
// resident memory over the same load without it: the tail in memory, one
// answer being read, converted and sent (at most 1 MiB of records) and the
// reader's buffer, with as much again for the garbage collector's room
// (GOGC=100). The backlog the test leaves the consumer is about 66 MB of
// records: a server that kept it would pass the bound.
const (
	slowTailBytes     = 4 << 20
	slowConsumerBound = 2*slowTailBytes + 24<<20
)

// rssOf returns the resident memory of process pid (VmRSS), in bytes.
func rssOf(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0 // it exited
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// heartbeatRecords writes n LeaseExtended records of about 300 bytes
// (heartbeats with a progress message) through 8 callers, holding 64
// leases: records that leave the state as it is.
func heartbeatRecords(t *testing.T, c *client.Client, n int) {
	t.Helper()
	ctx := t.Context()
	for i := range 64 {
		if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "slow", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "slow", Queue: "slow", MaxTasks: 64, Wait: time.Second})
	if err != nil || len(leased.Tasks) != 64 {
		t.Fatalf("lease: %d tasks, %v", len(leased.Tasks), err)
	}
	msg := strings.Repeat("m", 200)
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for k := w; left.Add(-1) >= 0; k += 8 {
				lt := leased.Tasks[k%len(leased.Tasks)]
				if _, err := c.Heartbeat(ctx, client.HeartbeatRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Progress: &client.Progress{Message: msg}}); err != nil {
					t.Errorf("heartbeat: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// slowRun starts a server, writes the records with or without a consumer
// that reads one event a second meanwhile, and returns the server's peak
// resident memory until the consumer (if any) has every event, and how
// many events it got, in order.
func slowRun(t *testing.T, records int, consume bool) (peak int64, got int) {
	p := startServerProc(t, t.TempDir(), "--event-tail-bytes", strconv.Itoa(slowTailBytes))
	pid := p.cmd.Process.Pid
	c := sdk(t, p.url())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var peakRSS atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			if r := rssOf(t, pid); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var writing atomic.Bool
	writing.Store(true)
	consumed := make(chan int, 1)
	if consume {
		go func() {
			n, next := 0, uint64(1)
			for ev, err := range c.Watch(ctx, client.EventFilter{}, client.CursorOldest) {
				if err != nil {
					t.Errorf("watch: %v", err)
					break
				}
				if ev.LSN != next {
					t.Errorf("event lsn %d, want %d", ev.LSN, next)
					break
				}
				next++
				if ev.Type == "LeaseExtended" {
					n++
				}
				if n == records {
					break
				}
				if writing.Load() {
					time.Sleep(time.Second)
				}
			}
			consumed <- n
		}()
	}
	heartbeatRecords(t, c, records)
	writing.Store(false)
	if consume {
		select {
		case got = <-consumed:
		case <-time.After(eventually.Deadline):
			t.Fatalf("the consumer did not get the %d events within %v", records, eventually.Deadline)
		}
	}
	cancel()
	<-sampled
	stop(t, p)
	return peakRSS.Load(), got
}

// TestEventsSlowConsumer: with a consumer that reads one event a second
// while 200,000 records are written, the server's peak resident memory
// stays within slowConsumerBound of the same load's without a stream, and
// the consumer, once the writes end and it reads at full speed, gets
// every event once, in order.
func TestEventsSlowConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 records twice: not in -short")
	}
	const records = 200_000
	without, _ := slowRun(t, records, false)
	with, got := slowRun(t, records, true)
	t.Logf("peak resident memory of the server writing %d records: %d MiB without a stream, %d MiB with one reading one event a second (bound: %d MiB more)",
		records, without>>20, with>>20, slowConsumerBound>>20)
	if got != records {
		t.Fatalf("the slow consumer got %d of the %d heartbeats' events", got, records)
	}
	if with > without+slowConsumerBound {
		t.Fatalf("a slow stream took the server's peak resident memory from %d MiB to %d MiB, over the bound of %d MiB more", without>>20, with>>20, slowConsumerBound>>20)
	}
}
