package eventually

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// Deadline bounds every wait: it ends a hung test, and asserts nothing of
// how fast anything happens.
const Deadline = 2 * time.Minute

// The pause between two calls of a condition starts at firstPause and
// doubles up to maxPause: a condition that holds soon is seen soon, one
// that takes long is not asked a thousand times a second.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 100 * time.Millisecond
)

// ErrNotYet is what a condition of NoError or Wait may return when it has
// nothing more to say of why it does not hold yet.
var ErrNotYet = errors.New("not yet")

// stopped marks an error of a condition that can never hold.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

// Stop marks err as final: the wait ends at once and returns (or fails
// the test with) err, for a condition that can never hold any more.
func Stop(err error) error { return stopped{err} }

// Wait calls cond until it returns nil, and returns nil. It returns cond's
// last error once Deadline has passed, and at once an error cond marked
// with Stop (unwrapped).
func Wait(cond func() error) error { return Until(context.Background(), cond) }

// Until is Wait that also ends when ctx is done, returning cond's last
// error: for a wait whose bound is not an assertion (a load that runs
// until it has done enough or for a while, whichever comes first).
func Until(ctx context.Context, cond func() error) error {
	return poll(ctx, 0, cond)
}

// poll is Until with a steady pause between calls if steady is above 0,
// else a pause that grows from firstPause to maxPause.
func poll(ctx context.Context, steady time.Duration, cond func() error) error {
	deadline := clock.Real.Now().Add(Deadline)
	pause := firstPause
	if steady > 0 {
		pause = steady
	}
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if s, ok := errors.AsType[stopped](err); ok {
			return s.err
		}
		if clock.Real.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", Deadline, err)
		}
		if clock.Sleep(ctx, clock.Real, pause) != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		if steady == 0 {
			pause = min(2*pause, maxPause)
		}
	}
}

// NoError waits until cond returns nil; if it does not within Deadline,
// or returns an error marked with Stop, the test fails, saying what it
// waited for and cond's last error.
func NoError(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := Wait(cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// True waits until cond returns true; if it does not within Deadline, the
// test fails, saying what it waited for.
func True(t testing.TB, what string, cond func() bool) {
	t.Helper()
	NoError(t, what, func() error {
		if cond() {
			return nil
		}
		return ErrNotYet
	})
}

// Every is NoError with a steady pause between calls, for a wait whose
// rounds are the measure (an order of two events observed in one polling
// loop): a pause that grew would let both fall in one round.
func Every(t testing.TB, what string, pause time.Duration, cond func() error) {
	t.Helper()
	if err := poll(context.Background(), pause, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
