package eventually

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestWait: a condition that holds is asked until it does; one that never
// holds ends the wait at the deadline with its last error; one marked
// with Stop ends it at once. Time is synctest's, so the deadline passes
// without waiting for it.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		if err := Wait(func() error {
			if calls++; calls < 5 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		}); err != nil || calls != 5 {
			t.Errorf("a condition that holds at its 5th call: Wait = %v after %d calls, want nil after 5", err, calls)
		}

		start := time.Now()
		calls = 0
		err := Wait(func() error { calls++; return fmt.Errorf("still %d", calls) })
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("still %d", calls)) || !strings.Contains(err.Error(), Deadline.String()) {
			t.Errorf("a condition that never holds: Wait = %v, want its last error and the deadline", err)
		}
		if took < Deadline || took > Deadline+maxPause {
			t.Errorf("a condition that never holds was given up after %v, want %v", took, Deadline)
		}
		if calls > int(Deadline/maxPause)+20 {
			t.Errorf("a condition that never holds was asked %d times in %v: the pause does not grow", calls, Deadline)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		err = Until(ctx, func() error { return errors.New("not enough yet") })
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not enough yet") || time.Since(start) != time.Second {
			t.Errorf("Until a context that ends after 1s: %v after %v, want the context's error and the last one after 1s", err, time.Since(start))
		}

		var at []time.Duration
		start = time.Now()
		msg := run(func(tb testing.TB) {
			Every(tb, "ten rounds", 10*time.Millisecond, func() error {
				if at = append(at, time.Since(start)); len(at) < 10 {
					return ErrNotYet
				}
				return nil
			})
		})
		for i, d := range at {
			if d != time.Duration(i)*10*time.Millisecond {
				t.Errorf("Every 10ms: call %d at %v, want %v", i, d, time.Duration(i)*10*time.Millisecond)
			}
		}
		if msg != "" || len(at) != 10 {
			t.Errorf("Every: %d calls, failed %q; want 10 and no failure", len(at), msg)
		}

		gone := errors.New("the process exited")
		start, calls = time.Now(), 0
		if err := Wait(func() error { calls++; return Stop(gone) }); err != gone || calls != 1 || time.Since(start) != 0 {
			t.Errorf("Stop: Wait = %v after %d calls and %v, want %v at once", err, calls, time.Since(start), gone)
		}
	})
}

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as a test's does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own (Fatalf ends it)
// and returns what the test failed with ("" if it did not).
func run(f func(testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failed
}

// TestTrueAndNoError: the forms that fail the test say what they waited
// for, and NoError the condition's last word.
func TestTrueAndNoError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		if msg := run(func(tb testing.TB) { True(tb, "n to reach 3", func() bool { n++; return n >= 3 }) }); msg != "" || n != 3 {
			t.Errorf("True of a condition that holds: failed %q, n = %d", msg, n)
		}
		msg := run(func(tb testing.TB) { True(tb, "the moon", func() bool { return false }) })
		if !strings.Contains(msg, "waiting for the moon") || !strings.Contains(msg, ErrNotYet.Error()) {
			t.Errorf("True of a condition that never holds failed with %q", msg)
		}
		msg = run(func(tb testing.TB) {
			NoError(tb, "the server", func() error { return errors.New("connection refused") })
		})
		if !strings.Contains(msg, "waiting for the server") || !strings.Contains(msg, "connection refused") {
			t.Errorf("NoError of a condition that never holds failed with %q", msg)
		}
		msg = run(func(tb testing.TB) {
			NoError(tb, "the server", func() error { return Stop(errors.New("it exited: status 1")) })
		})
		if msg != "waiting for the server: it exited: status 1" {
			t.Errorf("NoError of a stopped condition failed with %q", msg)
		}
	})
}
