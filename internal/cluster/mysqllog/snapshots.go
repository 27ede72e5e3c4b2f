package mysqllog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
)

var (
	_ coordinator.SnapshotStore = (*SnapshotStore)(nil)
	_ coordinator.Compactor     = (*Log)(nil)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotStore keeps one partition's snapshots in the database: a
// coordinator.SnapshotStore for cluster mode, as snapshot.Dir is for
// embedded mode, with the same bytes (snapshot.Encode and Decode, and all
// their checks). A snapshot is rows of partition_snapshot_chunks (at most
// Options.SnapshotChunkBytes each) and one row of partition_snapshots,
// inserted last in the same transaction: it is visible exactly when it is
// complete. Every write is fenced by the partition's epoch, as the log's
// are: a deposed owner saves, removes and discards nothing.
//
// Its methods are safe for concurrent use; the coordinator calls them one
// at a time. Make one with Log.Snapshots (the writer's store) or
// NewSnapshotStore.
type SnapshotStore struct {
	db    *sql.DB
	id    uint64
	epoch uint64
	opts  Options
}

// Snapshots returns the store of the log's partition, writing at the log's
// epoch with its Options. The log's Open checked that max_allowed_packet
// admits its chunks.
func (l *Log) Snapshots() *SnapshotStore {
	return &SnapshotStore{db: l.db, id: l.id, epoch: l.epoch, opts: l.opts}
}

// NewSnapshotStore returns the store of the partition with the given id,
// whose writes succeed only while the partition is at epoch (reads work at
// any epoch). The server's max_allowed_packet must exceed twice
// opts.SnapshotChunkBytes (Open checks that; this does not).
func NewSnapshotStore(db *sql.DB, partitionID, epoch uint64, opts Options) (*SnapshotStore, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &SnapshotStore{db: db, id: partitionID, epoch: epoch, opts: opts}, nil
}

// Name is how the snapshot at lsn is named in answers and logs.
func (s *SnapshotStore) Name(lsn uint64) string {
	return fmt.Sprintf("partition %d snapshot at lsn %d", s.id, lsn)
}

func (s *SnapshotStore) stmtCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.opts.StatementTimeout)
}

// List returns the LSNs of the complete snapshots that were not discarded,
// oldest first.
func (s *SnapshotStore) List() ([]uint64, error) {
	ctx, cancel := s.stmtCtx()
	defer cancel()
	return cluster.Column[uint64](ctx, s.db, fmt.Sprintf("mysqllog: listing the snapshots of partition %d", s.id), `SELECT lsn FROM partition_snapshots
		WHERE partition_id = ? AND discarded_at IS NULL ORDER BY lsn LIMIT 100000`, s.id)
}

// Save stores img as the snapshot at img.LastLSN and returns its Name.
//
// Everything is one transaction: the chunks as snapshot.Encode produces
// them (one chunk in memory at a time), then the partition's epoch, read
// with FOR UPDATE, then the index row, then COMMIT. The epoch is locked
// last, not first, so that appends, which lock the same row, wait only for
// the end of the transaction and not for the whole write; the lock still
// orders the commit before any change of owner, or refuses it. Save checks
// the epoch once more before it starts, without a lock, so that a deposed
// owner does not write chunks for nothing. A deposed owner gets an error
// wrapping ErrFenced and nothing is saved. A snapshot at the same LSN must
// not exist (LSNs only grow: every snapshot first appends a record).
func (s *SnapshotStore) Save(img *state.Image) (string, error) {
	start := s.opts.Clock.Now()
	lsn := img.LastLSN
	name := s.Name(lsn)
	what := "saving the " + name
	ctx, cancel := s.stmtCtx()
	err := checkEpoch(ctx, s.db, s.id, s.epoch, false, what)
	cancel()
	if err != nil {
		return "", err
	}

	// The transaction lives as long as the write; each statement has its
	// own timeout.
	txCtx, txCancel := context.WithCancel(context.Background())
	defer txCancel()
	tx, err := s.db.BeginTx(txCtx, nil)
	if err != nil {
		return "", fmt.Errorf("mysqllog: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	w := &chunkWriter{s: s, tx: tx, lsn: lsn, size: s.opts.SnapshotChunkBytes}
	sum, err := snapshot.Encode(w, img)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return "", fmt.Errorf("mysqllog: %s: %w", what, err)
	}

	ctx, cancel = s.stmtCtx()
	defer cancel()
	if err := checkEpoch(ctx, tx, s.id, s.epoch, true, what); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO partition_snapshots
		(partition_id, lsn, epoch, chunks, bytes, crc, tasks) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		s.id, lsn, s.epoch, w.chunks, w.bytes, w.crc, sum.Tasks); err != nil {
		if cluster.IsDuplicateKey(err) {
			return "", fmt.Errorf("mysqllog: %s: a snapshot at that lsn exists already", what)
		}
		return "", fmt.Errorf("mysqllog: %s: inserting the index row: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("mysqllog: %s: commit (outcome unknown; List shows whether it was saved): %w", what, err)
	}
	s.opts.Logger.Info("mysqllog: saved snapshot", slog.Uint64("partition", s.id), slog.Uint64("lsn", lsn),
		slog.Int("tasks", sum.Tasks), slog.Int64("bytes", w.bytes), slog.Int("chunks", w.chunks),
		slog.Duration("took", s.opts.Clock.Now().Sub(start)))
	return name, nil
}

// chunkWriter cuts what snapshot.Encode writes into chunk rows, inserted
// in tx as each fills.
type chunkWriter struct {
	s      *SnapshotStore
	tx     *sql.Tx
	lsn    uint64
	size   int
	buf    []byte
	chunks int
	bytes  int64
	crc    uint32
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, w.size)
		}
		k := min(w.size-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(w.buf) == w.size {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush inserts the buffered bytes as the next chunk.
func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	ctx, cancel := w.s.stmtCtx()
	defer cancel()
	_, err := w.tx.ExecContext(ctx, "INSERT INTO partition_snapshot_chunks (partition_id, lsn, chunk, data) VALUES (?, ?, ?, ?)",
		w.s.id, w.lsn, w.chunks, w.buf)
	if cluster.IsDuplicateKey(err) {
		return fmt.Errorf("chunk %d: a snapshot at that lsn exists already", w.chunks)
	}
	if err != nil {
		return fmt.Errorf("inserting chunk %d (%d bytes): %w", w.chunks, len(w.buf), err)
	}
	w.crc = crc32.Update(w.crc, castagnoli, w.buf)
	w.chunks++
	w.bytes += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// Load reads the snapshot at lsn and verifies it completely (see Read).
func (s *SnapshotStore) Load(lsn uint64) (*state.State, error) {
	st, _, err := s.Read(lsn)
	return st, err
}

// Read reads the snapshot at lsn, verifies it completely and summarises
// it. It reads in one read-only transaction, so it sees the snapshot whole
// even if it is removed meanwhile. It checks the chunk rows against the
// index row (numbered 0 to chunks-1, their lengths adding up to bytes, the
// CRC-32C of all of them equal to crc), and snapshot.Decode checks the
// content: every problem is a *snapshot.CorruptError (errors.Is
// snapshot.ErrCorrupt) whose Path is the Name. A snapshot that does not
// exist, is incomplete (chunks without an index row) or was discarded is
// ErrNoSnapshot.
func (s *SnapshotStore) Read(lsn uint64) (*state.State, snapshot.Summary, error) {
	name := s.Name(lsn)
	corrupt := func(off int64, format string, args ...any) (*state.State, snapshot.Summary, error) {
		return nil, snapshot.Summary{}, &snapshot.CorruptError{Path: name, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	fail := func(what string, err error) (*state.State, snapshot.Summary, error) {
		return nil, snapshot.Summary{}, fmt.Errorf("mysqllog: reading the %s: %s: %w", name, what, err)
	}
	txCtx, txCancel := context.WithCancel(context.Background())
	defer txCancel()
	tx, err := s.db.BeginTx(txCtx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fail("begin", err)
	}
	defer tx.Rollback()

	ctx, cancel := s.stmtCtx()
	defer cancel()
	var (
		chunks    int
		bytes     int64
		crc       uint32
		discarded sql.NullString
	)
	err = tx.QueryRowContext(ctx, `SELECT chunks, bytes, crc, CAST(discarded_at AS CHAR)
		FROM partition_snapshots WHERE partition_id = ? AND lsn = ?`, s.id, lsn).Scan(&chunks, &bytes, &crc, &discarded)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, snapshot.Summary{}, fmt.Errorf("%w: %s (none, or not complete)", ErrNoSnapshot, name)
	}
	if err != nil {
		return fail("reading its index row", err)
	}
	if discarded.Valid {
		return nil, snapshot.Summary{}, fmt.Errorf("%w: the %s was discarded at %s UTC", ErrNoSnapshot, name, discarded.String)
	}

	// The layout first, so that nothing is read (or allocated) for a
	// snapshot whose rows do not add up.
	rows, err := tx.QueryContext(ctx, `SELECT chunk, LENGTH(data) FROM partition_snapshot_chunks
		WHERE partition_id = ? AND lsn = ? ORDER BY chunk LIMIT ?`, s.id, lsn, chunks+1)
	if err != nil {
		return fail("reading its chunk sizes", err)
	}
	var (
		sizes []int
		total int64
	)
	for rows.Next() {
		var c, n int64
		if err := rows.Scan(&c, &n); err != nil {
			rows.Close()
			return fail("reading its chunk sizes", err)
		}
		if c != int64(len(sizes)) {
			rows.Close()
			return corrupt(total, "chunk %d is missing (the next is chunk %d)", len(sizes), c)
		}
		if n < 1 || n > maxSnapshotChunkBytes {
			rows.Close()
			return corrupt(total, "chunk %d holds %d bytes; want 1 to %d", c, n, maxSnapshotChunkBytes)
		}
		sizes = append(sizes, int(n))
		total += n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail("reading its chunk sizes", err)
	}
	if len(sizes) != chunks {
		return corrupt(total, "the index row counts %d chunks, %d are stored", chunks, len(sizes))
	}
	if total != bytes {
		return corrupt(total, "the index row counts %d bytes, the chunks hold %d", bytes, total)
	}

	r := &chunkReader{s: s, tx: tx, lsn: lsn, name: name, sizes: sizes}
	st, sum, err := snapshot.Decode(r, bytes)
	if ce, ok := errors.AsType[*snapshot.CorruptError](err); ok {
		ce.Path = name
		return nil, sum, ce
	}
	if err != nil {
		return fail("decoding", err)
	}
	if r.crc != crc {
		return corrupt(bytes, "the chunks' CRC-32C is %08x, the index row says %08x", r.crc, crc)
	}
	if sum.LastLSN != lsn {
		return corrupt(0, "the snapshot says it ends at lsn %d, its rows say %d", sum.LastLSN, lsn)
	}
	return st, sum, nil
}

// chunkReader reads a snapshot's chunks in order, one row at a time.
type chunkReader struct {
	s     *SnapshotStore
	tx    *sql.Tx
	lsn   uint64
	name  string
	sizes []int
	next  int   // the chunk to fetch next
	off   int64 // where buf starts in the snapshot
	buf   []byte
	pos   int
	crc   uint32
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for r.pos == len(r.buf) {
		if r.next == len(r.sizes) {
			return 0, io.EOF
		}
		if err := r.fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.pos:])
	r.pos += n
	return n, nil
}

func (r *chunkReader) fetch() error {
	ctx, cancel := r.s.stmtCtx()
	defer cancel()
	rows, err := r.tx.QueryContext(ctx, "SELECT data FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ? AND chunk = ?",
		r.s.id, r.lsn, r.next)
	if err != nil {
		return fmt.Errorf("mysqllog: reading chunk %d of the %s: %w", r.next, r.name, err)
	}
	defer rows.Close()
	r.off += int64(len(r.buf))
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("mysqllog: reading chunk %d of the %s: %w", r.next, r.name, err)
		}
		return &snapshot.CorruptError{Path: r.name, Offset: r.off, Reason: fmt.Sprintf("chunk %d is missing", r.next)}
	}
	var data sql.RawBytes // valid until rows.Close: copied
	if err := rows.Scan(&data); err != nil {
		return fmt.Errorf("mysqllog: reading chunk %d of the %s: %w", r.next, r.name, err)
	}
	if len(data) != r.sizes[r.next] {
		return &snapshot.CorruptError{Path: r.name, Offset: r.off,
			Reason: fmt.Sprintf("chunk %d holds %d bytes, %d a moment ago", r.next, len(data), r.sizes[r.next])}
	}
	r.buf = append(r.buf[:0], data...)
	r.pos = 0
	r.crc = crc32.Update(r.crc, castagnoli, r.buf)
	r.next++
	return nil
}

// Remove deletes the snapshot at lsn: its index row and its chunks, in one
// transaction fenced as Save's is (the epoch locked last; ErrFenced and
// nothing deleted for a deposed owner). It also removes a discarded
// snapshot, and the chunks of an incomplete one. ErrNoSnapshot if there is
// nothing at lsn.
func (s *SnapshotStore) Remove(lsn uint64) error {
	name := s.Name(lsn)
	what := "removing the " + name
	return s.fenced(what, func(ctx context.Context, tx *sql.Tx) error {
		var n int64
		for _, q := range []string{
			"DELETE FROM partition_snapshots WHERE partition_id = ? AND lsn = ?",
			"DELETE FROM partition_snapshot_chunks WHERE partition_id = ? AND lsn = ?",
		} {
			res, err := tx.ExecContext(ctx, q, s.id, lsn)
			if err != nil {
				return fmt.Errorf("mysqllog: %s: %w", what, err)
			}
			k, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("mysqllog: %s: %w", what, err)
			}
			n += k
		}
		if n == 0 {
			return fmt.Errorf("%w: %s", ErrNoSnapshot, name)
		}
		return nil
	})
}

// fenced runs change in a transaction of one statement's timeout and
// commits it only if this owner's epoch still holds, checked last with the
// partition's row locked (ErrFenced and nothing changed for a deposed
// owner); what names the change in errors.
func (s *SnapshotStore) fenced(what string, change func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, cancel := s.stmtCtx()
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mysqllog: %s: begin: %w", what, err)
	}
	defer tx.Rollback()
	if err := change(ctx, tx); err != nil {
		return err
	}
	if err := checkEpoch(ctx, tx, s.id, s.epoch, true, what); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mysqllog: %s: commit (outcome unknown): %w", what, err)
	}
	return nil
}

// Discard takes the snapshot at lsn out of use, fenced as Save is: it sets
// its discarded_at, so List, Read and DeleteBefore ignore it from then on,
// and keeps its rows for inspection (Remove deletes them). It returns the
// Name with a note. Discarding a discarded snapshot again does nothing;
// ErrNoSnapshot if there is no complete snapshot at lsn.
func (s *SnapshotStore) Discard(lsn uint64) (string, error) {
	name := s.Name(lsn)
	what := "discarding the " + name
	err := s.fenced(what, func(ctx context.Context, tx *sql.Tx) error {
		var discarded bool
		err := tx.QueryRowContext(ctx, "SELECT discarded_at IS NOT NULL FROM partition_snapshots WHERE partition_id = ? AND lsn = ? FOR UPDATE",
			s.id, lsn).Scan(&discarded)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNoSnapshot, name)
		}
		if err != nil {
			return fmt.Errorf("mysqllog: %s: %w", what, err)
		}
		if discarded {
			return nil
		}
		if _, err := tx.ExecContext(ctx, "UPDATE partition_snapshots SET discarded_at = NOW(6) WHERE partition_id = ? AND lsn = ?",
			s.id, lsn); err != nil {
			return fmt.Errorf("mysqllog: %s: %w", what, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return name + " (discarded; its rows are kept for inspection)", nil
}
