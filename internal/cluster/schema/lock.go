package schema

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
)

// The migration lock is a row of schema_migration_lock, taken and renewed
// with one upsert that replicates like any other write. A server-wide
// advisory lock (GET_LOCK) would not do: a replicated database such as
// Galera keeps it on the one server that granted it, so nodes that start
// together on different servers would all hold it at once.
//
// The lock is a lease: a migrator that dies holding it frees it when the
// lease runs out. Mutual exclusion is what makes concurrent starts orderly;
// correctness does not rest on it, since every statement of a migration and
// its recording can run twice.
const (
	lockLease = 45 * time.Second
	// lockWait is how long Migrate waits for another migrator: two leases,
	// so a dead holder's lock is taken over within it.
	lockWait = 2 * lockLease
	lockPoll = 100 * time.Millisecond
)

const createLockTable = `CREATE TABLE IF NOT EXISTS schema_migration_lock (
    id         TINYINT UNSIGNED NOT NULL,
    owner      VARCHAR(64)      NOT NULL,
    expires_at DATETIME(6)      NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// takeLockSQL takes the lock row if it is free (absent or expired by the
// database's clock) or already ours, and then extends its lease. MySQL
// assigns left to right: once owner is assigned ours, the second condition
// holds; if it was not, expires_at keeps the other owner's lease.
// Arguments: owner, lease in microseconds.
const takeLockSQL = `INSERT INTO schema_migration_lock (id, owner, expires_at)
VALUES (1, ?, TIMESTAMPADD(MICROSECOND, ?, NOW(6)))
ON DUPLICATE KEY UPDATE
    owner      = IF(owner = VALUES(owner) OR expires_at < NOW(6), VALUES(owner), owner),
    expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)`

// migrationLock is one Migrate's hold on the lock.
type migrationLock struct {
	conn  *sql.Conn
	owner string // random, one per Migrate
}

// lockMigrations waits until conn's Migrate holds the migration lock, for
// at most lockWait.
func lockMigrations(ctx context.Context, conn *sql.Conn) (*migrationLock, error) {
	if _, err := conn.ExecContext(ctx, createLockTable); err != nil {
		return nil, fmt.Errorf("schema: creating schema_migration_lock: %w", err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	l := &migrationLock{conn: conn, owner: hex.EncodeToString(b[:])}
	deadline := clock.Real.Now().Add(lockWait)
	for {
		held, err := l.take(ctx)
		if err != nil {
			return nil, err
		}
		if held {
			return l, nil
		}
		if clock.Real.Now().After(deadline) {
			return nil, fmt.Errorf("schema: another process has held the migration lock for over %v; is a migration stuck? (DELETE FROM schema_migration_lock frees it)", lockWait)
		}
		if err := clock.Sleep(ctx, clock.Real, lockPoll); err != nil {
			return nil, fmt.Errorf("schema: waiting for the migration lock: %w", err)
		}
	}
}

// take runs the upsert and reads the row back (a causal read on Galera,
// cluster.OpenDB), and reports whether this Migrate holds the lock. A
// statement the database rolled back (a deadlock, or on a replicated
// database a certification failure: another node's upsert came first)
// counts as not holding it, to be tried again.
func (l *migrationLock) take(ctx context.Context) (bool, error) {
	if _, err := l.conn.ExecContext(ctx, takeLockSQL, l.owner, lockLease.Microseconds()); err != nil {
		if cluster.IsRetryable(err) {
			return false, nil
		}
		return false, fmt.Errorf("schema: taking the migration lock: %w", err)
	}
	var held bool
	err := l.conn.QueryRowContext(ctx, "SELECT owner = ? AND expires_at >= NOW(6) FROM schema_migration_lock WHERE id = 1", l.owner).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schema: reading the migration lock: %w", err)
	}
	return held, nil
}

// renew extends the lease before the next migration; it fails if another
// migrator took the lock after the lease ran out.
func (l *migrationLock) renew(ctx context.Context) error {
	held, err := l.take(ctx)
	if err == nil && !held {
		held, err = l.take(ctx) // once more after a rolled-back upsert
	}
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("schema: the migration lock's lease (%v) ran out and another process took it", lockLease)
	}
	return nil
}

// release frees the lock, even when ctx is done.
func (l *migrationLock) release(ctx context.Context) error {
	if _, err := l.conn.ExecContext(context.WithoutCancel(ctx), "DELETE FROM schema_migration_lock WHERE id = 1 AND owner = ?", l.owner); err != nil {
		return fmt.Errorf("schema: releasing the migration lock: %w", err)
	}
	return nil
}
