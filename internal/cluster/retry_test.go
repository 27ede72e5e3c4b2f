package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
)

// RetryRolledBack runs the transaction again while the database says it
// rolled it back (deadlock, lock-wait timeout), at most tries times, and
// returns at once any other error, and the last one when ctx ends.
func TestRetryRolledBack(t *testing.T) {
	deadlock := fmt.Errorf("tx: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"})
	lockWait := &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	other := &mysql.MySQLError{Number: 1146, Message: "Table doesn't exist"}
	for _, tc := range []struct {
		name      string
		errs      []error // try n returns errs[n-1], nil past the end
		tries     int
		wantCalls int
		want      error
	}{
		{"succeeds after rollbacks", []error{deadlock, lockWait, deadlock}, 10, 4, nil},
		{"gives up after tries", []error{deadlock, deadlock, lockWait, deadlock}, 3, 3, lockWait},
		{"other error not retried", []error{deadlock, other, deadlock}, 10, 2, other},
		{"first try succeeds", nil, 10, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := cluster.RetryRolledBack(context.Background(), clock.Real, tc.tries, func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.want) {
				t.Errorf("%d tries, %v; want %d, %v", calls, err, tc.wantCalls, tc.want)
			}
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := cluster.RetryRolledBack(ctx, clock.Real, 10, func() error {
		calls++
		cancel()
		return deadlock
	})
	if calls != 1 || !errors.Is(err, deadlock) {
		t.Errorf("with ctx ended: %d tries, %v; want 1, the deadlock", calls, err)
	}
}
