package cluster

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// Backoff between the tries of RetryRolledBack: a random wait up to a
// bound that starts at minRetryBackoff and doubles each try, up to
// maxRetryBackoff, so that transactions that deadlocked one another do not
// meet again in step.
const (
	minRetryBackoff = 5 * time.Millisecond
	maxRetryBackoff = 250 * time.Millisecond
)

// RetryRolledBack runs try, and runs it again while it fails with an error
// by which the database said it rolled the work back (IsRetryable: a
// deadlock, a lock-wait timeout, a certification failure), at most tries
// times in all, waiting a short random backoff on c between tries. try must be
// the whole transaction, begun again each time: the rolled-back one left
// nothing. It returns try's last error, or ctx's if ctx ends during a
// backoff.
func RetryRolledBack(ctx context.Context, c clock.Clock, tries int, try func() error) error {
	bound := minRetryBackoff
	for n := 1; ; n++ {
		err := try()
		if n >= tries || !IsRetryable(err) || ctx.Err() != nil {
			return err
		}
		if clock.Sleep(ctx, c, rand.N(bound)+1) != nil {
			return err
		}
		bound = min(2*bound, maxRetryBackoff)
	}
}
