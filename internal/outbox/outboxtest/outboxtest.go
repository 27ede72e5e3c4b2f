// Package outboxtest gives tests of the transactional outbox a database
// of their own on the test servers: PostgreSQL at TENURE_TEST_POSTGRES_DSN
// (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
// and MySQL at TENURE_TEST_MYSQL_DSN (package clustertest's). Without a
// server a test is skipped, unless CI is set: then it fails.
package outboxtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/testenv"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// DefaultPostgresDSN is the PostgreSQL server tests use when
// TENURE_TEST_POSTGRES_DSN is unset.
const DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Databases are the databases an outbox may be in, for tests to run on
// each.
var Databases = []sdkoutbox.Database{sdkoutbox.PostgreSQL, sdkoutbox.MySQL}

// NewDatabase creates an empty database of its own for t on the test
// server of db and returns its DSN; it is dropped when t ends.
func NewDatabase(t testing.TB, db sdkoutbox.Database) string {
	t.Helper()
	if db == sdkoutbox.MySQL {
		return clustertest.NewDatabase(t)
	}
	server := os.Getenv("TENURE_TEST_POSTGRES_DSN")
	if server == "" {
		server = DefaultPostgresDSN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := outbox.Open(ctx, sdkoutbox.PostgreSQL, server)
	if err != nil {
		testenv.SkipOrFail(t, fmt.Sprintf("outboxtest: no PostgreSQL answers (set TENURE_TEST_POSTGRES_DSN): %v", err))
	}
	name := testenv.NewDatabase(t, admin, "tenure_test_", " WITH (FORCE)")
	dsn, err := withDatabase(server, name)
	if err != nil {
		t.Fatalf("outboxtest: TENURE_TEST_POSTGRES_DSN: %v", err)
	}
	return dsn
}

// withDatabase is the PostgreSQL DSN dsn (a URL, or key=value pairs)
// naming database name instead of its own.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil // the last of a key's pairs wins
}

// Migrated is NewDatabase with the default outbox table created in it,
// and a pool on it, closed when t ends.
func Migrated(t testing.TB, db sdkoutbox.Database) (dsn string, pool *sql.DB, table outbox.Table) {
	t.Helper()
	dsn = NewDatabase(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := outbox.Open(ctx, db, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	table, err = outbox.NewTable(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Migrate(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	return dsn, pool, table
}

// Count is the number of rows of table.
func Count(t testing.TB, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
