package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// The ports of the application databases the outbox tests start (and
// crash) for themselves: the shared test servers must not be restarted.
const (
	outboxPostgresPort = 5499
	outboxMariaDBPort  = 3312
)

// appDB is an application's database of a test's own, holding the outbox
// and the application's table of orders.
type appDB struct {
	kind  sdkoutbox.Database
	flag  string // postgres or mysql, as the CLI's flags say
	dsn   string
	pool  *sql.DB
	crash func(t *testing.T) // crash the server and start it again
}

// startAppDB starts a database server of the test's own (skipping the
// test where it cannot run, unless CI is set), with database shop, the
// outbox tables and the table orders.
func startAppDB(t *testing.T, kind sdkoutbox.Database) *appDB {
	t.Helper()
	a := &appDB{kind: kind}
	var adminDSN string // where database shop is created
	switch kind {
	case sdkoutbox.PostgreSQL:
		if why := outboxtest.PostgresMissing(); why != "" {
			skipOrFail(t, why)
		}
		pg, err := outboxtest.StartPostgres(outboxPostgresPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		adminDSN = pg.DSN("postgres")
		a.flag, a.dsn = "postgres", pg.DSN("shop")
		a.crash = func(t *testing.T) {
			pg.Crash()
			if err := pg.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	case sdkoutbox.MySQL:
		if why := clustertest.MariaDBMissing(); why != "" {
			skipOrFail(t, why)
		}
		m, err := clustertest.StartMariaDB(outboxMariaDBPort, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		adminDSN = m.Primary.DSN("")
		a.flag, a.dsn = "mysql", m.Primary.DSN("shop")
		a.crash = func(t *testing.T) {
			m.Primary.Kill()
			if err := m.Primary.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	admin, err := outbox.Open(t.Context(), kind, adminDSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE shop"); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	mustCLI(t, "outbox", "migrate", "--"+a.flag, a.dsn)
	pool, err := outbox.Open(t.Context(), kind, a.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	pool.SetMaxOpenConns(40)
	a.pool = pool
	if _, err := pool.ExecContext(t.Context(), "CREATE TABLE orders (id BIGINT PRIMARY KEY, email VARCHAR(200) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return a
}

// skipOrFail skips a test that needs what the machine lacks, unless CI is
// set: CI installs everything.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set but %s", why)
	}
	t.Skip(why)
}

// placeholders is the dialect's parameters of n values.
func (a *appDB) insertOrder() string {
	if a.kind == sdkoutbox.PostgreSQL {
		return "INSERT INTO orders (id, email) VALUES ($1, $2)"
	}
	return "INSERT INTO orders (id, email) VALUES (?, ?)"
}

// order writes order id and submits its email in one transaction, which
// it commits or rolls back; it returns the error of the first statement
// that failed (the database may be down).
func (a *appDB) order(ctx context.Context, ob *sdkoutbox.Outbox, id int64, commit bool) error {
	tx, err := a.pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, a.insertOrder(), id, fmt.Sprintf("order%d@example.com", id)); err != nil {
		return err
	}
	if _, err := ob.SubmitTx(ctx, tx, client.SubmitRequest{Queue: "orders", Kind: "send_receipt", Payload: []byte(strconv.FormatInt(id, 10))}); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// committedOrders is the set of orders the database holds.
func (a *appDB) committedOrders(t *testing.T) []int64 {
	t.Helper()
	rs, err := a.pool.QueryContext(t.Context(), "SELECT id FROM orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// count is the number of rows of table.
func (a *appDB) count(t *testing.T, table string) int { return outboxtest.Count(t, a.pool, table) }

// startRelayProc starts `tenure outbox relay` of db into the server at url.
func startRelayProc(t *testing.T, db *appDB, url string, extra ...string) *serverProc {
	t.Helper()
	p := spawn(t, "relay", url, append([]string{"outbox", "relay", "--" + db.flag, db.dsn, "--addr", url, "--poll", "50ms"}, extra...))
	waitOutput(t, p, "relaying outbox ", 1)
	return p
}

// orderTasks is, for each order, how many tasks of queue orders the
// server at url holds for it.
func orderTasks(t *testing.T, url string) map[int64]int {
	t.Helper()
	c := sdk(t, url)
	out := map[int64]int{}
	for task, err := range c.ListTasks(t.Context(), client.ListTasksRequest{Queue: "orders", PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.ParseInt(string(task.Payload), 10, 64)
		if err != nil {
			t.Fatalf("task %s: payload %q is no order", task.ID, task.Payload)
		}
		out[id]++
	}
	return out
}

// holds is the outbox holds the server at url keeps.
func holds(t *testing.T, url string) []*tenurev1.OutboxHold {
	t.Helper()
	c := tenurev1connect.NewOutboxServiceClient(client.DefaultHTTPClient(client.ProtocolConnect), url)
	resp, err := c.ListOutboxHolds(t.Context(), connect.NewRequest(&tenurev1.ListOutboxHoldsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetHolds()
}

// TestOutboxExactlyOnce: on a real PostgreSQL and a real MariaDB, 20
// writers commit or roll back transactions that each write an order and
// submit its receipt through the outbox (SubmitTx), while two relays
// drain the outbox into a real server: the server's own (--outbox-*) and
// a `tenure outbox relay`. Meanwhile the relay process is killed -9 ten
// times, the server killed -9 twice (its relay with it) while the relay
// process calls it, and the database crashed and restarted once under
// both. At the end the outbox is empty, no hold is
// left, nothing was moved aside, and the orders the database committed
// are exactly the orders with a task, each with one.
func TestOutboxExactlyOnce(t *testing.T) {
	for _, kind := range []sdkoutbox.Database{sdkoutbox.PostgreSQL, sdkoutbox.MySQL} {
		t.Run(kind.String(), func(t *testing.T) {
			db := startAppDB(t, kind)
			dataDir, addr := t.TempDir(), freeLoopbackAddr(t)
			serverLaunch := launch{name: "server", addr: addr, args: func(addr string) []string {
				return serverArgs(dataDir, addr, []string{"--outbox-" + db.flag, db.dsn, "--outbox-poll", "50ms"})
			}}
			srv := start(t, serverLaunch)
			relay := startRelayProc(t, db, srv.url())
			ob, err := sdkoutbox.New(sdkoutbox.Options{Database: kind})
			if err != nil {
				t.Fatal(err)
			}

			ctx, stopWriters := context.WithCancel(t.Context())
			var next atomic.Int64
			var wg sync.WaitGroup
			var tried, failed atomic.Int64
			for w := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 39))
					for ctx.Err() == nil {
						tried.Add(1)
						if err := db.order(ctx, ob, next.Add(1), rng.IntN(10) < 7); err != nil {
							failed.Add(1) // the database is down: try the next one
							clock.Sleep(ctx, clock.Real, 20*time.Millisecond)
						}
					}
				}()
			}

			rng := rand.New(rand.NewPCG(7, 39))
			pause := func() { clock.Sleep(t.Context(), clock.Real, time.Duration(150+rng.IntN(350))*time.Millisecond) }
			for i := range 10 {
				pause()
				relay.kill9(t)
				relay = startRelayProc(t, db, srv.url())
				switch i {
				case 3, 7:
					// The server (and its relay) dies under the relay
					// process, which goes on once it is back.
					pause()
					srv.kill9(t)
					srv = start(t, serverLaunch)
				case 5:
					pause()
					db.crash(t)
				}
			}
			pause()
			stopWriters()
			wg.Wait()
			t.Logf("%d transactions tried, %d failed (the database restarting)", tried.Load(), failed.Load())

			// A relay that starts releases the holds of rows a killed one
			// deleted without releasing them.
			relay.kill9(t)
			relay = startRelayProc(t, db, srv.url())
			eventually.True(t, "the outbox drained and every hold released", func() bool {
				return db.count(t, "tenure_outbox") == 0 && len(holds(t, srv.url())) == 0
			})
			if n := db.count(t, "tenure_outbox_failed"); n != 0 {
				t.Errorf("%d rows were moved aside; want none", n)
			}

			committed := db.committedOrders(t)
			tasks := orderTasks(t, srv.url())
			for _, id := range committed {
				if tasks[id] != 1 {
					t.Errorf("order %d was committed and has %d tasks; want 1", id, tasks[id])
				}
				delete(tasks, id)
			}
			var extra []int64
			for id := range tasks {
				extra = append(extra, id)
			}
			slices.Sort(extra)
			if len(extra) > 0 {
				t.Errorf("%d tasks are of orders the database does not hold (rolled back): %v", len(extra), extra[:min(len(extra), 20)])
			}
			if len(committed) < 100 {
				t.Errorf("only %d orders were committed: the writers hardly ran", len(committed))
			}
			t.Logf("%d orders committed of %d numbered, one task each", len(committed), next.Load())
			stop(t, relay)
			if !strings.Contains(relay.out.String(), "stopped: ") {
				t.Errorf("the relay did not say it stopped:\n%s", relay.out.String())
			}
		})
	}
}

// diesAfterRelay is a relay's server that answers its Relay and then
// fails it, as a relay killed after the server made the rows' tasks
// durable and before it deleted the rows would see it.
type diesAfterRelay struct {
	tenurev1connect.OutboxServiceClient
}

func (d diesAfterRelay) Relay(ctx context.Context, req *connect.Request[tenurev1.RelayRequest]) (*connect.Response[tenurev1.RelayResponse], error) {
	if _, err := d.OutboxServiceClient.Relay(ctx, req); err != nil {
		return nil, err
	}
	return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the relay died after the server answered"))
}

// TestOutboxLongDowntime: with a retention of 1s, a relay submits rows
// and dies before it deletes them; their tasks complete and stay past the
// retention (a task submitted without the outbox is purged meanwhile),
// because the rows hold their request ids. The relay, back much later,
// submits the rows again: each is a duplicate of its task, no task is
// doubled, and once the rows are released the tasks go at the next purge.
func TestOutboxLongDowntime(t *testing.T) {
	for _, kind := range outboxtest.Databases {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			dsn, pool, table := outboxtest.Migrated(t, kind)
			srv := startServerProc(t, t.TempDir(), "--retention", "1s", "--snapshot-every", "1s")
			c := sdk(t, srv.url())
			const rows = 50
			rids := outboxRows(t, kind, pool, "late", 0, rows)
			api := tenurev1connect.NewOutboxServiceClient(client.DefaultHTTPClient(client.ProtocolConnect), srv.url())
			relay := func(target tenurev1connect.OutboxServiceClient) *outbox.Relay {
				r, err := outbox.NewRelay(t.Context(), outbox.Config{DB: pool, DSN: dsn, Table: table, Target: target})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if _, err := relay(diesAfterRelay{api}).Round(t.Context()); err == nil {
				t.Fatal("the dying relay's round succeeded")
			}
			if n := outboxtest.Count(t, pool, table.Name); n != rows {
				t.Fatalf("%d rows left after the relay died; want all %d", n, rows)
			}
			// The tasks run to completion; a task without a hold does too.
			control, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "late", Payload: []byte("control")})
			if err != nil {
				t.Fatal(err)
			}
			var firstIDs []string
			for task, err := range c.ListTasks(t.Context(), client.ListTasksRequest{Queue: "late"}) {
				if err != nil {
					t.Fatal(err)
				}
				firstIDs = append(firstIDs, task.ID)
			}
			if len(firstIDs) != rows+1 {
				t.Fatalf("%d tasks after the first relay; want %d and the control", len(firstIDs), rows)
			}
			completeAll(t, c, "late", rows+1)
			eventually.True(t, "the control task purged (1s after it completed)", func() bool {
				_, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: control.TaskID})
				return errors.Is(err, client.ErrNotFound)
			})
			for _, id := range firstIDs {
				if id == control.TaskID {
					continue
				}
				if _, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: id}); err != nil {
					t.Fatalf("task %s of a row still in the outbox is gone past its retention: %v", id, err)
				}
			}

			// The relay comes back.
			r := relay(api)
			if n, err := r.Round(t.Context()); err != nil || n != rows {
				t.Fatalf("the relay back took %d rows, %v; want %d", n, err, rows)
			}
			if n := outboxtest.Count(t, pool, table.Name); n != 0 {
				t.Fatalf("%d rows left", n)
			}
			var again []string
			for task, err := range c.ListTasks(t.Context(), client.ListTasksRequest{Queue: "late"}) {
				if err != nil {
					t.Fatal(err)
				}
				again = append(again, task.ID)
				if task.State != client.TaskStateCompleted || !slices.Contains(rids, task.RequestID) {
					t.Errorf("task %s (request id %s) is %v: not one of the first relay's", task.ID, task.RequestID, task.State)
				}
			}
			if len(again) != rows {
				t.Fatalf("%d tasks after the relay came back; want the %d of the first relay, none doubled", len(again), rows)
			}
			if st := r.Stats(); st.Relayed != rows {
				t.Errorf("the relay counts %d rows relayed; want %d", st.Relayed, rows)
			}
			eventually.True(t, "the rows' tasks purged once released", func() bool {
				p, err := c.ListTasksPage(t.Context(), client.ListTasksRequest{Queue: "late"})
				return err == nil && len(p.Tasks) == 0
			})
		})
	}
}

// outboxRows writes the rows from..to-1 into the outbox of pool in one
// transaction, each a submit to queue with its number as payload, and
// returns their request ids.
func outboxRows(t *testing.T, kind sdkoutbox.Database, pool *sql.DB, queue string, from, to int) []string {
	t.Helper()
	ob, err := sdkoutbox.New(sdkoutbox.Options{Database: kind})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]client.SubmitRequest, 0, to-from)
	for i := from; i < to; i++ {
		reqs = append(reqs, client.SubmitRequest{Queue: queue, Payload: []byte(strconv.Itoa(i))})
	}
	tx, err := pool.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rids, err := ob.SubmitTx(t.Context(), tx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return rids
}

// wantTaskEach fails the test unless each of the rows 0..rows-1 has
// exactly one task in tasks (orderTasks), and no other row has one.
func wantTaskEach(t *testing.T, tasks map[int64]int, rows int) {
	t.Helper()
	for i := range int64(rows) {
		if tasks[i] != 1 {
			t.Errorf("row %d has %d tasks; want 1", i, tasks[i])
		}
	}
	if len(tasks) != rows {
		t.Errorf("%d rows have tasks; want %d", len(tasks), rows)
	}
}

// completeAll leases and completes n tasks of queue.
func completeAll(t *testing.T, c *client.Client, queue string, n int) {
	t.Helper()
	done := 0
	for done < n {
		res, err := c.Lease(t.Context(), client.LeaseRequest{Queue: queue, WorkerID: "w", MaxTasks: 100, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Tasks {
			if err := c.Complete(t.Context(), client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
				t.Fatal(err)
			}
			done++
		}
	}
}

// TestOutboxTwoRelays: two `tenure outbox relay` processes drain one
// outbox of 3000 rows side by side: every row is submitted once (the log
// holds each row in one OutboxHeld, none in two), none is left behind,
// each row has its task, and both relays took a share.
func TestOutboxTwoRelays(t *testing.T) {
	for _, kind := range outboxtest.Databases {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			dsn, pool, table := outboxtest.Migrated(t, kind)
			dataDir := t.TempDir()
			srv := startServerProc(t, dataDir)
			const rows = 3000
			outboxRows(t, kind, pool, "orders", 0, rows)
			db := &appDB{kind: kind, flag: map[sdkoutbox.Database]string{sdkoutbox.PostgreSQL: "postgres", sdkoutbox.MySQL: "mysql"}[kind], dsn: dsn, pool: pool}
			relays := []*serverProc{startRelayProc(t, db, srv.url(), "--batch", "100"), startRelayProc(t, db, srv.url(), "--batch", "100")}
			eventually.True(t, "the outbox drained", func() bool { return outboxtest.Count(t, pool, table.Name) == 0 })
			for _, r := range relays {
				stop(t, r)
			}
			wantTaskEach(t, orderTasks(t, srv.url()), rows)
			stop(t, srv)
			code, out := runBin(t, "wal", "dump", "--data-dir", dataDir)
			if code != 0 {
				t.Fatalf("tenure wal dump: exit %d\n%s", code, out)
			}
			held := map[string]int{}
			records := 0
			for line := range strings.Lines(out) {
				var rec struct {
					Type   string
					Record json.RawMessage
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("wal dump printed %q: %v", line, err)
				}
				if rec.Type != "OutboxHeld" {
					continue
				}
				var h struct{ Rows []struct{ Row string } }
				if err := json.Unmarshal(rec.Record, &h); err != nil {
					t.Fatalf("an OutboxHeld of wal dump: %q: %v", rec.Record, err)
				}
				records++
				for _, r := range h.Rows {
					held[r.Row]++
				}
			}
			for row, n := range held {
				if n != 1 {
					t.Errorf("row %s was submitted %d times", row, n)
				}
			}
			if len(held) != rows {
				t.Errorf("%d rows were submitted; want %d", len(held), rows)
			}
			var took []string
			for _, r := range relays {
				took = append(took, r.out.String()[strings.LastIndex(r.out.String(), "stopped: "):])
				if strings.Contains(r.out.String(), "stopped: 0 rows relayed") {
					t.Errorf("a relay relayed nothing: %s", r.out.String())
				}
			}
			t.Logf("%d rounds in the log; %q", records, took)
		})
	}
}

// TestOutboxStatusAndMetrics: a server relaying an outbox reports it in
// /metrics (rows waiting, the oldest's age, failed rows, rows relayed and
// moved aside), so does a relay on its own at --metrics-listen, and
// tenure outbox status shows the outbox, its failed rows with the reason
// and the server's holds.
func TestOutboxStatusAndMetrics(t *testing.T) {
	t.Parallel()
	dsn, pool, _ := outboxtest.Migrated(t, sdkoutbox.PostgreSQL)
	srv := startServerProc(t, t.TempDir(), "--outbox-postgres", dsn)
	db := &appDB{kind: sdkoutbox.PostgreSQL, flag: "postgres", dsn: dsn, pool: pool}
	ins := func(rid, req string) {
		if _, err := pool.ExecContext(t.Context(), "INSERT INTO tenure_outbox (request_id, request) VALUES ($1, $2)", rid, req); err != nil {
			t.Fatal(err)
		}
	}
	ins("good", `{"queue": "q"}`)
	ins("bad", `{"queue": "q", "priority": "high"}`)
	eventually.True(t, "the rows relayed and moved aside", func() bool { return db.count(t, "tenure_outbox") == 0 })
	name := outboxName(t, pool)
	want := []string{
		`tenure_outbox_relayed_total{outbox="` + name + `"} 1`,
		`tenure_outbox_moved_aside_total{outbox="` + name + `"} 1`,
		`tenure_outbox_rows{outbox="` + name + `"} 0`,
	}
	eventually.NoError(t, "the server's /metrics reports the outbox", func() error { return metricsHave(srv.url()+"/metrics", want...) })

	out := mustCLI(t, "outbox", "status", "--postgres", dsn, "--addr", srv.url())
	for _, w := range []string{"outbox   " + name, "rows     0 waiting", "failed   1 rows in tenure_outbox_failed", "holds    0 rows held",
		" bad ", `invalid value for int32 field priority: "high"`} {
		if !strings.Contains(out, w) {
			t.Errorf("tenure outbox status does not say %q:\n%s", w, out)
		}
	}

	// A relay on its own serves the same metrics.
	ins("good-2", `{"queue": "q"}`)
	maddr := freeLoopbackAddr(t)
	relay := startRelayProc(t, db, srv.url(), "--metrics-listen", maddr)
	defer stop(t, relay)
	eventually.NoError(t, "the relay's /metrics reports the outbox", func() error {
		return metricsHave("http://"+maddr+"/metrics", `tenure_outbox_failed_rows{outbox="`+name+`"} 1`, `tenure_outbox_rows{outbox="`+name+`"} 0`)
	})
}

// outboxName is the name the relay gives the outbox of pool (PostgreSQL).
func outboxName(t *testing.T, pool *sql.DB) string {
	t.Helper()
	var db, schema string
	if err := pool.QueryRowContext(t.Context(), "SELECT current_database(), current_schema()").Scan(&db, &schema); err != nil {
		t.Fatal(err)
	}
	return "postgres:" + db + "." + schema + ".tenure_outbox"
}

// metricsHave reports whether the metrics at url hold each of lines.
func metricsHave(url string, lines ...string) error {
	_, b, err := httpGet(context.Background(), http.DefaultClient, url, "")
	if err != nil {
		return err
	}
	for _, l := range lines {
		if !strings.Contains(b, "\n"+l+"\n") {
			return fmt.Errorf("no line %q", l)
		}
	}
	return nil
}

// TestOutboxCluster: a relay drains an outbox through one node of a
// three-node cluster: each row's hold and task go to the partition its
// request id places it in, on whichever node owns it (the first node
// forwards the others' parts), while one of the other nodes is killed -9
// and started again. Every row has one task, and every hold, on every
// node, is released.
func TestOutboxCluster(t *testing.T) {
	c, _ := newClTest(t, -1)
	dsn, pool, _ := outboxtest.Migrated(t, sdkoutbox.PostgreSQL)
	const rows = 3000
	outboxRows(t, sdkoutbox.PostgreSQL, pool, "orders", 0, rows)
	db := &appDB{kind: sdkoutbox.PostgreSQL, flag: "postgres", dsn: dsn, pool: pool}
	via := c.nodes[0].proc.url()
	relay := startRelayProc(t, db, via, "--batch", "50")
	eventually.True(t, "a third of the rows relayed", func() bool { return db.count(t, "tenure_outbox") < 2*rows/3 })
	victim := c.nodes[2]
	victim.proc.kill9(t)
	c.start(victim, false)
	eventually.True(t, "the outbox drained", func() bool { return db.count(t, "tenure_outbox") == 0 })
	eventually.True(t, "every hold released", func() bool { return len(holds(t, via)) == 0 })
	stop(t, relay)
	wantTaskEach(t, orderTasks(t, via), rows)
	// The tasks went to every partition of the queue (a task id ends in
	// its partition's).
	parts := map[string]bool{}
	for task, err := range sdk(t, via).ListTasks(t.Context(), client.ListTasksRequest{Queue: "orders", PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		parts[task.ID[strings.LastIndex(task.ID, "-p"):]] = true
	}
	if len(parts) != clPartitions {
		t.Errorf("the tasks are in %d partitions; want the queue's %d", len(parts), clPartitions)
	}
}
