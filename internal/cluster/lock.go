package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrNotCoordinator is returned by a write that only the coordinator may
// make (the partition map, the nodes' eligibility) when the caller does
// not hold the coordinator lock (any more).
var ErrNotCoordinator = errors.New("cluster: not the coordinator")

// CheckCoordinator reads the coordinator lock's row (lock_key lockKey of
// helix_locks) with a shared lock, held until tx ends, and returns
// ErrNotCoordinator unless it names node as owner and is live by the
// database's clock. A write made in tx after it is fenced by the lock: no
// other node can take the lock before tx ends, and a node that lost it
// writes nothing.
func CheckCoordinator(ctx context.Context, tx *sql.Tx, lockKey, node string) error {
	var owner string
	var live bool
	err := tx.QueryRowContext(ctx, "SELECT owner_id, expires_at >= NOW(6) FROM helix_locks WHERE lock_key = ? AND status = 1 LOCK IN SHARE MODE",
		lockKey).Scan(&owner, &live)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: lock %q does not exist", ErrNotCoordinator, lockKey)
	}
	if err != nil {
		return fmt.Errorf("cluster: reading the coordinator lock: %w", err)
	}
	if owner != node || !live {
		return fmt.Errorf("%w: lock %q is held by %q (live %v), not %q", ErrNotCoordinator, lockKey, owner, live, node)
	}
	return nil
}
