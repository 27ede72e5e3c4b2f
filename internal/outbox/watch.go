package outbox

import (
	"context"
	"database/sql"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/clock"
)

// MeasureEvery is how often a relay measures its outbox (Stats.Depth,
// OldestAge, FailedRows).
const MeasureEvery = 5 * time.Second

// listen wakes the relay whenever PostgreSQL notifies that rows of its
// table were committed, on a connection of its own, opened again (after
// a growing wait) when it breaks, until ctx ends. A notification missed
// meanwhile is made up for by the relay's poll.
func (r *Relay) listen(ctx context.Context) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.cfg.Logger.Warn("outbox relay: listening for notifications failed; polling every "+r.cfg.Poll.String()+" meanwhile", "err", err)
		backoff = min(max(2*backoff, time.Second), maxBackoff)
		clock.Sleep(ctx, r.cfg.Clock, backoff)
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	r.Wake() // rows committed before the LISTEN
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == r.cfg.Table.Name {
			r.Wake()
		}
	}
}

// measure measures the outbox every MeasureEvery until ctx ends.
func (r *Relay) measure(ctx context.Context) {
	for ctx.Err() == nil {
		if err := r.Measure(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("outbox relay: measuring the outbox failed", "err", err)
		}
		clock.Sleep(ctx, r.cfg.Clock, MeasureEvery)
	}
}

// Measure counts the rows of the outbox and of its failed table, and the
// age of the oldest row, into Stats.
func (r *Relay) Measure(ctx context.Context) error {
	t := r.cfg.Table
	var depth, failed int64
	if err := r.cfg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.Name).Scan(&depth); err != nil {
		return err
	}
	if err := r.cfg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.Failed()).Scan(&failed); err != nil {
		return err
	}
	var oldest sql.NullTime
	err := r.cfg.DB.QueryRowContext(ctx, "SELECT created_at FROM "+t.Name+" ORDER BY id LIMIT 1").Scan(&oldest)
	if err != nil && err != sql.ErrNoRows {
		return err
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Depth, r.stats.FailedRows, r.stats.Measured, r.stats.OldestAge = depth, failed, now, 0
	if oldest.Valid {
		r.stats.OldestAge = max(0, now.Sub(oldest.Time))
	}
	return nil
}

// Failure is a row the relay moved to the failed table.
type Failure struct {
	ID        int64
	RequestID string
	FailedAt  time.Time
	Error     string
}

// Failures returns the last n rows of the outbox's failed table, newest
// first.
func Failures(ctx context.Context, db *sql.DB, t Table, n int) ([]Failure, error) {
	rs, err := db.QueryContext(ctx, "SELECT id, request_id, failed_at, error FROM "+t.Failed()+" ORDER BY failed_at DESC, id DESC LIMIT "+strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Failure
	for rs.Next() {
		var f Failure
		if err := rs.Scan(&f.ID, &f.RequestID, &f.FailedAt, &f.Error); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rs.Err()
}
