package backoff

import (
	"context"
	"time"
)

// Policy is an exponential backoff: the wait before retry n+1 (n counting
// from 0) is Initial doubled n times, capped at Max, then jittered.
type Policy struct {
	Initial time.Duration
	Max     time.Duration
}

// Rand returns a uniformly random value in [0, n), n > 0: math/rand/v2's
// Int64N in production, a fixed function in tests.
type Rand func(n int64) int64

// Wait returns the wait before retry number attempt+1 (attempt counts the
// retries made so far, from 0). With d = min(Initial·2^attempt, Max), it is
// d/2 plus a random share of the other half ("equal jitter"): never less
// than half the exponential wait, so retries still back off, and spread
// over the other half, so clients that failed at the same moment do not
// come back in step. A negative attempt counts as 0; a Policy with Max
// below Initial waits Max.
func (p Policy) Wait(attempt int, rnd Rand) time.Duration {
	attempt = max(attempt, 0)
	d := p.Max
	// Initial<<attempt is at most Max exactly when Initial <= Max>>attempt;
	// checked that way it cannot overflow (a shift past the width is 0).
	if p.Initial <= p.Max>>attempt {
		d = p.Initial << attempt
	}
	if d <= 0 {
		return 0
	}
	half := d / 2
	return half + time.Duration(rnd(int64(d-half)+1))
}

// Sleep waits d, or until ctx ends; it reports whether d passed. It waits
// on the time package's timers, so that a test in a testing/synctest
// bubble runs the wait on the bubble's clock.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
