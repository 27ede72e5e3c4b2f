package schema_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/schema"
)

func TestMigrationsEmbedded(t *testing.T) {
	ms := schema.Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "0001_init.sql" {
		t.Fatalf("migrations = %+v", ms)
	}
	if schema.Latest() != ms[len(ms)-1].Version {
		t.Fatalf("Latest = %d", schema.Latest())
	}
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	dsn := clustertest.NewDatabase(t)
	db := clustertest.Open(t, dsn)
	ctx := context.Background()

	if err := schema.Check(ctx, db); !errors.Is(err, schema.ErrNotMigrated) {
		t.Fatalf("Check before Migrate = %v, want ErrNotMigrated", err)
	}
	applied, err := schema.Migrate(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1}; !slices.Equal(applied[:1], want) || len(applied) != schema.Latest() {
		t.Fatalf("first Migrate applied %v, want 1..%d", applied, schema.Latest())
	}
	again, err := schema.Migrate(ctx, db)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing applied", again, err)
	}
	if err := schema.Check(ctx, db); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}
	if v, err := schema.Version(ctx, db); err != nil || v != schema.Latest() {
		t.Fatalf("Version = %d, %v", v, err)
	}

	// A database migrated by a newer binary is refused, by Migrate and Check.
	if _, err := db.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, db); !errors.Is(err, schema.ErrTooNew) {
		t.Fatalf("Migrate on a newer schema = %v, want ErrTooNew", err)
	}
	if err := schema.Check(ctx, db); !errors.Is(err, schema.ErrTooNew) {
		t.Fatalf("Check on a newer schema = %v, want ErrTooNew", err)
	}
}

// Nodes that start together migrate together: they take turns on the
// lock and each migration is applied exactly once.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	dsn := clustertest.NewDatabase(t)
	const nodes = 6
	var wg sync.WaitGroup
	results := make([][]int, nodes)
	errs := make([]error, nodes)
	for i := range nodes {
		db := clustertest.Open(t, dsn)
		wg.Go(func() { results[i], errs[i] = schema.Migrate(context.Background(), db) })
	}
	wg.Wait()
	total := 0
	for i := range nodes {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		total += len(results[i])
	}
	if total != schema.Latest() {
		t.Fatalf("migrations applied %d times in all (%v), want %d", total, results, schema.Latest())
	}
	db := clustertest.Open(t, dsn)
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != schema.Latest() {
		t.Fatalf("schema_migrations has %d rows (%v)", n, err)
	}
}

// helix_locks is exactly the seed's table: same columns, types, nullability,
// defaults and keys.
func TestHelixLocksMatchesSeed(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	rows, err := db.Query(`SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COALESCE(COLUMN_DEFAULT, 'NULL'), EXTRA
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'helix_locks'
		ORDER BY ORDINAL_POSITION`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, typ, null, def, extra string
		if err := rows.Scan(&name, &typ, &null, &def, &extra); err != nil {
			t.Fatal(err)
		}
		// MySQL and MariaDB spell defaults differently; normalise.
		def = strings.ToLower(strings.Trim(def, "'"))
		def = strings.TrimSuffix(def, "()")
		extra = strings.ToLower(strings.ReplaceAll(extra, "()", ""))
		extra = strings.TrimSpace(strings.ReplaceAll(extra, "default_generated", ""))
		got = append(got, strings.Join([]string{name, typ, null, def, extra}, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"id | bigint(20) unsigned | NO | null | auto_increment",
		"lock_key | varchar(255) | NO | null | ",
		"owner_id | varchar(255) | NO | null | ",
		"expires_at | timestamp | NO | null | ",
		"epoch | bigint(20) | NO | 0 | ",
		"status | tinyint(4) | NO | 1 | ",
		"created_at | datetime | NO | current_timestamp | ",
		"updated_at | datetime | NO | current_timestamp | on update current_timestamp",
	}
	// MySQL 8 drops display widths.
	for i := range got {
		for _, w := range []string{"(20)", "(4)"} {
			if !strings.Contains(want[i], w) {
				continue
			}
			if !strings.Contains(got[i], w) {
				want[i] = strings.Replace(want[i], w, "", 1)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("helix_locks columns:\n got %q\nwant %q", got, want)
	}

	keys, err := db.Query(`SELECT INDEX_NAME, NON_UNIQUE, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX)
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'helix_locks'
		GROUP BY INDEX_NAME, NON_UNIQUE ORDER BY INDEX_NAME`)
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	var gotKeys []string
	for keys.Next() {
		var name, cols string
		var nonUnique int
		if err := keys.Scan(&name, &nonUnique, &cols); err != nil {
			t.Fatal(err)
		}
		gotKeys = append(gotKeys, name+" unique="+map[int]string{0: "yes", 1: "no"}[nonUnique]+" ("+cols+")")
	}
	wantKeys := []string{
		"PRIMARY unique=yes (id)",
		"lock_key_ids unique=no (lock_key)",
		"lock_key_status_unique_key unique=yes (lock_key,status)",
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Fatalf("helix_locks keys:\n got %q\nwant %q", gotKeys, wantKeys)
	}
}

func TestMigrateWithoutDatabase(t *testing.T) {
	t.Parallel()
	clustertest.NewDatabase(t) // skips when no server answers
	db := clustertest.Open(t, clustertest.ServerDSN())
	if _, err := schema.Migrate(context.Background(), db); err == nil || !strings.Contains(err.Error(), "names no database") {
		t.Fatalf("Migrate without a database = %v", err)
	}
}

func TestSplit(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("-- c\nCREATE TABLE a (x INT, -- note\n  y INT);\n\nCREATE TABLE b (x INT);\n")},
		"migrations/0002_b.sql": {Data: []byte("DROP TABLE a;")},
	}
	ms, err := schema.LoadForTest(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || len(ms[0].Statements()) != 2 || ms[0].Statements()[0] != "CREATE TABLE a (x INT, -- note\n  y INT)" {
		t.Fatalf("%+v", ms)
	}
	bad := fstest.MapFS{"migrations/0001_a.sql": {Data: []byte("X;")}, "migrations/0003_c.sql": {Data: []byte("X;")}}
	if _, err := schema.LoadForTest(bad); err == nil {
		t.Fatal("a gap in versions was accepted")
	}
}

// Every statement of every migration can run again on a migrated
// database: a migration cut short is re-run from its first statement.
func TestMigrationsRerunnable(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION explicit_defaults_for_timestamp = 1"); err != nil {
		t.Fatal(err)
	}
	for _, m := range schema.Migrations() {
		for i, s := range m.Statements() {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s, statement %d, run again: %v", m.Name, i+1, err)
			}
		}
	}
	if err := schema.Check(ctx, db); err != nil {
		t.Fatal(err)
	}
}

// A database at version 1 (a cluster of an earlier tenure) gets the later
// migrations only, and keeps its rows.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	dsn := clustertest.NewDatabase(t)
	db := clustertest.Open(t, dsn)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range []string{
		"SET SESSION explicit_defaults_for_timestamp = 1",
		`CREATE TABLE schema_migrations (version INT UNSIGNED NOT NULL, name VARCHAR(255) NOT NULL,
			applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (version))`,
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	v1 := schema.Migrations()[0]
	for _, s := range v1.Statements() {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{
		"INSERT INTO schema_migrations (version, name) VALUES (1, '" + v1.Name + "')",
		"INSERT INTO partition_log (partition_id, lsn, type, payload) VALUES (7, 1, 1, 'x')",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := schema.Check(ctx, db); !errors.Is(err, schema.ErrNotMigrated) || !strings.Contains(err.Error(), "0002_partition_snapshots.sql") {
		t.Fatalf("Check at version 1 = %v, want ErrNotMigrated naming 0002", err)
	}
	applied, err := schema.Migrate(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2}; !slices.Equal(applied[:1], want) || len(applied) != schema.Latest()-1 {
		t.Fatalf("Migrate from version 1 applied %v, want 2..%d", applied, schema.Latest())
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM partition_log").Scan(&n); err != nil || n != 1 {
		t.Fatalf("partition_log has %d rows after the upgrade (%v)", n, err)
	}
}

// The snapshot tables of 0002: their keys are what package mysqllog's
// queries and fencing rely on.
func TestSnapshotTables(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	rows, err := db.Query(`SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX)
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME IN ('partition_snapshots', 'partition_snapshot_chunks', 'partition_log_start')
		GROUP BY TABLE_NAME, INDEX_NAME, NON_UNIQUE`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var table, index, cols string
		var nonUnique int
		if err := rows.Scan(&table, &index, &nonUnique, &cols); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s.%s unique=%v (%s)", table, index, nonUnique == 0, cols))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"partition_log_start.PRIMARY unique=true (partition_id)",
		"partition_snapshot_chunks.PRIMARY unique=true (partition_id,lsn,chunk)",
		"partition_snapshots.PRIMARY unique=true (partition_id,lsn)",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("keys:\n got %q\nwant %q", got, want)
	}
	var extra string
	if err := db.QueryRow(`SELECT EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'partition_snapshots' AND COLUMN_NAME = 'created_at'`).Scan(&extra); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(extra), "on update") {
		t.Fatalf("partition_snapshots.created_at has %q", extra)
	}
}

// The migration lock is a row: Migrate waits while another owner's lease
// is live, takes the lock once it has run out, and frees it when done.
func TestMigrationLockRow(t *testing.T) {
	t.Parallel()
	dsn := clustertest.NewDatabase(t)
	db := clustertest.Open(t, dsn)
	ctx := context.Background()
	for _, s := range []string{
		"CREATE TABLE schema_migration_lock (id TINYINT UNSIGNED NOT NULL, owner VARCHAR(64) NOT NULL, expires_at DATETIME(6) NOT NULL, PRIMARY KEY (id))",
		"INSERT INTO schema_migration_lock VALUES (1, 'another', TIMESTAMPADD(HOUR, 1, NOW(6)))",
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := schema.Migrate(short, db); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "migration lock") {
		t.Fatalf("Migrate while another owner holds the lock = %v, want it to wait until its context ends", err)
	}
	if err := schema.Check(ctx, db); !errors.Is(err, schema.ErrNotMigrated) {
		t.Fatalf("Check after a Migrate that never got the lock = %v, want ErrNotMigrated", err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE schema_migration_lock SET expires_at = TIMESTAMPADD(SECOND, -1, NOW(6))"); err != nil {
		t.Fatal(err)
	}
	if applied, err := schema.Migrate(ctx, db); err != nil || len(applied) != schema.Latest() {
		t.Fatalf("Migrate after the other owner's lease ran out = %v, %v", applied, err)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migration_lock").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the lock row is still there after Migrate (%d rows, %v)", rows, err)
	}
}

// Recording a migration twice is no error: two migrators that both ran it
// both succeed.
func TestRecordingIdempotent(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	m := schema.Migrations()[0]
	for range 2 {
		if _, err := db.Exec(schema.RecordSQL, m.Version, m.Name); err != nil {
			t.Fatalf("recording %s again: %v", m.Name, err)
		}
	}
	if err := schema.Check(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}
