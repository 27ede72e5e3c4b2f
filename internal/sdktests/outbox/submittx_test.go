// Package outbox_test tests the SDK's outbox writers (packages outbox and
// outboxpgx) against real PostgreSQL and MySQL databases.
package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
	"github.com/tenurehq/tenure/sdk/outboxpgx"
)

type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

func (sendEmail) SubmitOptions() client.SubmitOptions {
	return client.SubmitOptions{Queue: "emails", Retry: &client.RetryPolicy{MaxAttempts: 5}}
}

// row is one row of the outbox table.
type row struct {
	id        int64
	requestID string
	request   *tenurev1.SubmitRequest
}

// rows reads the outbox table in id order.
func rows(t *testing.T, db *sql.DB, table string) []row {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), "SELECT id, request_id, request FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var js []byte
		if err := rs.Scan(&r.id, &r.requestID, &js); err != nil {
			t.Fatal(err)
		}
		r.request = new(tenurev1.SubmitRequest)
		if err := protojson.Unmarshal(js, r.request); err != nil {
			t.Fatalf("row %d: the request %s does not decode: %v", r.id, js, err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// orders is the application's own table in the tests.
const orders = "CREATE TABLE orders (id BIGINT PRIMARY KEY, email VARCHAR(200) NOT NULL)"

// submitter writes an order and submits its email in one transaction:
// the application's code, through database/sql or pgx.
type submitter func(ctx context.Context, order int64, commit bool) ([]string, error)

// TestSubmitTx: on real databases, an application's transaction that
// writes an order and submits a typed task (SubmitTx through
// database/sql on PostgreSQL and MySQL, and through pgx) leaves a row
// holding the task's request (typed arguments, the type's defaults, the
// trace context of the span of the transaction) and its request id once
// it commits, and neither the order nor the row when it rolls back; a
// request refused by SubmitTx leaves the transaction as it was.
func TestSubmitTx(t *testing.T) {
	for _, db := range outboxtest.Databases {
		kinds := []string{"database/sql"}
		if db == sdkoutbox.PostgreSQL {
			kinds = append(kinds, "pgx")
		}
		for _, how := range kinds {
			t.Run(db.String()+" "+how, func(t *testing.T) {
				t.Parallel()
				dsn, pool, table := outboxtest.Migrated(t, db)
				ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled}))
				if _, err := pool.ExecContext(ctx, orders); err != nil {
					t.Fatal(err)
				}
				var submit submitter
				if how == "pgx" {
					submit = pgxSubmitter(t, dsn)
				} else {
					submit = sqlSubmitter(t, db, pool)
				}
				var committed []string
				for order := int64(1); order <= 6; order++ {
					ids, err := submit(ctx, order, order%2 == 0)
					if err != nil {
						t.Fatal(err)
					}
					if order%2 == 0 {
						committed = append(committed, ids...)
					}
				}
				got := rows(t, pool, table.Name)
				var ids []string
				for i, r := range got {
					ids = append(ids, r.requestID)
					m := r.request
					order := int64(2 * (i + 1))
					if m.Queue != "emails" || m.Kind != "send_email" || string(m.Payload) != fmt.Sprintf(`{"to":"order%d@example.com"}`, order) ||
						m.RetryPolicy.GetMaxAttempts() != 5 || m.TraceContext.GetTraceparent() != "00-09000000000000000000000000000000-0800000000000000-01" || m.RequestId != "" {
						t.Errorf("row %d: %v; want order %d's email with its type's defaults and the trace context", r.id, m, order)
					}
				}
				if !slices.Equal(ids, committed) {
					t.Errorf("the outbox holds the request ids %v; want those of the committed transactions, %v", ids, committed)
				}
				var n int
				if err := pool.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n); err != nil || n != 3 {
					t.Errorf("%d orders, %v; want the 3 committed", n, err)
				}
			})
		}
	}
}

// sqlSubmitter is the application's code on database/sql.
func sqlSubmitter(t *testing.T, db sdkoutbox.Database, pool *sql.DB) submitter {
	ob, err := sdkoutbox.New(sdkoutbox.Options{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO orders (id, email) VALUES ($1, $2)"
	if db == sdkoutbox.MySQL {
		insert = "INSERT INTO orders (id, email) VALUES (?, ?)"
	}
	return func(ctx context.Context, order int64, commit bool) ([]string, error) {
		tx, err := pool.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback()
		email := fmt.Sprintf("order%d@example.com", order)
		if _, err := tx.ExecContext(ctx, insert, order, email); err != nil {
			return nil, err
		}
		if _, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Payload: []byte("x")}); !errors.Is(err, client.ErrInvalidArgument) {
			return nil, fmt.Errorf("a request without a queue: %v; want invalid argument", err)
		}
		ids, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Args: sendEmail{To: email}})
		if err != nil {
			return nil, err
		}
		if commit {
			return ids, tx.Commit()
		}
		return ids, tx.Rollback()
	}
}

// pgxSubmitter is the application's code on pgx.
func pgxSubmitter(t *testing.T, dsn string) submitter {
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	ob, err := outboxpgx.New(sdkoutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, order int64, commit bool) ([]string, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		email := fmt.Sprintf("order%d@example.com", order)
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, email) VALUES ($1, $2)", order, email); err != nil {
			return nil, err
		}
		ids, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Args: sendEmail{To: email}})
		if err != nil {
			return nil, err
		}
		if commit {
			return ids, tx.Commit(ctx)
		}
		return ids, tx.Rollback(ctx)
	}
}
