package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// relayEnv is an outbox on a test database, a real node, and a relay
// between them.
type relayEnv struct {
	db    sdkoutbox.Database
	dsn   string
	pool  *sql.DB
	table outbox.Table
	c     *client.Client
	api   tenurev1connect.OutboxServiceClient
}

func newRelayEnv(t *testing.T, db sdkoutbox.Database) *relayEnv {
	t.Helper()
	dsn, pool, table := outboxtest.Migrated(t, db)
	url := apitest.Start(t, nil)
	c, err := client.New(url, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &relayEnv{db: db, dsn: dsn, pool: pool, table: table, c: c,
		api: tenurev1connect.NewOutboxServiceClient(client.DefaultHTTPClient(client.ProtocolConnect), url)}
}

// relay is a relay of the outbox into target (the node's API if nil).
func (e *relayEnv) relay(t *testing.T, target tenurev1connect.OutboxServiceClient) *outbox.Relay {
	t.Helper()
	if target == nil {
		target = e.api
	}
	r, err := outbox.NewRelay(t.Context(), outbox.Config{DB: e.pool, DSN: e.dsn, Table: e.table, Target: target})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// insert writes rows (request id, request JSON) into the outbox.
func (e *relayEnv) insert(t *testing.T, rows ...[2]string) {
	t.Helper()
	q := "INSERT INTO tenure_outbox (request_id, request) VALUES ($1, $2)"
	if e.db == sdkoutbox.MySQL {
		q = "INSERT INTO tenure_outbox (request_id, request) VALUES (?, ?)"
	}
	for _, r := range rows {
		if _, err := e.pool.ExecContext(t.Context(), q, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
}

// failedRows is the failed table: request id → error.
func (e *relayEnv) failedRows(t *testing.T) map[string]string {
	t.Helper()
	rs, err := e.pool.QueryContext(t.Context(), "SELECT request_id, error FROM "+e.table.Failed())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]string{}
	for rs.Next() {
		var id, why string
		if err := rs.Scan(&id, &why); err != nil {
			t.Fatal(err)
		}
		out[id] = why
	}
	return out
}

// tasks is the request ids of the node's tasks of queue q.
func (e *relayEnv) tasks(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for task, err := range e.c.ListTasks(t.Context(), client.ListTasksRequest{Queue: "q"}) {
		if err != nil {
			t.Fatal(err)
		}
		out[task.RequestID] = string(task.Payload)
	}
	return out
}

// TestRelayMovesBadRowsAside: on each database, a round relays the rows
// the server takes and moves the others to the failed table with the
// reason, in the transaction that deletes them all: a request that is not
// a SubmitRequest, one without a queue, one whose request id was used for
// another payload, one whose payload is over the limit, one whose request
// names another request id than its row. The rows after a bad one are
// relayed; the outbox is empty after one round.
func TestRelayMovesBadRowsAside(t *testing.T) {
	for _, db := range outboxtest.Databases {
		t.Run(db.String(), func(t *testing.T) {
			t.Parallel()
			e := newRelayEnv(t, db)
			if _, err := e.c.Submit(t.Context(), client.SubmitRequest{Queue: "q", Payload: []byte("first"), RequestID: "taken"}); err != nil {
				t.Fatal(err)
			}
			big := strings.Repeat("QUFB", (1<<20)/3+10) // base64 of more than 1 MiB
			e.insert(t,
				[2]string{"good-1", `{"queue": "q", "payload": "MQ=="}`},
				[2]string{"typo", `{"queu": "q"}`},
				[2]string{"no-queue", `{"payload": "MQ=="}`},
				[2]string{"good-2", `{"queue": "q", "payload": "Mg=="}`},
				[2]string{"taken", `{"queue": "q", "payload": "b3RoZXI="}`},
				[2]string{"big", `{"queue": "q", "payload": "` + big + `"}`},
				[2]string{"mismatch", `{"queue": "q", "requestId": "other"}`},
				[2]string{"good-3", `{"queue": "q", "payload": "Mw=="}`},
			)
			r := e.relay(t, nil)
			if n, err := r.Round(t.Context()); err != nil || n != 8 {
				t.Fatalf("the round took %d rows, %v; want all 8", n, err)
			}
			if got := e.tasks(t); len(got) != 4 || got["good-1"] != "1" || got["good-2"] != "2" || got["good-3"] != "3" || got["taken"] != "first" {
				t.Errorf("tasks %v; want the three good rows' and the first of taken", got)
			}
			failed := e.failedRows(t)
			for id, want := range map[string]string{
				"typo":     `unknown field "queu"`,
				"no-queue": "queue: required",
				"taken":    `"taken" was already used`,
				"big":      "too large: payload is",
				"mismatch": `request_id "other" is not the row's "mismatch"`,
			} {
				if !strings.Contains(failed[id], want) {
					t.Errorf("failed row %s: %q; want it to say %q", id, failed[id], want)
				}
			}
			if len(failed) != 5 {
				t.Errorf("failed rows %v; want 5", failed)
			}
			if n := outboxtest.Count(t, e.pool, "tenure_outbox"); n != 0 {
				t.Errorf("%d rows left in the outbox", n)
			}
			if st := r.Stats(); st.Relayed != 3 || st.Failed != 5 {
				t.Errorf("stats %+v; want 3 relayed, 5 failed", st)
			}
			if h := holdsOf(t, e.api); len(h) != 0 {
				t.Errorf("holds left after the round: %v", h)
			}
		})
	}
}

// refusesBatches refuses every Relay of more than one row as a whole, as
// a server refuses a call for one row it may not take (a scope the
// token lacks), and refuses the rows with request id bad alone.
type refusesBatches struct {
	tenurev1connect.OutboxServiceClient
	bad   string
	calls int
}

func (r *refusesBatches) Relay(ctx context.Context, req *connect.Request[tenurev1.RelayRequest]) (*connect.Response[tenurev1.RelayResponse], error) {
	r.calls++
	for _, row := range req.Msg.GetRows() {
		if row.GetRequest().GetRequestId() == r.bad {
			return nil, connect.NewError(connect.CodePermissionDenied, errors.New("token may not submit to that queue"))
		}
	}
	return r.OutboxServiceClient.Relay(ctx, req)
}

// TestRelayIsolatesRowsAtFault: a call the server refuses as a whole for
// a row's sake (permission denied, invalid argument, too large) is made
// again row by row: the row at fault is moved aside with the refusal, the
// others relayed. A call refused for the server's sake (unavailable)
// leaves every row in the outbox.
func TestRelayIsolatesRowsAtFault(t *testing.T) {
	e := newRelayEnv(t, sdkoutbox.PostgreSQL)
	for i := range 4 {
		e.insert(t, [2]string{fmt.Sprintf("r%d", i), fmt.Sprintf(`{"queue": "q", "payload": "%s"}`, []string{"MA==", "MQ==", "Mg==", "Mw=="}[i])})
	}
	down := e.relay(t, unavailable{})
	if _, err := down.Round(t.Context()); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a round against a server that is down: %v", err)
	}
	if n := outboxtest.Count(t, e.pool, "tenure_outbox"); n != 4 {
		t.Fatalf("%d rows left after a round the server refused; want all 4", n)
	}
	target := &refusesBatches{OutboxServiceClient: e.api, bad: "r2"}
	if n, err := e.relay(t, target).Round(t.Context()); err != nil || n != 4 {
		t.Fatalf("the round took %d rows, %v", n, err)
	}
	if got := e.tasks(t); len(got) != 3 || got["r2"] != "" {
		t.Errorf("tasks %v; want r0, r1, r3", got)
	}
	if f := e.failedRows(t); len(f) != 1 || !strings.Contains(f["r2"], "may not submit") {
		t.Errorf("failed rows %v; want r2's, with the refusal", f)
	}
	if target.calls != 5 {
		t.Errorf("%d calls; want the batch, then each of the 4 rows", target.calls)
	}
}

// unavailable is a server that is down.
type unavailable struct {
	tenurev1connect.OutboxServiceClient
}

func (unavailable) Relay(context.Context, *connect.Request[tenurev1.RelayRequest]) (*connect.Response[tenurev1.RelayResponse], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
}

// TestRelayCleansUpHolds: a relay stopped between its delete and its
// release leaves holds of rows gone; a relay starting releases them, and
// keeps the holds of rows still in the table (another relay's, in
// flight).
func TestRelayCleansUpHolds(t *testing.T) {
	e := newRelayEnv(t, sdkoutbox.MySQL)
	e.insert(t, [2]string{"a", `{"queue": "q"}`}, [2]string{"b", `{"queue": "q"}`})
	r := e.relay(t, nil)
	var ids []int64
	rs, err := e.pool.QueryContext(t.Context(), "SELECT id FROM tenure_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id int64
		rs.Scan(&id)
		ids = append(ids, id)
	}
	rs.Close()
	// Both rows relayed (held), the first deleted without a release.
	_, err = e.api.Relay(t.Context(), connect.NewRequest(&tenurev1.RelayRequest{Outbox: r.Name(), Rows: []*tenurev1.OutboxRow{
		{Row: ids[0], Request: &tenurev1.SubmitRequest{Queue: "q", RequestId: "a"}},
		{Row: ids[1], Request: &tenurev1.SubmitRequest{Queue: "q", RequestId: "b"}}}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.ExecContext(t.Context(), "DELETE FROM tenure_outbox WHERE id = ?", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := holdsOf(t, e.api); len(h) != 1 || h[0].GetRequestId() != "b" {
		t.Fatalf("holds after the cleanup: %v; want b's alone", h)
	}
	if n, err := r.Round(t.Context()); err != nil || n != 1 {
		t.Fatalf("the round took %d rows, %v; want b", n, err)
	}
	if h := holdsOf(t, e.api); len(h) != 0 {
		t.Fatalf("holds after the round: %v", h)
	}
	if got := e.tasks(t); len(got) != 2 {
		t.Errorf("tasks %v; want a and b once each", got)
	}
}

// holdsOf is every hold the server keeps.
func holdsOf(t *testing.T, api tenurev1connect.OutboxServiceClient) []*tenurev1.OutboxHold {
	t.Helper()
	resp, err := api.ListOutboxHolds(t.Context(), connect.NewRequest(&tenurev1.ListOutboxHoldsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetHolds()
}
