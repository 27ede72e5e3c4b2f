package main

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// TestOutboxMigrate: tenure outbox migrate creates the outbox tables in a
// PostgreSQL and a MySQL database, and says so again when run again;
// --print prints the statements it runs, without a database; a missing
// or doubled database and a bad table name are usage errors.
func TestOutboxMigrate(t *testing.T) {
	for _, db := range outboxtest.Databases {
		t.Run(db.String(), func(t *testing.T) {
			t.Parallel()
			dsn := outboxtest.NewDatabase(t, db)
			name := map[sdkoutbox.Database]string{sdkoutbox.PostgreSQL: "postgres", sdkoutbox.MySQL: "mysql"}[db]
			for range 2 {
				out := mustCLI(t, "outbox", "migrate", "--"+name, dsn, "--table", "shop_outbox")
				if want := "the outbox tables shop_outbox and shop_outbox_failed are in place (" + db.String() + ")\n"; out != want {
					t.Errorf("tenure outbox migrate printed %q; want %q", out, want)
				}
			}
			pool, err := outbox.Open(t.Context(), db, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			table, _ := outbox.NewTable(db, "shop_outbox")
			if err := outbox.Check(t.Context(), pool, table); err != nil {
				t.Error(err)
			}
			printed := mustCLI(t, "outbox", "migrate", "--print", name, "--table", "shop_outbox")
			if want := strings.Join(table.DDL(), ";\n\n") + ";\n\n"; printed != want {
				t.Errorf("--print printed\n%s\nwant\n%s", printed, want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox", "migrate"}, "--postgres DSN or --mysql DSN"},
		{[]string{"outbox", "migrate", "--postgres", "a", "--mysql", "b"}, "not both"},
		{[]string{"outbox", "migrate", "--postgres", "a", "--table", "x;y"}, "--table"},
		{[]string{"outbox", "migrate", "--print", "oracle"}, "--print postgres or --print mysql"},
	} {
		usageRefused(t, tc.args, tc.want)
	}
}
