package mysqllog

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
)

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkEpoch returns nil if the partition is at epoch, an error wrapping
// ErrFenced if it is at another, ErrNoPartition if it is gone. With lock it
// reads with FOR UPDATE (q must be a transaction), which holds the
// partition's row until the transaction ends: an owner change waits for it,
// so whatever the transaction writes commits before the change, or not at
// all. what names the write, for the error.
func checkEpoch(ctx context.Context, q queryer, id, epoch uint64, lock bool, what string) error {
	query := "SELECT epoch FROM partitions WHERE id = ?"
	if lock {
		query += " FOR UPDATE"
	}
	var have uint64
	err := q.QueryRowContext(ctx, query, id).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: id %d (%s)", ErrNoPartition, id, what)
	}
	if err != nil {
		return fmt.Errorf("mysqllog: partition %d: %s: reading the partition epoch: %w", id, what, err)
	}
	if have != epoch {
		return fmt.Errorf("%w: partition %d is at epoch %d, this writer has epoch %d; %s refused",
			ErrFenced, id, have, epoch, what)
	}
	return nil
}

// DeleteBefore deletes the rows of the records with LSNs below lsn, which
// a snapshot at lsn-1 or later holds, and returns how many rows it
// deleted. A row that holds records on both sides of the new start (a
// round) stays whole; replay skips its records below FirstLSN. It makes *Log a coordinator.Compactor; where that interface
// counts segments, the unit here is a row.
//
// It never deletes a record that no complete snapshot holds: it deletes
// below the smallest of lsn, the newest complete snapshot's LSN + 1 and
// DurableLSN + 1 (nothing without a snapshot). It works oldest first in
// transactions of at most Options.DeleteBatchRows rows, each fenced like an
// append round: it locks the partition's row and checks the epoch first
// (an error wrapping ErrFenced, and nothing of that transaction deleted, if
// the partition has a newer owner), then raises partition_log_start to the
// new start and deletes. FirstLSN moves up as the first transaction
// commits; a Replay from below it then returns wal.ErrCompacted. A failed
// transaction stops DeleteBefore, which returns the rows deleted before it
// with the error; a later call continues. It deletes nothing and returns
// the sticky error once the log has failed, ErrClosed after Close.
func (l *Log) DeleteBefore(lsn uint64) (deleted int, err error) {
	if err := cmp.Or(l.gc.Err(), l.gc.Closed()); err != nil {
		return 0, err
	}
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	target := min(lsn, l.gc.DurableLSN()+1)
	if target <= 1 {
		return 0, nil
	}
	start := l.opts.Clock.Now()
	for {
		n, first, err := l.deleteBatch(target)
		deleted += n
		if first > l.first.Load() {
			l.first.Store(first)
		}
		if err != nil {
			return deleted, err
		}
		if first < target {
			l.opts.Logger.Warn("mysqllog: asked to delete records no snapshot holds; kept them",
				slog.Uint64("partition", l.id), slog.Uint64("delete_before", lsn), slog.Uint64("deletable_below", first))
		}
		if n < l.opts.DeleteBatchRows {
			break
		}
	}
	if deleted > 0 {
		l.opts.Logger.Info("mysqllog: deleted log rows below a snapshot", slog.Uint64("partition", l.id),
			slog.Int("rows", deleted), slog.Uint64("first_lsn", l.first.Load()), slog.Duration("took", l.opts.Clock.Now().Sub(start)))
	}
	return deleted, nil
}

// deleteBatch runs one transaction of DeleteBefore: it deletes at most
// DeleteBatchRows rows below target and below the newest snapshot + 1,
// and returns how many and the log's new first LSN (0 when it changed
// nothing).
func (l *Log) deleteBatch(target uint64) (deleted int, first uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.StatementTimeout)
	defer cancel()
	fail := func(what string, err error) (int, uint64, error) {
		return 0, 0, fmt.Errorf("mysqllog: partition %d: deleting rows below lsn %d: %s: %w", l.id, target, what, err)
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fail("begin", err)
	}
	defer tx.Rollback()
	// First, as an append round does: rows are locked in the same order
	// (the partition's row, then partition_log), so the two never
	// deadlock.
	if err := checkEpoch(ctx, tx, l.id, l.epoch, true, fmt.Sprintf("deleting log rows below lsn %d", target)); err != nil {
		return 0, 0, err
	}
	var snap sql.Null[uint64]
	if err := tx.QueryRowContext(ctx, "SELECT MAX(lsn) FROM partition_snapshots WHERE partition_id = ? AND discarded_at IS NULL",
		l.id).Scan(&snap); err != nil {
		return fail("reading the newest snapshot", err)
	}
	if !snap.Valid {
		return 0, 0, nil
	}
	bound := min(target, snap.V+1)
	if bound <= 1 {
		return 0, 0, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO partition_log_start (partition_id, first_lsn) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE first_lsn = GREATEST(first_lsn, ?)`, l.id, bound, bound); err != nil {
		return fail("raising partition_log_start", err)
	}
	// A round that begins below bound and holds records from bound on
	// stays whole (the rows below it end below it); any other row below
	// bound goes.
	below := bound
	lsn, end, ok, err := lastRowBelow(ctx, tx, l.id, bound)
	if err != nil {
		return fail("reading the last row below the new start", err)
	}
	if ok && end >= bound {
		below = lsn
	}
	res, err := tx.ExecContext(ctx, "DELETE FROM partition_log WHERE partition_id = ? AND lsn < ? ORDER BY lsn LIMIT ?",
		l.id, below, l.opts.DeleteBatchRows)
	if err != nil {
		return fail("delete", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fail("delete", err)
	}
	if err := tx.Commit(); err != nil {
		return fail("commit (outcome unknown)", err)
	}
	return int(n), bound, nil
}
