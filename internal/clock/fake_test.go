package clock

import (
	"context"
	"testing"
	"time"
)

func TestFakeTimersFireInOrderWhenDue(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	a, b, c := f.NewTimer(time.Second), f.NewTimer(3*time.Second), f.NewTimer(2*time.Second)
	f.Advance(1500 * time.Millisecond)
	select {
	case <-a.C():
	default:
		t.Fatal("timer due at 1s did not fire at 1.5s")
	}
	for _, tm := range []Timer{b, c} {
		select {
		case <-tm.C():
			t.Fatal("timer fired early")
		default:
		}
	}
	if !b.Stop() || b.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	f.Set(start.Add(-time.Hour)) // a backward jump fires nothing
	if f.Timers() != 1 {
		t.Fatalf("%d timers waiting, want 1", f.Timers())
	}
	f.Set(start.Add(5 * time.Second))
	if got := <-c.C(); !got.Equal(start.Add(5 * time.Second)) {
		t.Fatalf("fired with %v", got)
	}
	if f.Timers() != 0 {
		t.Fatal("timers left after all fired or stopped")
	}
}

func TestWaitForTimers(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan struct{})
	go func() {
		<-f.NewTimer(time.Minute).C()
		close(done)
	}()
	f.WaitForTimers(1)
	f.Advance(time.Minute)
	<-done
}

func TestSleep(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), f, time.Second) }()
	f.WaitForTimers(1)
	f.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Sleep after the clock moved past it: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, f, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep with an ended context: %v", err)
	}
	if n := f.Timers(); n != 0 {
		t.Fatalf("%d timers left after Sleep returned", n)
	}
}
