// Package election elects tenure's cluster coordinator through one row of
// the helix_locks table (docs/design/cluster.md). The table and the statement are
// the lock-table design common to Helix-style coordinators, with two
// corrections to the usual statement.
//
// # The statement
//
// A node acquires and renews the lock with one INSERT … ON DUPLICATE KEY
// UPDATE (acquireSQL): it inserts the row, or takes it over when the lock is
// its own or has expired, and then increments epoch. Every acquisition and
// every renewal increments epoch, so no two confirmed holds ever share one.
// The usual statement (naiveSQL in the tests) is kept except for:
//
//   - (a) It takes the row when expires_at < VALUES(expires_at), that
//     is, when the caller's new expiry is later than the holder's: any node
//     that tries later than the holder's last renewal, or whose clock runs
//     ahead, takes a lock that is still live. We take it only when
//     expires_at < NOW(6): when it has actually expired.
//   - (b) Every time is the database's: the new expiry is
//     TIMESTAMPADD(SECOND, TTL+1, NOW()) and the comparison uses NOW(6), both
//     evaluated by the server in the statement. No node's clock enters a
//     lock time, so clock skew between nodes cannot split the brain.
//
// A third, smaller fix: the usual statement writes the expiry as NOW() +
// <seconds>,
// which MySQL evaluates as a number (20260101120055 + 10 = 20260101120065,
// not a time). TIMESTAMPADD adds seconds. Because expires_at is a whole-second
// TIMESTAMP and NOW() is truncated to the second, the
// statement adds TTL+1 seconds: the lease is never shorter than TTL from the
// moment the statement ran, and at most one second longer.
//
// # Confirm by read, and the trust window
//
// After the statement the node reads the row back (owner, epoch, expiry and
// the server's NOW(6)) and holds the lock only if the statement changed the
// row, the row names it as owner and it has not expired.
//
// The read is a locking one (LOCK IN SHARE MODE), and a read that misses
// a row the statement met is made again. When two nodes race for a free
// lock, the loser's upsert waits for the winner's insert, finds the row
// and leaves it (no row changed). On MariaDB 10.11 the loser's next read,
// begun after that, could still miss the row: a snapshot read about once
// in 60,000 races on a loaded machine (TestRaceForFreeLock), a locking
// read more rarely. The winner's row lock is, it seems, released before
// its commit is visible to every later read. The loser then saw no lock at
// all. It never believed itself the holder (that needs the statement to
// have changed the row), but it reported no holder and did not wait for
// the holder's expiry. Since a statement that changed nothing met a row, a
// read that misses the row after it is made again, up to maxConfirmReads
// times.
//
// A holder renews every RenewInterval (TTL/4 by default) and must see each
// renewal's epoch be exactly one more than the last; anything else means
// another process holds or renews the lock, and it steps down.
//
// A holder that cannot confirm a renewal stops acting as coordinator when
// its trust window ends: TrustWindow (TTL − max(1 s, TTL/5)) after the moment
// it SENT the last statement that it confirmed, measured on its own
// monotonic clock. The server ran that statement no earlier than it was
// sent, so the lease it granted ends at least TTL after the send; the
// holder gives up at least max(1 s, TTL/5) before another node could take
// the lock. A renewal stuck in the database (a lock wait, a dead
// connection) does not delay the step-down: it runs in its own goroutine and
// is cancelled.
//
// Standby nodes read the row every CheckInterval (10 s), or just after the
// live lock they saw expires if that is sooner, and try to acquire it when
// it has expired or does not exist.
package election
