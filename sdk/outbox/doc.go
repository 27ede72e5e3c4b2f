// Package outbox submits tasks inside the application's own database
// transaction (a transactional outbox): SubmitTx writes each submit as a
// row of the outbox table in the transaction that writes the
// application's data, and tenure's relay (tenure server --outbox-postgres
// or --outbox-mysql, or tenure outbox relay) submits every committed row
// once, exactly once, and deletes it. A transaction rolled back leaves no
// row and so no task; one committed always leads to its tasks.
//
// The table is created by `tenure outbox migrate --postgres DSN` or
// `--mysql DSN`, or by the SQL in docs/guides/outbox.md for teams that run
// their own migrations.
//
// SubmitTx takes a database/sql transaction (*sql.Tx) of PostgreSQL or
// MySQL (MariaDB), with any driver; for pgx transactions, package
// github.com/tenurehq/tenure/sdk/outboxpgx (a module of its own, so that
// this one does not depend on pgx). This package depends on no database
// driver.
//
//	ob, err := outbox.New(outbox.Options{Database: outbox.PostgreSQL})
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	_, err = tx.ExecContext(ctx, "INSERT INTO orders (id, email) VALUES ($1, $2)", id, email)
//	...
//	ids, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Args: SendEmail{To: email}})
//	...
//	err = tx.Commit() // the task exists once the relay has seen the row
//
// A row is the API's SubmitRequest (client.EncodeSubmit): the tasks are
// exactly what Submit would create, request id included, so that the
// application can find a task by the request id SubmitTx returns.
package outbox
