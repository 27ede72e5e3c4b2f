package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// Defaults of a Relay's Config.
const (
	DefaultBatch        = 500
	DefaultPoll         = 100 * time.Millisecond // MySQL
	DefaultNotifiedPoll = 5 * time.Second        // PostgreSQL, beside NOTIFY
	DefaultCleanup      = time.Minute
	maxBackoff          = 30 * time.Second
	minBackoff          = 100 * time.Millisecond
	// MaxBatch is the most rows a round takes: the server's limit of a
	// batch.
	MaxBatch = 1000
)

// Config configures a Relay.
type Config struct {
	// DB is a pool on the outbox's database; DSN its DSN, from which a
	// PostgreSQL relay opens the connection it listens on.
	DB  *sql.DB
	DSN string
	// Table is the outbox.
	Table Table
	// Name is the outbox's name in the server's log ("": the database's
	// name for it, Relay.Name).
	Name string
	// Target is the server's OutboxService.
	Target tenurev1connect.OutboxServiceClient
	// Batch is the most rows a round takes (0: DefaultBatch).
	Batch int
	// Poll is how often the relay looks for rows when none woke it (0:
	// DefaultPoll on MySQL, DefaultNotifiedPoll on PostgreSQL).
	Poll time.Duration
	// Cleanup is how often the relay releases the holds of rows no longer
	// in the table (0: DefaultCleanup); it also does at its start.
	Cleanup time.Duration
	Logger  *slog.Logger
	Clock   clock.Clock
}

// Relay submits the committed rows of one outbox to a server exactly once
// and deletes them (docs/design/outbox.md).
type Relay struct {
	cfg  Config
	name string
	wake chan struct{}

	mu    sync.Mutex
	stats Stats
}

// Stats is what a relay has done since it started, and what it last saw
// of its outbox.
type Stats struct {
	// Relayed counts the rows submitted (tasks created or found) and
	// deleted; Failed the rows moved to the failed table; Rounds the
	// rounds that took rows.
	Relayed, Failed, Rounds uint64
	// Depth is the number of rows in the outbox, OldestAge the age of the
	// oldest, and FailedRows the rows of the failed table, when last
	// measured (Measured).
	Depth      int64
	OldestAge  time.Duration
	FailedRows int64
	Measured   time.Time
	// LastError is the error of the last round that failed, and when
	// ("" once a round succeeds).
	LastError   string
	LastErrorAt time.Time
}

// NewRelay returns the relay of cfg, having named its outbox (from the
// database unless cfg.Name names it) and checked its tables.
func NewRelay(ctx context.Context, cfg Config) (*Relay, error) {
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Batch < 1 || cfg.Batch > MaxBatch {
		return nil, fmt.Errorf("outbox: a batch of %d rows is outside 1..%d", cfg.Batch, MaxBatch)
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
		if cfg.Table.DB == sdkoutbox.PostgreSQL {
			cfg.Poll = DefaultNotifiedPoll
		}
	}
	if cfg.Cleanup == 0 {
		cfg.Cleanup = DefaultCleanup
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if err := Check(ctx, cfg.DB, cfg.Table); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		var err error
		if name, err = DatabaseName(ctx, cfg.DB, cfg.Table); err != nil {
			return nil, err
		}
	}
	r := &Relay{cfg: cfg, name: name, wake: make(chan struct{}, 1)}
	r.cfg.Logger = cfg.Logger.With("outbox", name)
	return r, nil
}

// DatabaseName is the name an outbox goes by in the server's log unless
// given one: its database's kind and name, and the table
// ("postgres:shop.public.tenure_outbox", "mysql:shop.tenure_outbox").
func DatabaseName(ctx context.Context, db *sql.DB, t Table) (string, error) {
	var q, kind string
	if t.DB == sdkoutbox.PostgreSQL {
		q, kind = "SELECT current_database() || '.' || current_schema()", "postgres"
	} else {
		q, kind = "SELECT DATABASE()", "mysql"
	}
	var where sql.NullString
	if err := db.QueryRowContext(ctx, q).Scan(&where); err != nil {
		return "", fmt.Errorf("outbox: naming the outbox after its database: %w", err)
	}
	if !where.Valid || where.String == "" {
		return "", errors.New("outbox: the DSN names no database: name one (…/dbname)")
	}
	prefix := where.String
	if strings.Contains(t.Name, ".") { // schema.table: the schema is the table's
		prefix, _, _ = strings.Cut(prefix, ".")
	}
	return kind + ":" + prefix + "." + t.Name, nil
}

// Name is the outbox's name in the server's log.
func (r *Relay) Name() string { return r.name }

// Table is the outbox's table.
func (r *Relay) Table() Table { return r.cfg.Table }

// Stats returns what the relay has done.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Run relays until ctx ends: it releases the holds of rows gone from the
// table (at its start and every Cleanup), drains the table while rounds
// come back full, then waits for a notification or the poll interval.
// Errors are logged and retried with a growing wait; Run returns only
// ctx's error.
func (r *Relay) Run(ctx context.Context) error {
	if r.cfg.Table.DB == sdkoutbox.PostgreSQL && r.cfg.DSN != "" {
		go r.listen(ctx)
	}
	go r.measure(ctx)
	backoff := time.Duration(0)
	nextCleanup := time.Time{}
	for ctx.Err() == nil {
		if now := r.cfg.Clock.Now(); !now.Before(nextCleanup) {
			if err := r.Cleanup(ctx); err != nil {
				r.failed(ctx, "releasing the holds of rows gone from the table", err)
			} else {
				nextCleanup = now.Add(r.cfg.Cleanup)
			}
		}
		n, err := r.Round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.failed(ctx, "relaying", err)
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			clock.Sleep(ctx, r.cfg.Clock, backoff)
			continue
		case n == r.cfg.Batch:
			backoff = 0
			continue // more may be waiting
		}
		backoff = 0
		r.idle(ctx)
	}
	return ctx.Err()
}

// failed logs an error of Run and keeps it for Stats.
func (r *Relay) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	r.cfg.Logger.Warn("outbox relay: "+what+" failed; retrying", "err", err)
	r.mu.Lock()
	r.stats.LastError, r.stats.LastErrorAt = fmt.Sprintf("%s: %v", what, err), r.cfg.Clock.Now()
	r.mu.Unlock()
}

// idle waits for a wake-up, the poll interval or ctx.
func (r *Relay) idle(ctx context.Context) {
	t := r.cfg.Clock.NewTimer(r.cfg.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-t.C():
	}
}

// Wake makes an idle relay look for rows at once.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// row is one row of the outbox, as a round read it.
type row struct {
	id        int64
	requestID string
	request   []byte
	createdAt time.Time
	msg       *tenurev1.SubmitRequest // nil: it does not decode
	err       string                  // why it fails ("": relayed)
	result    *tenurev1.RelayResult
}

// Round relays one batch: it locks up to Batch rows (skipping those
// another relay holds), submits those that decode, moves the refused and
// undecodable ones to the failed table, deletes them all and commits, then
// releases the rows' holds. It returns the number of rows it took. An
// error before the commit leaves every row in the table.
func (r *Relay) Round(ctx context.Context) (int, error) {
	t := r.cfg.Table
	tx, err := r.cfg.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("beginning a transaction: %w", err)
	}
	defer tx.Rollback()
	rows, err := r.lock(ctx, tx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	// The delete goes first: a statement the database refuses (MySQL may
	// call two relays' deletes a deadlock) then fails the round before
	// any row was submitted. It commits only after the server answered.
	ids := make([]any, len(rows))
	for i, rw := range rows {
		ids[i] = rw.id
	}
	q := "DELETE FROM " + t.Name + " WHERE id IN " + placeholders(t.DB, 1, len(ids))
	if _, err := tx.ExecContext(ctx, q, ids...); err != nil {
		return 0, fmt.Errorf("deleting %d rows: %w", len(ids), err)
	}
	if err := r.relay(ctx, rows); err != nil {
		return 0, err
	}
	var failed []int64
	var moved []any
	for _, rw := range rows {
		if rw.err != "" {
			failed = append(failed, rw.id)
			moved = append(moved, rw.id, rw.requestID, string(rw.request), rw.createdAt, rw.err)
		}
	}
	if len(failed) > 0 {
		q := "INSERT INTO " + t.Failed() + " (id, request_id, request, created_at, error) VALUES " + placeholders(t.DB, len(failed), 5)
		if _, err := tx.ExecContext(ctx, q, moved...); err != nil {
			return 0, fmt.Errorf("moving %d rows to %s: %w", len(failed), t.Failed(), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("committing the delete of %d rows: %w", len(rows), err)
	}
	for _, rw := range rows {
		if rw.err != "" {
			r.cfg.Logger.Warn("outbox relay: moved a row the server refused to the failed table", "row", rw.id, "request_id", rw.requestID, "table", t.Failed(), "err", rw.err)
		}
	}
	r.mu.Lock()
	r.stats.Relayed += uint64(len(rows) - len(failed))
	r.stats.Failed += uint64(len(failed))
	r.stats.Rounds++
	r.stats.LastError = ""
	r.mu.Unlock()
	if err := r.release(ctx, rows); err != nil {
		// The rows are gone: their holds keep their tasks until a
		// cleanup releases them.
		r.failed(ctx, "releasing the rows deleted", err)
	}
	return len(rows), nil
}

// lock reads and locks the next rows of the outbox in tx.
func (r *Relay) lock(ctx context.Context, tx *sql.Tx) ([]*row, error) {
	q := "SELECT id, request_id, request, created_at FROM " + r.cfg.Table.Name +
		" ORDER BY id LIMIT " + strconv.Itoa(r.cfg.Batch) + " FOR UPDATE SKIP LOCKED"
	rs, err := tx.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	defer rs.Close()
	var out []*row
	for rs.Next() {
		rw := &row{}
		if err := rs.Scan(&rw.id, &rw.requestID, &rw.request, &rw.createdAt); err != nil {
			return nil, fmt.Errorf("reading the outbox: %w", err)
		}
		rw.msg, rw.err = decodeRequest(rw.requestID, rw.request)
		out = append(out, rw)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	return out, nil
}

// decodeRequest is a row's request with its request id, or why it has
// none.
func decodeRequest(requestID string, js []byte) (*tenurev1.SubmitRequest, string) {
	m := new(tenurev1.SubmitRequest)
	if err := protojson.Unmarshal(js, m); err != nil {
		return nil, fmt.Sprintf("the request is not a tenure.v1.SubmitRequest in JSON (check field names and types; bytes fields are base64): %v", err)
	}
	switch {
	case requestID == "":
		return nil, "request_id is empty: a row needs one (leave the column to its default for a random one)"
	case m.RequestId != "" && m.RequestId != requestID:
		return nil, fmt.Sprintf("the request's request_id %q is not the row's %q: leave it out of the request", m.RequestId, requestID)
	}
	m.RequestId = requestID
	return m, ""
}

// relay submits the rows that decode, setting each one's result or
// error. A call refused as a whole for what a row holds (an invalid
// argument, a body too large, a scope the token lacks) is tried again row
// by row, so that the rows at fault are refused alone.
func (r *Relay) relay(ctx context.Context, rows []*row) error {
	var todo []*row
	for _, rw := range rows {
		if rw.msg != nil {
			todo = append(todo, rw)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	err := r.call(ctx, todo)
	if err == nil || !rowsFault(err) {
		return err
	}
	for _, rw := range todo {
		if err := r.call(ctx, []*row{rw}); err != nil {
			if !rowsFault(err) {
				return err
			}
			rw.err = "the server refused the row: " + err.Error()
		}
	}
	return nil
}

// call relays rows in one call.
func (r *Relay) call(ctx context.Context, rows []*row) error {
	msg := &tenurev1.RelayRequest{Outbox: r.name, Rows: make([]*tenurev1.OutboxRow, len(rows))}
	for i, rw := range rows {
		msg.Rows[i] = &tenurev1.OutboxRow{Row: rw.id, Request: rw.msg}
	}
	resp, err := r.cfg.Target.Relay(ctx, connect.NewRequest(msg))
	if err != nil {
		return err
	}
	res := resp.Msg.GetResults()
	if len(res) != len(rows) {
		return fmt.Errorf("the server answered %d results for %d rows (a server bug)", len(res), len(rows))
	}
	for i, rw := range rows {
		rw.result = res[i]
		if res[i].GetError() != nil || res[i].GetTaskId() == "" {
			rw.err = "the server refused the row: " + res[i].GetMessage()
		}
	}
	return nil
}

// rowsFault reports whether a call was refused for what its rows hold,
// not for the state of the server or the network.
func rowsFault(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied:
		return true
	case connect.CodeResourceExhausted:
		// TOO_LARGE is the row's; FULL (the memory budget) is the
		// server's, and passes.
		var ce *connect.Error
		if errors.As(err, &ce) {
			for _, d := range ce.Details() {
				if v, derr := d.Value(); derr == nil {
					if ed, ok := v.(*tenurev1.ErrorDetail); ok {
						return ed.GetReason() == tenurev1.ErrorReason_ERROR_REASON_TOO_LARGE
					}
				}
			}
		}
	}
	return false
}

// release ends the holds of the rows relayed (not those moved aside,
// which hold nothing).
func (r *Relay) release(ctx context.Context, rows []*row) error {
	msg := &tenurev1.ReleaseRequest{Outbox: r.name}
	for _, rw := range rows {
		if rw.err == "" {
			msg.Rows = append(msg.Rows, &tenurev1.OutboxHold{Row: rw.id, Namespace: rw.msg.GetNamespace(), Queue: rw.msg.GetQueue(), RequestId: rw.requestID})
		}
	}
	if len(msg.Rows) == 0 {
		return nil
	}
	_, err := r.cfg.Target.Release(ctx, connect.NewRequest(msg))
	return err
}

// Cleanup releases the holds of the outbox whose rows are no longer in
// the table: those of a relay stopped between its delete and its release.
// A row still there is being relayed (or will be again): its hold stays.
// Run calls it at its start and every Config.Cleanup.
func (r *Relay) Cleanup(ctx context.Context) error {
	resp, err := r.cfg.Target.ListOutboxHolds(ctx, connect.NewRequest(&tenurev1.ListOutboxHoldsRequest{Outbox: r.name}))
	if err != nil {
		return err
	}
	holds := resp.Msg.GetHolds()
	var gone []*tenurev1.OutboxHold
	for lo := 0; lo < len(holds); lo += MaxBatch {
		part := holds[lo:min(lo+MaxBatch, len(holds))]
		args := make([]any, len(part))
		for i, h := range part {
			args[i] = h.GetRow()
		}
		rs, err := r.cfg.DB.QueryContext(ctx, "SELECT id FROM "+r.cfg.Table.Name+" WHERE id IN "+placeholders(r.cfg.Table.DB, 1, len(part)), args...)
		if err != nil {
			return fmt.Errorf("reading the outbox: %w", err)
		}
		there := map[int64]bool{}
		for rs.Next() {
			var id int64
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return err
			}
			there[id] = true
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		for _, h := range part {
			if !there[h.GetRow()] {
				gone = append(gone, h)
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	r.cfg.Logger.Info("outbox relay: releasing the holds of rows gone from the table (a relay stopped before it released them)", "rows", len(gone))
	for lo := 0; lo < len(gone); lo += MaxBatch {
		if _, err := r.cfg.Target.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Outbox: r.name, Rows: gone[lo:min(lo+MaxBatch, len(gone))]})); err != nil {
			return err
		}
	}
	return nil
}

// placeholders is "(p, p, …), (…)": rows groups of n parameters in the
// database's style.
func placeholders(db sdkoutbox.Database, rows, n int) string {
	var b strings.Builder
	k := 0
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := range n {
			if j > 0 {
				b.WriteByte(',')
			}
			k++
			if db == sdkoutbox.PostgreSQL {
				b.WriteString("$" + strconv.Itoa(k))
			} else {
				b.WriteByte('?')
			}
		}
		b.WriteByte(')')
	}
	return b.String()
}
