// Package outboxpgx submits tasks inside a pgx transaction of the
// application's PostgreSQL database: package outbox (github.com/tenurehq/tenure/sdk/outbox)
// for pgx. It is a module of its own, so that the SDK's module does not
// depend on pgx.
//
//	ob, err := outboxpgx.New(outbox.Options{})
//	...
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, email) VALUES ($1, $2)", id, email); err != nil {
//			return err
//		}
//		_, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Args: SendEmail{To: email}})
//		return err
//	})
package outboxpgx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/outbox"
)

// Outbox writes submits into an outbox table through pgx.
type Outbox struct{ o *outbox.Outbox }

// New returns the Outbox of opts; opts.Database is PostgreSQL whatever it
// says.
func New(opts outbox.Options) (*Outbox, error) {
	opts.Database = outbox.PostgreSQL
	o, err := outbox.New(opts)
	if err != nil {
		return nil, err
	}
	return &Outbox{o: o}, nil
}

// Tx runs a statement in a transaction: a pgx.Tx (of a pgx.Conn or a
// pgxpool.Pool).
type Tx interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// SubmitTx writes reqs into the outbox in the transaction tx, and returns
// each one's request id, as outbox.Outbox.SubmitTx does.
func (o *Outbox) SubmitTx(ctx context.Context, tx Tx, reqs ...client.SubmitRequest) ([]string, error) {
	stmts, ids, err := o.o.Statements(ctx, reqs...)
	if err != nil {
		return nil, err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s.SQL, s.Args...); err != nil {
			return nil, fmt.Errorf("outboxpgx: SubmitTx: writing %d rows into %s: %w", len(s.Args)/2, o.o.Table(), err)
		}
	}
	return ids, nil
}
