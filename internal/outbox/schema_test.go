package outbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// TestMigrate: on each database, Check refuses a database without the
// tables, saying to run tenure outbox migrate; Migrate creates them and
// running it again changes nothing (the rows stay); a row written by hand
// without a request id gets a random one; a request that is not JSON is
// refused by the database.
func TestMigrate(t *testing.T) {
	for _, db := range outboxtest.Databases {
		t.Run(db.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := outboxtest.NewDatabase(t, db)
			pool, err := outbox.Open(ctx, db, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			table, err := outbox.NewTable(db, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := outbox.Check(ctx, pool, table); err == nil || !strings.Contains(err.Error(), "tenure outbox migrate") {
				t.Errorf("Check before Migrate: %v; want an error saying to run tenure outbox migrate", err)
			}
			if err := outbox.Migrate(ctx, pool, table); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`INSERT INTO tenure_outbox (request) VALUES ('{"queue":"q"}')`,
				`INSERT INTO tenure_outbox (request) VALUES ('{"queue":"q"}')`,
			} {
				if _, err := pool.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			if err := outbox.Migrate(ctx, pool, table); err != nil {
				t.Fatalf("Migrate again: %v", err)
			}
			var n int
			var a, b string
			if err := pool.QueryRowContext(ctx, "SELECT COUNT(*), MIN(request_id), MAX(request_id) FROM tenure_outbox").Scan(&n, &a, &b); err != nil {
				t.Fatal(err)
			}
			if n != 2 || len(a) != 36 || a == b {
				t.Errorf("after Migrate again: %d rows, request ids %q and %q; want the 2 rows, with random ids (UUIDs)", n, a, b)
			}
			if _, err := pool.ExecContext(ctx, `INSERT INTO tenure_outbox (request) VALUES ('{"queue":')`); err == nil {
				t.Errorf("the database took a request that is not JSON")
			}
		})
	}
}

// TestNotify: on PostgreSQL a committed insert into the outbox notifies
// the relay's channel, once per statement, naming the table; a rolled
// back one does not.
func TestNotify(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, pool, _ := outboxtest.Migrated(t, sdkoutbox.PostgreSQL)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+outbox.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	insert := func(commit bool) {
		tx, err := pool.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tenure_outbox (request) VALUES ('{"queue":"q"}'), ('{"queue":"q"}')`); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	insert(false)
	insert(true)
	// A notification of our own marks the end: notifications come in the
	// order of the commits, so anything the rollback or a second row sent
	// would come before it.
	if _, err := pool.ExecContext(ctx, "SELECT pg_notify($1, 'end')", outbox.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []string
	for len(got) == 0 || got[len(got)-1] != "end" {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if n.Channel != outbox.NotifyChannel {
			t.Fatalf("a notification on %q", n.Channel)
		}
		got = append(got, n.Payload)
	}
	if !slices.Equal(got, []string{"tenure_outbox", "end"}) {
		t.Errorf("notifications %q; want one naming tenure_outbox for the committed statement of two rows, then ours", got)
	}
}
