package cluster_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/logbuf"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

// A client that freezes inside a transaction (here: one that simply stops
// sending) loses its connection to the server's wait_timeout, and with it
// its row locks, so another session's locking read gets through instead of
// waiting for as long as the frozen process lives.
func TestFrozenTransactionReleasesItsLocks(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE frozen (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO frozen VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	var timeout int
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&timeout); err != nil || timeout != 5 {
		t.Fatalf("session wait_timeout %d, %v; want 5", timeout, err)
	}
	frozen, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback()
	var v int
	if err := frozen.QueryRowContext(ctx, "SELECT v FROM frozen WHERE id = 1 FOR UPDATE").Scan(&v); err != nil {
		t.Fatal(err)
	}
	// The other session waits for the lock (InnoDB's default lock wait is
	// 50 s, far above the 5 s wait_timeout) and gets it.
	if _, err := db.ExecContext(ctx, "UPDATE frozen SET v = 1 WHERE id = 1"); err != nil {
		t.Fatalf("a locking write behind a frozen transaction: %v", err)
	}
	if err := frozen.Commit(); err == nil {
		t.Fatal("the frozen transaction committed after the server closed its connection")
	}
}

// A list of two servers (here two proxies in front of the test's one):
// connections go to the first while it answers; when it is cut off, every
// statement goes on through the second, and back when that one is cut.
func TestOpenDBFailsOverToTheNextServer(t *testing.T) {
	p1, p2, list := twoProxies(t)
	db, err := cluster.OpenDBWith(list, cluster.DBOptions{CheckInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	query := func() error {
		var n int
		return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n)
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	if p1.Conns() == 0 || p2.Conns() != 0 {
		t.Fatalf("connections through the first server %d, the second %d; want all through the first", p1.Conns(), p2.Conns())
	}
	p1.Cut()
	clustertest.Eventually(t, "statements through the second server", func() bool { return query() == nil && p2.Conns() > 0 })
	p1.Restore()
	p2.Cut()
	clustertest.Eventually(t, "statements through the first server again", func() bool { return query() == nil && p1.Conns() > 0 })
}

// A pool that left the first server of its list returns to it once it has
// passed every readiness check for FailbackAfter (and three in a row), not
// before, and a failed check starts the count again. Every move is logged
// with where from, where to and why. The pool's clock is a fake one that
// the test moves a check interval at a time; new connections show where
// the pool sends them (it keeps no idle ones here).
func TestOpenDBFailsBackToTheFirstServer(t *testing.T) {
	p1, p2, list := twoProxies(t)
	fc := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var logs logbuf.Buffer
	const interval, after = time.Second, 10 * time.Second
	db, err := cluster.OpenDBWith(list, cluster.DBOptions{
		Clock: fc, CheckInterval: interval, FailbackAfter: after,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0)
	ctx := context.Background()
	// through runs a statement and returns the proxy its new connection
	// went through.
	through := func() string {
		t.Helper()
		d1, d2 := p1.Dialed(), p2.Dialed()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
			t.Fatal(err)
		}
		switch {
		case p1.Dialed() > d1 && p2.Dialed() == d2:
			return "first"
		case p2.Dialed() > d2 && p1.Dialed() == d1:
			return "second"
		}
		t.Fatalf("a statement made connections through the first proxy %d and the second %d times", p1.Dialed()-d1, p2.Dialed()-d2)
		return ""
	}
	// tick moves the clock one check interval once both checks (the
	// current server's and the earlier ones') wait for it, and waits
	// until they have run and wait again.
	tick := func() {
		t.Helper()
		fc.WaitForTimers(2)
		fc.Advance(interval)
		fc.WaitForTimers(2)
	}
	moves := func() []map[string]string {
		var out []map[string]string
		for line := range strings.Lines(logs.String()) {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) != nil || !strings.HasPrefix(fmt.Sprint(l["msg"]), "cluster database: moved") {
				continue
			}
			out = append(out, map[string]string{"msg": fmt.Sprint(l["msg"]), "from": fmt.Sprint(l["from"]), "to": fmt.Sprint(l["to"]), "why": fmt.Sprint(l["why"])})
		}
		return out
	}

	if got := through(); got != "first" {
		t.Fatalf("at start, statements go through the %s server, want the first", got)
	}
	p1.Cut()
	tick()
	if got := through(); got != "second" {
		t.Fatalf("after the first server failed its check, statements go through the %s, want the second", got)
	}
	if m := moves(); len(m) != 1 || m[0]["from"] != p1.Addr() || m[0]["to"] != p2.Addr() || !strings.Contains(m[0]["why"], "does not answer") {
		t.Fatalf("the move away from the first server is logged as %v; want one move from %s to %s saying why", m, p1.Addr(), p2.Addr())
	}

	// The first server answers again; it passes checks for 5 s, fails
	// one, then passes again: the run starts over.
	p1.Restore()
	for range 5 {
		tick()
	}
	p1.Cut()
	tick()
	p1.Restore()
	// The run begins at the first check after the restore; the pool
	// moves at the check that finds it has lasted FailbackAfter.
	for i := range int(after / interval) {
		tick()
		if got := through(); got != "second" {
			t.Fatalf("%v into the first server's second run of passed checks (threshold %v), statements go through the %s server", time.Duration(i)*interval, after, got)
		}
	}
	if m := moves(); len(m) != 1 {
		t.Fatalf("moves before the first server passed its checks for %v: %v", after, m)
	}
	tick()
	if got := through(); got != "first" {
		t.Fatalf("after the first server passed every check for %v, statements go through the %s", after, got)
	}
	m := moves()
	if len(m) != 2 || m[1]["msg"] != "cluster database: moved back to a database earlier in the list" || m[1]["from"] != p2.Addr() || m[1]["to"] != p1.Addr() ||
		!strings.Contains(m[1]["why"], "passed every readiness check for 10s") {
		t.Fatalf("the move back is logged as %v; want a second move from %s to %s saying it passed every check for 10s", m, p2.Addr(), p1.Addr())
	}
	for _, want := range []string{"is ready: the pool moves back to it once it has stayed ready", "failed a readiness check: the pool stays where it is"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
}

// With no server of the list answering, a statement fails with an error
// that names every one.
func TestOpenDBNoServerAnswers(t *testing.T) {
	p1, p2, list := twoProxies(t)
	p1.Cut()
	p2.Cut()
	db, err := cluster.OpenDBWith(list, cluster.DBOptions{CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.PingContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "none of the 2 databases") || !strings.Contains(err.Error(), p1.Addr()) || !strings.Contains(err.Error(), p2.Addr()) {
		t.Fatalf("Ping with no server answering = %v", err)
	}
}

// On a server without Galera (the test's), OpenDB's sessions keep the
// server's wsrep_sync_wait: it is set only where wsrep is on.
func TestOpenDBCausalReadsOnlyOnGalera(t *testing.T) {
	_, db := clustertest.DB(t)
	var on sql.NullString
	err := db.QueryRow("SELECT @@GLOBAL.wsrep_on").Scan(&on)
	if err != nil {
		t.Skipf("the test's server has no wsrep variables (MySQL): %v", err)
	}
	if on.String == "1" || strings.EqualFold(on.String, "ON") {
		t.Skip("the test's server runs Galera")
	}
	var global, session int
	if err := db.QueryRow("SELECT @@GLOBAL.wsrep_sync_wait, @@SESSION.wsrep_sync_wait").Scan(&global, &session); err != nil {
		t.Fatal(err)
	}
	if session != global {
		t.Fatalf("wsrep_sync_wait is %d in the session, %d globally: set without Galera", session, global)
	}
}

func TestSplitDSN(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"root@tcp(127.0.0.1:3306)/t", []string{"root@tcp(127.0.0.1:3306)/t"}},
		{"u:p,w@tcp(a:1, b:2,c:3)/t?tls=true", []string{"u:p,w@tcp(a:1)/t?tls=true", "u:p,w@tcp(b:2)/t?tls=true", "u:p,w@tcp(c:3)/t?tls=true"}},
		{"u@unix(/run/mysqld.sock)/t", []string{"u@unix(/run/mysqld.sock)/t"}},
	} {
		got, err := cluster.SplitDSN(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SplitDSN(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := cluster.SplitDSN("u@tcp(a:1,,b:2)/t"); err == nil || !strings.Contains(err.Error(), "empty address (number 2)") {
		t.Errorf("SplitDSN with an empty address = %v", err)
	}
}

// Ready's rules: a read-only server is not used; a Galera node only while
// it is ready, in a primary component and synced.
func TestReady(t *testing.T) {
	synced := map[string]string{"wsrep_ready": "ON", "wsrep_cluster_status": "Primary", "wsrep_local_state_comment": "Synced"}
	with := func(k, v string) map[string]string {
		m := maps.Clone(synced)
		m[k] = v
		return m
	}
	for _, c := range []struct {
		name      string
		vars, st  map[string]string
		galera    bool
		reasonHas string
	}{
		{"plain", map[string]string{"read_only": "OFF"}, nil, false, ""},
		{"replica", map[string]string{"read_only": "ON"}, nil, false, "read_only"},
		{"galera synced", map[string]string{"read_only": "OFF", "wsrep_on": "ON"}, synced, true, ""},
		{"galera donor", map[string]string{"wsrep_on": "ON"}, with("wsrep_local_state_comment", "Donor/Desynced"), true, "Donor/Desynced"},
		{"galera joining", map[string]string{"wsrep_on": "ON"}, with("wsrep_local_state_comment", "Joining: receiving State Transfer"), true, "Joining"},
		{"galera no quorum", map[string]string{"wsrep_on": "ON"}, with("wsrep_cluster_status", "non-Primary"), true, "no quorum"},
		{"galera not ready", map[string]string{"wsrep_on": "ON"}, with("wsrep_ready", "OFF"), true, "wsrep_ready"},
	} {
		galera, reason := cluster.Ready(c.vars, c.st)
		if galera != c.galera || (c.reasonHas == "") != (reason == "") || !strings.Contains(reason, c.reasonHas) {
			t.Errorf("%s: Ready = %v, %q; want %v and a reason with %q", c.name, galera, reason, c.galera, c.reasonHas)
		}
	}
}

// The errors a replicated database answers are told apart: retry, or the
// node is not ready.
func TestErrorClasses(t *testing.T) {
	for _, c := range []struct {
		n                    uint16
		retry, notReady, dup bool
	}{
		{1213, true, false, false}, // deadlock; Galera certification failure
		{1205, true, false, false}, // lock wait timeout
		{3101, true, false, false}, // Group Replication certification failure
		{1047, false, true, false}, // WSREP has not yet prepared node
		{1062, false, false, true},
		{1180, false, false, false}, // error during COMMIT: outcome unknown
	} {
		err := fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: c.n})
		if cluster.IsRetryable(err) != c.retry || cluster.IsNotReady(err) != c.notReady || cluster.IsDuplicateKey(err) != c.dup {
			t.Errorf("error %d: retryable %v, not ready %v, duplicate %v; want %v, %v, %v", c.n,
				cluster.IsRetryable(err), cluster.IsNotReady(err), cluster.IsDuplicateKey(err), c.retry, c.notReady, c.dup)
		}
	}
}

// twoProxies returns two proxies in front of a migrated database of the
// test's server, and a DSN that lists both, p1 first.
func twoProxies(t *testing.T) (p1, p2 *clustertest.Proxy, list string) {
	dsn, _ := clustertest.DB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 = clustertest.NewProxy(t, cfg.Addr), clustertest.NewProxy(t, cfg.Addr)
	list = strings.Replace(clustertest.DSNVia(dsn, p1.Addr()), p1.Addr(), p1.Addr()+","+p2.Addr(), 1)
	return p1, p2, list
}

// TestEachRow: every row in order (and Column: its one column); the first
// error of each ends the read; each error says what was read.
func TestEachRow(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	const query = "SELECT n FROM (SELECT 1 AS n UNION ALL SELECT 2 UNION ALL SELECT 3) t WHERE n >= ? ORDER BY n"
	var got []int
	read := func(rows *sql.Rows) error {
		var n int
		if err := rows.Scan(&n); err != nil {
			return err
		}
		got = append(got, n)
		if n == 2 {
			return fmt.Errorf("stop at %d", n)
		}
		return nil
	}
	if err := cluster.EachRow(ctx, db, "reading numbers", query, []any{3}, read); err != nil || !slices.Equal(got, []int{3}) {
		t.Fatalf("EachRow from 3: %v, %v", got, err)
	}
	got = nil
	if err := cluster.EachRow(ctx, db, "reading numbers", query, []any{1}, read); err == nil || err.Error() != "reading numbers: stop at 2" || !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("EachRow stopped by its callback: %v, %v", got, err)
	}
	if err := cluster.EachRow(ctx, db, "reading numbers", "SELECT n FROM no_such_table", nil, read); err == nil || !strings.HasPrefix(err.Error(), "reading numbers: ") {
		t.Fatalf("EachRow of a bad query: %v", err)
	}
	if ns, err := cluster.Column[int](ctx, db, "reading numbers", query, 2); err != nil || !slices.Equal(ns, []int{2, 3}) {
		t.Fatalf("Column from 2: %v, %v", ns, err)
	}
	if _, err := cluster.Column[int](ctx, db, "reading numbers", "SELECT 'x'"); err == nil || !strings.HasPrefix(err.Error(), "reading numbers: ") {
		t.Fatalf("Column of a value that is no int: %v", err)
	}
}
