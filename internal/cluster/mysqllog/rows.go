package mysqllog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/internal/wal"
)

// Rows is a partition's log as any node of the cluster reads it, owner or
// not: the committed rows of partition_log as they are, for the event
// streams (docs/design/events.md). A committed row is durable, and rows
// are committed in LSN order (one writer at a time, fenced), so a reader
// sees a prefix of the log. Rows writes nothing and fences nothing.
type Rows struct {
	db   *sql.DB
	id   uint64
	opts Options
}

// NewRows returns the rows of partition partitionID.
func NewRows(db *sql.DB, partitionID uint64, opts Options) *Rows {
	return &Rows{db: db, id: partitionID, opts: opts.withDefaults()}
}

func (r *Rows) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opts.StatementTimeout)
}

// First returns the first LSN the log holds: where compaction made it
// start (partition_log_start), 1 if it never did.
func (r *Rows) First(ctx context.Context) (uint64, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	var first sql.Null[uint64]
	err := r.db.QueryRowContext(ctx, "SELECT first_lsn FROM partition_log_start WHERE partition_id = ?", r.id).Scan(&first)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("mysqllog: partition %d: reading where its log starts: %w", r.id, err)
	}
	return max(first.V, 1), nil
}

// Last returns the LSN of the last committed record (0: none), as far as
// the rows show it: the last row's last record, or, with every row
// deleted, the record before First.
func (r *Rows) Last(ctx context.Context) (uint64, error) {
	first, err := r.First(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	var (
		lsn  uint64
		typ  uint16
		head []byte
	)
	err = r.db.QueryRowContext(ctx, `SELECT lsn, type, SUBSTRING(payload, 1, 10) FROM partition_log
		WHERE partition_id = ? ORDER BY lsn DESC LIMIT 1`, r.id).Scan(&lsn, &typ, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return first - 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mysqllog: partition %d: reading its last row: %w", r.id, err)
	}
	n, err := rowRecords(lsn, typ, head)
	if err != nil {
		return 0, fmt.Errorf("partition %d: %w", r.id, err)
	}
	return max(lsn+n-1, first-1), nil
}

// Reader returns a reader of the log from LSN from on.
func (r *Rows) Reader(from uint64) *RowReader { return &RowReader{r: r, next: max(from, 1)} }

// RowReader reads a partition's committed records in LSN order, a page of
// rows per query, from where it stopped. It is not safe for concurrent
// use.
type RowReader struct {
	r    *Rows
	next uint64
}

// errPageDone ends a page once Read has read max records.
var errPageDone = errors.New("page done")

// Read calls fn for at most max of the records committed from where the
// last Read stopped, and returns how many it read: 0 when none more is
// committed. e.Payload is valid only during fn. A record fn fails on is
// read again by the next Read. An error wrapping wal.ErrCompacted says the
// log let the next record go.
func (rd *RowReader) Read(ctx context.Context, max int, fn func(lsn uint64, e wal.Entry) error) (int, error) {
	r := rd.r
	qctx, cancel := r.ctx(ctx)
	defer cancel()
	rows, err := r.db.QueryContext(qctx, `SELECT lsn, type, payload FROM partition_log
		WHERE partition_id = ? AND lsn >= (SELECT COALESCE(MAX(lsn), 0) FROM partition_log WHERE partition_id = ? AND lsn <= ?)
		ORDER BY lsn LIMIT ?`, r.id, r.id, rd.next, min(max, r.opts.ReplayPageRecords))
	if err != nil {
		return 0, fmt.Errorf("mysqllog: partition %d: reading rows from lsn %d: %w", r.id, rd.next, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var (
			lsn     uint64
			typ     uint16
			payload sql.RawBytes
		)
		if err := rows.Scan(&lsn, &typ, &payload); err != nil {
			return n, fmt.Errorf("mysqllog: partition %d: %w", r.id, err)
		}
		if lsn > rd.next {
			return n, rd.gap(ctx, lsn)
		}
		err := RowRecords(lsn, typ, payload, r.opts.MaxRecordBytes, func(at uint64, e wal.Entry) error {
			if at < rd.next {
				return nil // before the reader's place, in the row that holds it
			}
			if n == max {
				return errPageDone
			}
			if err := fn(at, e); err != nil {
				return err
			}
			rd.next++
			n++
			return nil
		})
		if errors.Is(err, errPageDone) {
			return n, nil
		}
		if errors.Is(err, ErrCorrupt) {
			return n, fmt.Errorf("partition %d: %w", r.id, err)
		}
		if err != nil {
			return n, err
		}
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("mysqllog: partition %d: reading rows: %w", r.id, err)
	}
	return n, nil
}

// gap explains a row after the reader's next record with none that holds
// it: compaction deleted it (wal.ErrCompacted), or the log is damaged.
func (rd *RowReader) gap(ctx context.Context, found uint64) error {
	first, err := rd.r.First(ctx)
	if err != nil {
		return err
	}
	if rd.next < first {
		return fmt.Errorf("mysqllog: partition %d: lsn %d was deleted before it was read (the log now starts at lsn %d): %w",
			rd.r.id, rd.next, first, wal.ErrCompacted)
	}
	return fmt.Errorf("%w: partition %d: lsn %d is missing (the next row is lsn %d)", ErrCorrupt, rd.r.id, rd.next, found)
}

// Close releases nothing: a RowReader holds no connection between reads.
func (rd *RowReader) Close() error { return nil }
