package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tenurehq/tenure/sdk/client"
)

// Database is the SQL dialect of an outbox's database.
type Database int

const (
	// PostgreSQL (13 and later).
	PostgreSQL Database = iota + 1
	// MySQL (8.0.13 and later) and MariaDB (10.6 and later).
	MySQL
)

// String is the database's name.
func (d Database) String() string {
	switch d {
	case PostgreSQL:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	}
	return fmt.Sprintf("Database(%d)", int(d))
}

// DefaultTable is the outbox table's name unless Options.Table names
// another: the table tenure outbox migrate creates.
const DefaultTable = "tenure_outbox"

// maxRowsPerStatement bounds the rows of one INSERT (PostgreSQL takes at
// most 65,535 parameters in a statement).
const maxRowsPerStatement = 1000

// Options configure an Outbox.
type Options struct {
	// Database is the dialect of the transactions SubmitTx writes in:
	// PostgreSQL or MySQL. Required.
	Database Database
	// Table is the outbox table, optionally qualified by its schema
	// ("app.tenure_outbox"); "" is DefaultTable. Letters, digits and _
	// only.
	Table string
	// Codec encodes typed tasks (client.SubmitRequest.Args); nil is
	// client.JSON. Use the codec of the client whose workers decode them.
	Codec client.Codec
}

// Outbox writes submits into an outbox table. It holds no connection and
// is safe for concurrent use.
type Outbox struct {
	db     Database
	table  string
	codec  client.Codec
	insert string // the statement's text up to VALUES
}

// tableName is a table name, optionally qualified by its schema.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// New returns the Outbox of opts.
func New(opts Options) (*Outbox, error) {
	if opts.Database != PostgreSQL && opts.Database != MySQL {
		return nil, fmt.Errorf("outbox: Options.Database is %v: set outbox.PostgreSQL or outbox.MySQL", opts.Database)
	}
	table := opts.Table
	if table == "" {
		table = DefaultTable
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("outbox: Options.Table %q is not a table name: use letters, digits and _, optionally after a schema and a dot", opts.Table)
	}
	codec := opts.Codec
	if codec == nil {
		codec = client.JSON
	}
	return &Outbox{db: opts.Database, table: table, codec: codec,
		insert: "INSERT INTO " + table + " (request_id, request) VALUES "}, nil
}

// Database is the dialect of the outbox's database.
func (o *Outbox) Database() Database { return o.db }

// Table is the outbox table's name.
func (o *Outbox) Table() string { return o.table }

// Execer runs a statement in a transaction: a *sql.Tx, or a *sql.Conn
// inside a transaction begun on it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SubmitTx writes reqs into the outbox in the transaction tx, and returns
// each one's request id (its own, or the random one it got), in order.
// Once tx commits, the relay submits them, exactly once, with those
// request ids; if tx rolls back, nothing was submitted. reqs are checked
// as Submit checks them locally (a typed task's kind, arguments and
// queue): an invalid one is refused with client.ErrInvalidArgument and
// nothing is written. What only the server checks (limits, a request id
// used before for another payload) is checked when the row is relayed: a
// row the server refuses is moved to the table of failed rows with the
// reason (docs/guides/outbox.md).
func (o *Outbox) SubmitTx(ctx context.Context, tx Execer, reqs ...client.SubmitRequest) ([]string, error) {
	stmts, ids, err := o.Statements(ctx, reqs...)
	if err != nil {
		return nil, err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.SQL, s.Args...); err != nil {
			return nil, fmt.Errorf("outbox: SubmitTx: writing %d rows into %s: %w", len(s.Args)/2, o.table, err)
		}
	}
	return ids, nil
}

// Statement is one INSERT of submits into the outbox table.
type Statement struct {
	SQL  string
	Args []any
}

// Statements returns the INSERT statements SubmitTx runs for reqs (one
// per 1000 requests), and each request's id, for a driver that is not
// database/sql: package outboxpgx runs them on a pgx transaction.
func (o *Outbox) Statements(ctx context.Context, reqs ...client.SubmitRequest) ([]Statement, []string, error) {
	if len(reqs) == 0 {
		return nil, nil, errors.New("outbox: SubmitTx: no requests: give at least one")
	}
	ids := make([]string, len(reqs))
	var stmts []Statement
	var b strings.Builder
	for lo := 0; lo < len(reqs); lo += maxRowsPerStatement {
		hi := min(lo+maxRowsPerStatement, len(reqs))
		b.Reset()
		b.WriteString(o.insert)
		args := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			enc, err := client.EncodeSubmit(ctx, reqs[i], o.codec)
			if err != nil {
				return nil, nil, fmt.Errorf("outbox: SubmitTx: reqs[%d]: %w", i, err)
			}
			ids[i] = enc.RequestID
			if i > lo {
				b.WriteByte(',')
			}
			if o.db == PostgreSQL {
				fmt.Fprintf(&b, "($%d,$%d)", len(args)+1, len(args)+2)
			} else {
				b.WriteString("(?,?)")
			}
			args = append(args, enc.RequestID, string(enc.JSON))
		}
		stmts = append(stmts, Statement{SQL: b.String(), Args: args})
	}
	return stmts, ids, nil
}
