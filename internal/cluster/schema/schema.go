package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/cluster"
)

//go:embed migrations/*.sql
var files embed.FS

const maxStatements = 200 // per migration file

// ErrTooNew is returned when the database has a migration this binary does
// not know: it was migrated by a newer tenure.
var ErrTooNew = errors.New("schema: the database schema is newer than this binary")

// ErrNotMigrated is returned by Check when migrations are missing.
var ErrNotMigrated = errors.New("schema: the database schema is not up to date")

// Migration is one embedded migration file.
type Migration struct {
	Version    int
	Name       string // file name, e.g. "0001_init.sql"
	statements []string
}

// Migrations returns the embedded migrations in version order. It panics if
// a file is malformed: that is a bug caught by the package's tests.
func Migrations() []Migration {
	ms, err := load(files)
	if err != nil {
		panic(err)
	}
	return ms
}

// Latest is the version this binary's schema is at.
func Latest() int {
	ms := Migrations()
	return ms[len(ms)-1].Version
}

func load(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || len(num) != 4 {
			return nil, fmt.Errorf("schema: migration file %s is not named NNNN_name.sql", base)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		stmts := split(string(body))
		if len(stmts) == 0 || len(stmts) > maxStatements {
			return nil, fmt.Errorf("schema: migration %s has %d statements, want 1..%d", base, len(stmts), maxStatements)
		}
		ms = append(ms, Migration{Version: v, Name: base, statements: stmts})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("schema: migration versions must be 1, 2, 3, ... without gaps; %s is number %d", m.Name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("schema: no migrations embedded")
	}
	return ms, nil
}

// split cuts a migration into statements: each ends with a semicolon at the
// end of a line. Lines that are only a "--" comment are dropped.
func split(body string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(body) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s) // a last statement without its semicolon
	}
	return out
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT UNSIGNED NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// recordSQL records a migration as applied. Running it again changes
// nothing: two migrators that both ran a migration (one whose lease ran out
// while it worked) both record it without an error.
const recordSQL = "INSERT INTO schema_migrations (version, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = version"

// Migrate brings the database named by db's DSN up to Latest and returns
// the versions it applied (none when it was up to date). It holds the
// migration lock (lock.go) throughout, so concurrent callers take turns,
// whichever server of a replicated database each of them reaches.
func Migrate(ctx context.Context, db *sql.DB) (applied []int, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("schema: connecting: %w", err)
	}
	defer conn.Close()

	var dbName sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if !dbName.Valid || dbName.String == "" {
		return nil, errors.New("schema: the mysql dsn names no database (want user@tcp(host:port)/dbname)")
	}

	lock, err := lockMigrations(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := lock.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()

	// TIMESTAMP columns without a default must not grow an implicit ON
	// UPDATE clause (helix_locks.expires_at). On by default in current
	// servers; setting it may need a privilege, and Check verifies the
	// outcome, so an error here is not fatal.
	_, _ = conn.ExecContext(ctx, "SET SESSION explicit_defaults_for_timestamp = 1")

	if _, err := conn.ExecContext(ctx, createMigrationsTable); err != nil {
		return nil, fmt.Errorf("schema: creating schema_migrations: %w", err)
	}
	done, err := appliedVersions(ctx, conn)
	if err != nil {
		return nil, err
	}
	ms := Migrations()
	if err := tooNew(done, ms); err != nil {
		return nil, err
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if err := lock.renew(ctx); err != nil {
			return applied, err
		}
		for i, s := range m.statements {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				return applied, fmt.Errorf("schema: migration %s, statement %d: %w", m.Name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, recordSQL, m.Version, m.Name); err != nil {
			return applied, fmt.Errorf("schema: recording migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := checkColumns(ctx, conn); err != nil {
		return applied, err
	}
	return applied, nil
}

// Check returns nil if the database is at exactly this binary's version,
// ErrNotMigrated if migrations are missing and ErrTooNew if it is ahead.
// A node started with automatic migration disabled calls it.
func Check(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("schema: connecting: %w", err)
	}
	defer conn.Close()
	done, err := appliedVersions(ctx, conn)
	if err != nil {
		return fmt.Errorf("%w (run `tenure migrate`): %v", ErrNotMigrated, err)
	}
	ms := Migrations()
	if err := tooNew(done, ms); err != nil {
		return err
	}
	var missing []string
	for _, m := range ms {
		if !done[m.Version] {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s (run `tenure migrate`)", ErrNotMigrated, strings.Join(missing, ", "))
	}
	return checkColumns(ctx, conn)
}

// Version returns the highest applied migration version (0 for none).
func Version(ctx context.Context, db *sql.DB) (int, error) {
	var v sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("schema: reading the version: %w", err)
	}
	return int(v.Int64), nil
}

func appliedVersions(ctx context.Context, conn *sql.Conn) (map[int]bool, error) {
	vs, err := cluster.Column[int](ctx, conn, "schema: reading schema_migrations", "SELECT version FROM schema_migrations ORDER BY version LIMIT 10000")
	if err != nil {
		return nil, err
	}
	done := make(map[int]bool)
	for _, v := range vs {
		done[v] = true
	}
	return done, nil
}

func tooNew(done map[int]bool, ms []Migration) error {
	latest := ms[len(ms)-1].Version
	for v := range done {
		if v > latest {
			return fmt.Errorf("%w: it has migration %d, this binary knows up to %d; upgrade tenure", ErrTooNew, v, latest)
		}
	}
	return nil
}

// checkColumns verifies what the DDL alone cannot promise on every server:
// helix_locks.expires_at must not update itself (a server with
// explicit_defaults_for_timestamp off gives the first TIMESTAMP column an
// implicit ON UPDATE CURRENT_TIMESTAMP, which would move lock expiries).
func checkColumns(ctx context.Context, conn *sql.Conn) error {
	var extra string
	err := conn.QueryRowContext(ctx, `SELECT EXTRA FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'helix_locks' AND COLUMN_NAME = 'expires_at'`).Scan(&extra)
	if err != nil {
		return fmt.Errorf("schema: checking helix_locks.expires_at: %w", err)
	}
	if strings.Contains(strings.ToLower(extra), "on update") {
		return fmt.Errorf("schema: helix_locks.expires_at has %q; it was created with explicit_defaults_for_timestamp off; turn that setting on and run ALTER TABLE helix_locks MODIFY expires_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP", extra)
	}
	return nil
}
