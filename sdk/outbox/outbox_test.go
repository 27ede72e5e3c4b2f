package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/outbox"
	"google.golang.org/protobuf/encoding/protojson"
)

// execs records the statements run on it, as a transaction would run them.
type execs struct {
	stmts []string
	args  [][]any
	fail  error
}

func (e *execs) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	if e.fail != nil {
		return nil, e.fail
	}
	e.stmts, e.args = append(e.stmts, query), append(e.args, args)
	return nil, nil
}

type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

// TestSubmitTx: SubmitTx writes one row per request, (request_id,
// request), in one INSERT per 1000 rows with the placeholders of its
// database, into the table named; each row's request is the request's
// encoding (client.EncodeSubmit) and its id the one SubmitTx returns.
func TestSubmitTx(t *testing.T) {
	for _, tc := range []struct {
		db    outbox.Database
		table string
		first string
	}{
		{outbox.PostgreSQL, "", "INSERT INTO tenure_outbox (request_id, request) VALUES ($1,$2),($3,$4),"},
		{outbox.MySQL, "app.jobs_outbox", "INSERT INTO app.jobs_outbox (request_id, request) VALUES (?,?),(?,?),"},
	} {
		t.Run(tc.db.String(), func(t *testing.T) {
			o, err := outbox.New(outbox.Options{Database: tc.db, Table: tc.table})
			if err != nil {
				t.Fatal(err)
			}
			reqs := make([]client.SubmitRequest, 2500)
			for i := range reqs {
				reqs[i] = client.SubmitRequest{Args: sendEmail{To: fmt.Sprintf("u%d@example.com", i)}, Queue: "emails"}
			}
			reqs[7].RequestID = "mine"
			var tx execs
			ids, err := o.SubmitTx(context.Background(), &tx, reqs...)
			if err != nil {
				t.Fatal(err)
			}
			if len(tx.stmts) != 3 || !strings.HasPrefix(tx.stmts[0], tc.first) || len(tx.args[0]) != 2000 || len(tx.args[2]) != 1000 {
				t.Fatalf("%d statements (%d, %d args), the first %.90s...; want 3 of 1000, 1000 and 500 rows, starting %q", len(tx.stmts), len(tx.args[0]), len(tx.args[2]), tx.stmts[0], tc.first)
			}
			if tc.db == outbox.PostgreSQL && !strings.HasSuffix(tx.stmts[2], "($999,$1000)") {
				t.Errorf("the last statement ends %q", tx.stmts[2][len(tx.stmts[2])-20:])
			}
			seen := map[string]bool{}
			for i := range reqs {
				args := tx.args[i/1000][2*(i%1000):]
				id, js := args[0].(string), args[1].(string)
				var m tenurev1.SubmitRequest
				if err := protojson.Unmarshal([]byte(js), &m); err != nil || m.Queue != "emails" || m.Kind != "send_email" ||
					string(m.Payload) != fmt.Sprintf(`{"to":"u%d@example.com"}`, i) || id != ids[i] || seen[id] {
					t.Fatalf("row %d: (%q, %s), %v; want request id %q and the request's encoding", i, id, js, err, ids[i])
				}
				seen[id] = true
			}
			if ids[7] != "mine" {
				t.Errorf("the request with an id got %q", ids[7])
			}
		})
	}
}

// TestSubmitTxRefuses: a request that does not encode, no request at all,
// and a failed statement are errors, and an invalid request writes
// nothing; Options are checked.
func TestSubmitTxRefuses(t *testing.T) {
	o, err := outbox.New(outbox.Options{Database: outbox.MySQL})
	if err != nil {
		t.Fatal(err)
	}
	var tx execs
	if _, err := o.SubmitTx(context.Background(), &tx, client.SubmitRequest{Queue: "q"}, client.SubmitRequest{Args: sendEmail{}}); !errors.Is(err, client.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "reqs[1]") || len(tx.stmts) != 0 {
		t.Errorf("a request without a queue: %v, %d statements; want invalid argument naming reqs[1], nothing written", err, len(tx.stmts))
	}
	if _, err := o.SubmitTx(context.Background(), &tx); err == nil || len(tx.stmts) != 0 {
		t.Errorf("no requests: %v", err)
	}
	boom := errors.New("deadlock")
	if _, err := o.SubmitTx(context.Background(), &execs{fail: boom}, client.SubmitRequest{Queue: "q"}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "tenure_outbox") {
		t.Errorf("a failed statement: %v; want it wrapped, naming the table", err)
	}
	for _, opts := range []outbox.Options{{}, {Database: outbox.PostgreSQL, Table: "outbox; DROP TABLE orders"}, {Database: outbox.MySQL, Table: "a.b.c"}} {
		if _, err := outbox.New(opts); err == nil {
			t.Errorf("New(%+v) accepted it", opts)
		}
	}
}
