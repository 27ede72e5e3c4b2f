package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/outbox"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// outboxDB is the flags that name an outbox: its database and table.
type outboxDB struct {
	postgres, mysql string
	table           string
}

func (o *outboxDB) define(fs *pflag.FlagSet) {
	fs.StringVar(&o.postgres, "postgres", "", "the application's PostgreSQL database: a URL postgres://user:password@host:5432/dbname or key=value DSN")
	fs.StringVar(&o.mysql, "mysql", "", "the application's MySQL or MariaDB database, as a go-sql-driver DSN: user:password@tcp(host:3306)/dbname")
	fs.StringVar(&o.table, "table", sdkoutbox.DefaultTable, "the outbox table (optionally schema.table); failed rows go to TABLE_failed")
}

// resolve is the database and DSN given, and the table, or a usage error.
func (o *outboxDB) resolve() (sdkoutbox.Database, string, outbox.Table, error) {
	var db sdkoutbox.Database
	var dsn string
	switch {
	case o.postgres != "" && o.mysql != "":
		return 0, "", outbox.Table{}, usageError{"give one of --postgres and --mysql, not both"}
	case o.postgres != "":
		db, dsn = sdkoutbox.PostgreSQL, o.postgres
	case o.mysql != "":
		db, dsn = sdkoutbox.MySQL, o.mysql
	default:
		return 0, "", outbox.Table{}, usageError{"name the application's database: --postgres DSN or --mysql DSN"}
	}
	t, err := outbox.NewTable(db, o.table)
	if err != nil {
		return 0, "", outbox.Table{}, usageError{"--table: " + err.Error()}
	}
	return db, dsn, t, nil
}

// outboxMigrateCmd is `tenure outbox migrate`.
type outboxMigrateCmd struct {
	db    outboxDB
	print string
}

func (*outboxMigrateCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "migrate --postgres DSN | --mysql DSN [flags]",
		Short: "create the outbox tables in an application's database",
		Long: `Create the transactional outbox's tables in the application's database, if they
are missing: TABLE (tenure_outbox), which the application writes a row into
per submit inside its own transactions (package outbox of the Go SDK), and
TABLE_failed, where the relay moves a row the server refuses, with the
reason. On PostgreSQL also a trigger that wakes the relay (NOTIFY) when rows
are committed. Running it again changes nothing.

With --print postgres or --print mysql, print the SQL instead (for teams
that run their own migrations); it connects to no database.`}
}

func (*outboxMigrateCmd) choices() map[string][]string {
	return map[string][]string{"print": {"postgres", "mysql"}}
}

func (c *outboxMigrateCmd) define(fs *pflag.FlagSet) {
	c.db.define(fs)
	fs.StringVar(&c.print, "print", "", "print the SQL for this database, postgres or mysql, instead of running it")
}

func (c *outboxMigrateCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if c.print != "" {
		kind, ok := map[string]sdkoutbox.Database{"postgres": sdkoutbox.PostgreSQL, "mysql": sdkoutbox.MySQL}[c.print]
		if !ok || c.db.postgres != "" || c.db.mysql != "" {
			return usageError{fmt.Sprintf("--print %q: give --print postgres or --print mysql, without --postgres or --mysql", c.print)}
		}
		t, err := outbox.NewTable(kind, c.db.table)
		if err != nil {
			return usageError{"--table: " + err.Error()}
		}
		for _, stmt := range t.DDL() {
			fmt.Fprintf(a.stdout, "%s;\n\n", stmt)
		}
		return nil
	}
	kind, dsn, t, err := c.db.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := outbox.Open(ctx, kind, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := outbox.Migrate(ctx, db, t); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "the outbox tables %s and %s are in place (%v)\n", t.Name, t.Failed(), kind)
	return nil
}
