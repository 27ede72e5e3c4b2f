package clustertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/schema"
	"github.com/tenurehq/tenure/internal/testenv"
)

// DefaultDSN is the server tests use when TENURE_TEST_MYSQL_DSN is unset.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/"

// ServerDSN is the DSN of the test server, without a database.
func ServerDSN() string {
	if v := os.Getenv("TENURE_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return DefaultDSN
}

// NewDatabase creates an empty database of its own for t and returns its
// DSN; it is dropped when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server := ServerDSN()
	admin, err := cluster.OpenDB(server)
	if err != nil {
		t.Fatalf("clustertest: TENURE_TEST_MYSQL_DSN %q: %v", redact(server), err)
	}
	shown := redact(server)
	pingCtx, pingCancel := context.WithTimeout(ctx, 5*time.Second)
	err = admin.PingContext(pingCtx)
	pingCancel()
	if err != nil {
		admin.Close()
		testenv.SkipOrFail(t, fmt.Sprintf("clustertest: no MySQL answers at %q (set TENURE_TEST_MYSQL_DSN): %v", shown, err))
	}
	name := testenv.NewDatabase(t, admin, "tenure_test_", "")
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	cfg.DBName = name
	return cfg.FormatDSN()
}

// Open opens a new pool on dsn, closed when t ends. Each call is a separate
// pool, as a separate node would have.
func Open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := cluster.OpenDB(dsn)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// DB creates a migrated database for t and returns its DSN and a pool on
// it.
func DB(t testing.TB) (dsn string, db *sql.DB) {
	t.Helper()
	dsn = NewDatabase(t)
	db = Open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := schema.Migrate(ctx, db); err != nil {
		t.Fatalf("clustertest: migrating: %v", err)
	}
	return dsn, db
}

// redact hides the password of a DSN for messages.
func redact(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparsable dsn)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "xxx"
	}
	return cfg.FormatDSN()
}

// Eventually polls cond until it holds. Its deadline (a minute) only ends a
// hung test: nothing asserts how fast a cluster converges.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := clock.Real.Now().Add(time.Minute)
	for !cond() {
		if clock.Real.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		clock.Sleep(context.Background(), clock.Real, 20*time.Millisecond)
	}
}
