package coordinator

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/wal"
)

// backClock is a fake clock that, while armed, goes back a second after
// each reading, and counts the timers asked of it then.
type backClock struct {
	*clock.Fake
	armed  atomic.Bool
	timers atomic.Int32
}

func (b *backClock) Now() time.Time {
	now := b.Fake.Now()
	if b.armed.Load() {
		b.Fake.Set(now.Add(-time.Second))
	}
	return now
}

func (b *backClock) NewTimer(d time.Duration) clock.Timer {
	if b.armed.CompareAndSwap(true, false) {
		b.timers.Add(1)
		// Let a poll that waits end at once rather than hang the test.
		b.Fake.Advance(time.Minute)
		return b.Fake.NewTimer(0)
	}
	return b.Fake.NewTimer(d)
}

// TestLeaseWithoutWaitDoesNotWaitWhenTheClockGoesBack: a Lease without a
// Wait answers after one look at the queue, even when the clock went back
// between the start of the call and that look (the linearizability
// workload moves its fake clock back while workers lease; a poll end read
// before the step put the look "before" it, and the call waited for a time
// nobody would bring).
func TestLeaseWithoutWaitDoesNotWaitWhenTheClockGoesBack(t *testing.T) {
	clk := &backClock{Fake: clock.NewFake(epoch)}
	l, err := wal.Open(wal.Options{Dir: t.TempDir(), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Open(ctx, l, Config{Clock: clk, Rand: newSeededRand(1), ExpiryScanInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clk.armed.Store(true)
	ls, err := c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q"})
	clk.armed.Store(false)
	if err != nil || len(ls) != 0 {
		t.Fatalf("Lease on an empty queue: %v, %v; want no lease and no error", ls, err)
	}
	if n := clk.timers.Load(); n != 0 {
		t.Fatalf("a Lease without Wait waited on %d timer(s) after the clock went back; want none", n)
	}
}
