package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// Table names an outbox table in its database, and the tables and
// objects that go with it.
type Table struct {
	DB   sdkoutbox.Database
	Name string // the outbox table, as in sdkoutbox.Options.Table
}

// Failed is the table failed rows are moved to.
func (t Table) Failed() string { return t.Name + "_failed" }

// notifyFunc is the PostgreSQL function that notifies the relay of new
// rows, in the table's schema; notifyTrigger the trigger that calls it
// (a trigger's name is not qualified: it belongs to its table).
func (t Table) notifyFunc() string { return t.Name + "_notify" }

func (t Table) notifyTrigger() string {
	_, name, ok := strings.Cut(t.Name, ".")
	if !ok {
		name = t.Name
	}
	return name + "_notify"
}

// NotifyChannel is the PostgreSQL channel the outbox tables' trigger
// notifies, with the table's name as the payload.
const NotifyChannel = "tenure_outbox"

// NewTable checks name (sdkoutbox's rules; "" is the default table).
func NewTable(db sdkoutbox.Database, name string) (Table, error) {
	o, err := sdkoutbox.New(sdkoutbox.Options{Database: db, Table: name})
	if err != nil {
		return Table{}, err
	}
	return Table{DB: db, Name: o.Table()}, nil
}

// DDL is the SQL that creates the outbox's tables (and, on PostgreSQL, its
// trigger), one statement per element, each safe to run again: what
// Migrate runs, and what docs/guides/outbox.md shows for teams that run
// their own migrations.
func (t Table) DDL() []string {
	if t.DB == sdkoutbox.PostgreSQL {
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + t.Name + ` (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id text NOT NULL DEFAULT gen_random_uuid()::text,
    request    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`,
			`CREATE TABLE IF NOT EXISTS ` + t.Failed() + ` (
    id         bigint PRIMARY KEY,
    request_id text NOT NULL,
    request    jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT now(),
    error      text NOT NULL
)`,
			`CREATE OR REPLACE FUNCTION ` + t.notifyFunc() + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('` + NotifyChannel + `', '` + t.Name + `');
    RETURN NULL;
END
$$`,
			`DROP TRIGGER IF EXISTS ` + t.notifyTrigger() + ` ON ` + t.Name,
			`CREATE TRIGGER ` + t.notifyTrigger() + ` AFTER INSERT ON ` + t.Name + `
    FOR EACH STATEMENT EXECUTE FUNCTION ` + t.notifyFunc() + `()`,
		}
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.Name + ` (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    request_id VARCHAR(256) NOT NULL DEFAULT (UUID()),
    request    JSON NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + t.Failed() + ` (
    id         BIGINT NOT NULL PRIMARY KEY,
    request_id VARCHAR(256) NOT NULL,
    request    JSON NOT NULL,
    created_at TIMESTAMP(6) NOT NULL,
    failed_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    error      TEXT NOT NULL
) ENGINE=InnoDB`,
	}
}

// Migrate creates the outbox's tables in db if they are missing (one
// transaction on PostgreSQL; MySQL commits each statement), and checks
// them.
func Migrate(ctx context.Context, db *sql.DB, t Table) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outbox: migrating %s: %w", t.Name, err)
	}
	defer tx.Rollback()
	for _, stmt := range t.DDL() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("outbox: migrating %s: %s: %w", t.Name, firstLine(stmt), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outbox: migrating %s: %w", t.Name, err)
	}
	return Check(ctx, db, t)
}

// Check says whether the outbox's tables exist with the columns the relay
// reads and writes, and what to do if not.
func Check(ctx context.Context, db *sql.DB, t Table) error {
	for _, q := range []struct{ table, cols string }{
		{t.Name, "id, request_id, request, created_at"},
		{t.Failed(), "id, request_id, request, created_at, failed_at, error"},
	} {
		rows, err := db.QueryContext(ctx, "SELECT "+q.cols+" FROM "+q.table+" WHERE 1 = 0")
		if err != nil {
			return fmt.Errorf("outbox: the table %s (columns %s) is not there or not readable: %w; create it with tenure outbox migrate (docs/guides/outbox.md)", q.table, q.cols, err)
		}
		rows.Close()
	}
	return nil
}

// firstLine is the first line of a statement, for an error.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return strings.TrimSuffix(first, " (")
}
