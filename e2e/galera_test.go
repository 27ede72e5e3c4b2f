//go:build linux

package e2e

// Cluster mode on a replicated database: three tenure nodes, each on its
// own node of a three-node MariaDB Galera cluster (clustertest.StartGalera,
// started once for the package and stopped after the last test), and a
// managed database that fails over (clustertest.StartMariaDB). The checks
// are the cluster suite's: every acknowledged submit, commit and
// completion survives, no task has two accepted commits. The Galera
// cluster keeps its default timeouts and the tenure nodes their default
// heartbeat, silence and lock TTL: the point is that the defaults ride out
// the database's own failover.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/cluster/schema"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/wal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// galeraTiming: the defaults for what matters here (heartbeat, silence,
// lock TTL and renewal); only how soon a standby looks at the lock and how
// often the map is read are fast, to keep the tests short.
var galeraTiming = []string{"--standby-check", "200ms", "--assign-interval", clAssign.String()}

var shared struct {
	once sync.Once
	g    *clustertest.Galera
	err  error
}

// galera returns the package's Galera cluster, starting it on first use.
func galera(t *testing.T) *clustertest.Galera {
	t.Helper()
	if testing.Short() {
		t.Skip("Galera e2e: a three-node database cluster and three server processes; skipped with -short")
	}
	clustertest.SkipWithoutGalera(t)
	shared.once.Do(func() {
		shared.g, shared.err = clustertest.StartGalera(log.Printf)
		if shared.err == nil {
			afterTests = append(afterTests, shared.g.Close)
		}
	})
	if shared.err != nil {
		t.Fatalf("starting the Galera cluster: %v", shared.err)
	}
	return shared.g
}

// newGaleraClTest returns a clTest over database db of g whose node i is
// on Galera node i (and the others, in order, if it fails), without
// starting the nodes.
func newGaleraClTest(t *testing.T, g *clustertest.Galera, db string) *clTest {
	c := &clTest{t: t, dsn: g.DSN(db, 0), db: clustertest.Open(t, g.DSN(db, 0)), hc: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.hc.CloseIdleConnections)
	for i := range clNodes {
		c.nodes = append(c.nodes, &clNode{id: fmt.Sprintf("n%d", i+1), dsn: g.DSN(db, i), timing: galeraTiming})
	}
	return c
}

// Three tenure nodes started at the same instant on a fresh database of
// the Galera cluster, each on its own Galera node, migrate together (the
// migration lock is a replicated row) and all three serve; ten times.
func TestGaleraFirstStart(t *testing.T) {
	g := galera(t)
	const runs = 10
	for run := 1; run <= runs; run++ {
		c := newGaleraClTest(t, g, g.NewDatabase(t))
		procs := make([]*serverProc, len(c.nodes))
		for i, n := range c.nodes {
			n.addr = freeLoopbackAddr(t)
			procs[i] = spawn(t, fmt.Sprintf("run%d-%s", run, n.id), n.addr, n.args())
		}
		for i, p := range procs {
			if err := waitReady(p); err != nil {
				t.Fatalf("run %d: node %s did not serve: %v\n%s", run, c.nodes[i].id, err, p.out.String())
			}
			c.nodes[i].proc = p
		}
		var migrated []string
		for i, p := range procs {
			if len(logLines(p.out.String(), "applied schema migrations")) > 0 {
				migrated = append(migrated, c.nodes[i].id)
			}
		}
		if v, err := schema.Version(context.Background(), c.db); err != nil || v != schema.Latest() {
			t.Fatalf("run %d: schema version %d, %v; want %d", run, v, err, schema.Latest())
		}
		for _, n := range c.nodes {
			client := tenurev1connect.NewTaskServiceClient(c.hc, n.url(), connect.WithProtoJSON())
			c.poll(fmt.Sprintf("run %d: a submit through %s", run, n.id), func() (bool, error) {
				_, err := client.Submit(context.Background(), connect.NewRequest(&tenurev1.SubmitRequest{
					Namespace: clNamespace, Queue: clQueue, Payload: []byte(n.id), RequestId: fmt.Sprintf("first-%d-%s", run, n.id),
				}))
				return err == nil, err
			})
		}
		for i, p := range procs {
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := waitProcExit(t, p); code != 0 {
				t.Fatalf("run %d: node %s exited with %d after SIGTERM", run, c.nodes[i].id, code)
			}
		}
		t.Logf("run %d: all three nodes serve and took a submit; migrations applied by %v", run, migrated)
		if len(migrated) != 1 {
			t.Errorf("run %d: migrations applied by %v, want exactly one node", run, migrated)
		}
	}
}

// A deposed owner's append, on another Galera node than the new owner's,
// is refused and recognised as fenced (mysqllog.ErrFenced): first in
// turn, then with both writers appending at once, where Galera reports the
// collision as a certification failure (1213) and the log's retry meets
// the new owner. Nothing either of them acknowledged is lost.
func TestGaleraFencedAppend(t *testing.T) {
	g := galera(t)
	name := g.NewDatabase(t)
	ctx := context.Background()
	onA := clustertest.Open(t, g.Nodes[0].DSN(name))
	onB := clustertest.Open(t, g.Nodes[1].DSN(name))
	if _, err := schema.Migrate(ctx, onA); err != nil {
		t.Fatal(err)
	}
	// A round is one INSERT … SELECT in autocommit: the causal wait before
	// it (wsrep_sync_wait's INSERT bit, 4) is what BEGIN gave a transaction.
	for i, db := range []*sql.DB{onA, onB} {
		var wait int
		if err := db.QueryRowContext(ctx, "SELECT @@SESSION.wsrep_sync_wait").Scan(&wait); err != nil {
			t.Fatal(err)
		}
		if wait != 7 {
			t.Fatalf("node %d: the session's wsrep_sync_wait is %d, want 7 (causal reads, updates, deletes and inserts)", i, wait)
		}
	}
	var logs bytes.Buffer
	var logsMu sync.Mutex
	opts := mysqllog.Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logsMu}, nil))}

	const runs = 20
	var raced, retried int
	for run := range runs {
		res, err := onA.ExecContext(ctx, "INSERT INTO partitions (namespace, queue, partition_no, owner_node_id, epoch) VALUES ('f', 'q', ?, 'old', 1)", run)
		if err != nil {
			t.Fatal(err)
		}
		id64, _ := res.LastInsertId()
		id := uint64(id64)
		old, err := mysqllog.Open(ctx, onA, id, 1, opts)
		if err != nil {
			t.Fatal(err)
		}
		// The old owner appends, one record at a time, until it fails.
		acked := make(map[uint64]string)
		var oldErr error
		var appended atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				p := fmt.Sprintf("old-%d", i)
				lsn, err := old.Append([]wal.Entry{{Type: 1, Payload: []byte(p)}})
				if err == nil {
					err = old.Wait(ctx, lsn)
				}
				if err != nil {
					oldErr = err
					return
				}
				acked[lsn] = p
				appended.Add(1)
				if run == 0 && i == 4 {
					return // the first run: the new owner takes over in turn
				}
			}
		}()
		if run == 0 {
			<-done
		} else {
			eventually.True(t, "the old owner's first 5 appends", func() bool { return appended.Load() >= 5 })
		}
		// The coordinator moves the partition (through node B), and the new
		// owner opens it there and appends its fence; if the old owner's
		// row won that LSN, the new owner's log is fenced by it and it
		// reopens, as a member does.
		if _, err := onB.ExecContext(ctx, "UPDATE partitions SET owner_node_id = 'new', epoch = 2 WHERE id = ?", id); err != nil {
			t.Fatal(err)
		}
		var fenceLSN uint64
		for try := 0; ; try++ {
			nw, err := mysqllog.Open(ctx, onB, id, 2, opts)
			if err != nil {
				t.Fatal(err)
			}
			lsn, err := nw.Append([]wal.Entry{{Type: 2, Payload: []byte("new-fence")}})
			if err == nil {
				err = nw.Wait(ctx, lsn)
			}
			nw.Close()
			if err == nil {
				fenceLSN = lsn
				break
			}
			if !errors.Is(err, mysqllog.ErrFenced) || try == 5 {
				t.Fatalf("run %d: the new owner's fence: %v", run, err)
			}
			raced++
		}
		if run == 0 {
			// In turn: the old owner's next append is refused.
			lsn, err := old.Append([]wal.Entry{{Type: 1, Payload: []byte("old-late")}})
			if err == nil {
				err = old.Wait(ctx, lsn)
			}
			oldErr = err
		}
		<-done
		old.Close()
		if !errors.Is(oldErr, mysqllog.ErrFenced) {
			t.Fatalf("run %d: the deposed owner's append failed with %v, want mysqllog.ErrFenced", run, oldErr)
		}
		// Every acknowledged record is in the log, and the fence follows
		// them; nothing of the old owner's is after it.
		got := make(map[uint64]string)
		if err := queryEach(ctx, onB, partitionLogQuery, logEntries(mysqllog.DefaultMaxRecordBytes, func(lsn uint64, e wal.Entry) error {
			got[lsn] = string(e.Payload)
			return nil
		}), id); err != nil {
			t.Fatal(err)
		}
		for lsn, p := range acked {
			if got[lsn] != p {
				t.Errorf("run %d: the old owner's acknowledged lsn %d holds %q, want %q", run, lsn, got[lsn], p)
			}
			if lsn >= fenceLSN {
				t.Errorf("run %d: the old owner acknowledged lsn %d, at or after the new owner's fence at %d", run, lsn, fenceLSN)
			}
		}
		for lsn, p := range got {
			if lsn > fenceLSN || (lsn == fenceLSN && p != "new-fence") {
				t.Errorf("run %d: lsn %d holds %q, at or after the fence at lsn %d", run, lsn, p, fenceLSN)
			}
		}
	}
	logsMu.Lock()
	retried = strings.Count(logs.String(), "the database rolled the round back")
	logsMu.Unlock()
	t.Logf("%d runs: every deposed owner's append refused as fenced; %d rounds rolled back by Galera (certification failure or brute-force abort, 1213) and retried; %d times the new owner's fence lost its LSN to the old owner's row and it reopened",
		runs, retried, raced)
}

// lockedWriter is an io.Writer over a buffer shared by goroutines.
type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// prober asks one node, and only that one, for a submit every few
// milliseconds, and records the longest time between two answered ones
// (test clock: a figure for the note, not an assertion) and every
// /readyz answer that was not 200.
type prober struct {
	node       *clNode
	mu         sync.Mutex
	lastOK     time.Time
	longest    time.Duration
	longestEnd time.Time
	notReady   int
	failures   int
}

func (c *clTest) startProbes(ctx context.Context) ([]*prober, *sync.WaitGroup) {
	c.extraQueues++ // probe/p
	var wg sync.WaitGroup
	var ps []*prober
	for _, n := range c.nodes {
		p := &prober{node: n, lastOK: time.Now()}
		ps = append(ps, p)
		client := tenurev1connect.NewTaskServiceClient(&http.Client{Timeout: 30 * time.Second}, n.url(), connect.WithProtoJSON())
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, err := client.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{
					Namespace: "probe", Queue: "p", Payload: []byte("x"), RequestId: fmt.Sprintf("probe-%s-%d", n.id, i),
				}))
				now := time.Now()
				p.mu.Lock()
				if err == nil {
					if gap := now.Sub(p.lastOK); gap > p.longest {
						p.longest, p.longestEnd = gap, now
					}
					p.lastOK = now
				} else if ctx.Err() == nil {
					p.failures++
				}
				p.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
		wg.Go(func() {
			for ctx.Err() == nil {
				if code, err := c.health(n); err == nil && code != http.StatusOK {
					p.mu.Lock()
					p.notReady++
					p.mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	return ps, &wg
}

// TestGaleraKillDBNode kills -9 the Galera node under n1 while submitters
// and workers run on all three tenure nodes, then brings it back (it
// rejoins by a state transfer, its donor desynced meanwhile). n2 and n3,
// on the surviving Galera nodes, must keep serving throughout: their
// /readyz never answers anything but 200 (the longest time between two
// answered submits on each node is logged). n1 moves to another Galera
// node of its list and serves again. Every acknowledgement must survive
// and no task may have two accepted commits.
func TestGaleraKillDBNode(t *testing.T) {
	g := galera(t)
	c := newGaleraClTest(t, g, g.NewDatabase(t))
	for _, n := range c.nodes {
		c.start(n, true)
	}
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	pctx, stopProbes := context.WithCancel(context.Background())
	probes, probing := c.startProbes(pctx)
	t.Cleanup(func() { stopProbes(); probing.Wait() })
	ld.waitAcks(clPreAcks/4, clLoadWait)

	c.phase.Store(1)
	killedAt := ld.l.acks.Load()
	g.Nodes[0].Kill()
	t.Logf("killed -9 Galera node 0 (%s), n1's database, after %d acknowledgements", g.Nodes[0].Addr(), killedAt)
	for i := 1; i < 3; i++ {
		if err := g.WaitSynced(i, 2); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the surviving Galera nodes evicted it (cluster size 2)")
	c.poll("n1 serving again, on another Galera node", func() (bool, error) {
		code, err := c.health(c.nodes[0])
		return code == http.StatusOK, err
	})
	ld.progress("with one Galera node dead", clPostAcks)

	c.phase.Store(2)
	if err := g.Rejoin(0); err != nil {
		t.Fatal(err)
	}
	rejoined := time.Now()
	t.Logf("Galera node 0 rejoined (state transfer by rsync); all three synced")
	ld.progress("after the Galera node rejoined", clPostAcks)
	c.waitFailback(g, rejoined)
	ld.progress("after every node moved back to its first database", clPostAcks)
	stopProbes()
	probing.Wait()

	for i, p := range probes {
		where := "its Galera node killed"
		if i > 0 {
			where = "on a surviving Galera node"
		}
		t.Logf("%s (%s): longest time between two answered submits %v (ended %s); %d unanswered submits; %d non-200 /readyz answers",
			p.node.id, where, p.longest.Round(time.Millisecond), p.longestEnd.Format(time.TimeOnly+".000"), p.failures, p.notReady)
		if i > 0 && p.notReady > 0 {
			t.Errorf("%s, on a surviving Galera node, answered /readyz with non-200 %d times: it stopped serving", p.node.id, p.notReady)
		}
	}
	for _, n := range c.nodes {
		downs := logLines(n.proc.out.String(), "no longer the coordinator")
		t.Logf("%s: stepped down as coordinator %d times", n.id, len(downs))
	}
	ld.stop()
	ld.report()
	c.verify(led, 1, c.ids())
	c.checkStatus(c.ids())
}

// Log messages of a node's moves between the databases of its --mysql
// list.
const (
	msgDBMoved     = "cluster database: moved to another database of the list"
	msgDBMovedBack = "cluster database: moved back to a database earlier in the list"
)

// waitFailback waits until every tenure node of c has all its
// connections on its first Galera node again (node i on Galera node i:
// the server list of each process, as the database's process lists show
// them) and checks that each logged every move with where from, where to
// and why: n1 away from its killed database and back, any node on the
// state transfer's donor away from it and back. The nodes move back once
// their first database has passed every readiness check for
// --mysql-failback-after (30 s by default) and their pools' idle
// connections to the other server have expired (4 s): the wait is bounded
// by that plus a margin for a loaded machine (not an assertion of speed;
// the times are logged).
func (c *clTest) waitFailback(g *clustertest.Galera, rejoined time.Time) {
	t := c.t
	t.Helper()
	name := c.dsn[strings.LastIndexByte(c.dsn, '/')+1:]
	dbs := make([]*sql.DB, len(g.Nodes))
	for j, s := range g.Nodes {
		dbs[j] = clustertest.Open(t, s.DSN(name))
	}
	// misplaced lists the connections of tenure nodes that are not on the
	// node's first Galera node.
	misplaced := func() ([]string, error) {
		var out []string
		for j, db := range dbs {
			rows, err := db.Query("SELECT HOST FROM information_schema.PROCESSLIST WHERE DB = ?", name)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var host string
				if err := rows.Scan(&host); err != nil {
					rows.Close()
					return nil, err
				}
				if i := c.node(c.nodeOfHost(host)); i >= 0 && i != j {
					out = append(out, fmt.Sprintf("%s on Galera node %d", c.nodes[i].id, j))
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var last []string
	eventually.NoError(t, fmt.Sprintf("the tenure nodes back on their first databases once the killed one rejoined (failback after %v)", cluster.DefaultFailbackAfter), func() error {
		m, err := misplaced()
		if err != nil {
			return err
		}
		if len(m) > 0 {
			last = m
			return fmt.Errorf("still elsewhere: %v", m)
		}
		return nil
	})
	t.Logf("every tenure node has all its connections on its first Galera node %v after the killed one rejoined (last seen elsewhere: %v)",
		time.Since(rejoined).Round(100*time.Millisecond), last)

	for i, n := range c.nodes {
		first := g.Nodes[i].Addr()
		out := n.proc.out.String()
		var moves []clLogLine
		for _, msg := range []string{msgDBMoved, msgDBMovedBack} {
			moves = append(moves, logLines(out, msg)...)
		}
		for _, m := range moves {
			if m.From == "" || m.To == "" || m.Why == "" || m.From == m.To {
				t.Errorf("%s logged a move without where from, where to or why: %+v", n.id, m)
			}
		}
		away, back := logLines(out, msgDBMoved), logLines(out, msgDBMovedBack)
		if i == 0 && (len(away) == 0 || away[0].From != first) {
			t.Errorf("%s: moves away %+v; want a first one from its killed database %s", n.id, away, first)
		}
		if len(away) > 0 && (len(back) == 0 || back[len(back)-1].To != first) {
			t.Errorf("%s moved away from its first database %s (%+v) and did not log its move back (%+v)", n.id, first, away, back)
		}
		for _, m := range back {
			t.Logf("%s moved back from %s to %s: %s", n.id, m.From, m.To, m.Why)
		}
		for _, m := range away {
			t.Logf("%s moved from %s to %s: %s", n.id, m.From, m.To, m.Why)
		}
	}
}

// TestClusterManagedPrimaryFailover stands for a managed database with
// failover: the cluster's one MariaDB server dies (kill -9) and comes back
// at the same address; then it dies again and a copy of its data (a
// replica promoted) starts at another address, the second of the nodes'
// --mysql list. The nodes stop serving while no database answers and
// resume by themselves, without a restart; every acknowledgement survives.
func TestClusterManagedPrimaryFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster e2e: a database server of the test's own and three server processes; skipped with -short")
	}
	clustertest.SkipWithoutMariaDB(t)
	const primaryPort, replicaPort = 3310, 3311
	m, err := clustertest.StartMariaDB(primaryPort, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d,127.0.0.1:%d)/managed", primaryPort, replicaPort)
	if err := cluster.CreateDatabase(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	c := &clTest{t: t, dsn: dsn, db: clustertest.Open(t, dsn), hc: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.hc.CloseIdleConnections)
	for i := range clNodes {
		n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn}
		c.nodes = append(c.nodes, n)
		c.start(n, true)
	}
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	outage := func(what string, bringBack func()) {
		t.Helper()
		pids := make([]int, len(c.nodes))
		for i, n := range c.nodes {
			pids[i] = n.proc.cmd.Process.Pid
		}
		at := ld.l.acks.Load()
		m.Primary.Kill()
		c.poll("every node stops serving while no database answers", func() (bool, error) {
			for _, n := range c.nodes {
				if code, err := c.health(n); err != nil || code == http.StatusOK {
					return false, err
				}
			}
			return true, nil
		})
		t.Logf("%s: killed -9 the database after %d acknowledgements; every node answers /readyz 503", what, at)
		bringBack()
		c.poll("every node serving again", func() (bool, error) {
			for _, n := range c.nodes {
				if code, err := c.health(n); err != nil || code != http.StatusOK {
					return false, err
				}
			}
			return true, nil
		})
		for i, n := range c.nodes {
			if n.proc.exited() || n.proc.cmd.Process.Pid != pids[i] {
				t.Fatalf("%s: node %s was restarted or exited; it must resume by itself", what, n.id)
			}
		}
		ld.progress(what+": after the database came back", clPostAcks)
	}
	c.phase.Store(1)
	outage("the same address after a restart", func() {
		if err := m.Primary.Restart(); err != nil {
			t.Fatal(err)
		}
	})
	c.phase.Store(2)
	outage("a replica promoted at another address", func() {
		r, err := m.Promote(m.Primary, replicaPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("promoted a copy of the primary's data at %s", r.Addr())
	})
	for _, n := range c.nodes {
		t.Logf("%s: moved to another database of its list %d times", n.id, len(logLines(n.proc.out.String(), msgDBMoved)))
	}
	ld.stop()
	ld.report()
	c.verify(led, 0, c.ids())
	c.checkStatus(c.ids())
}

// TestGaleraBench runs `tenure bench --addr` over three nodes on the Galera
// cluster and over three nodes on the shared single MariaDB, one after the
// other, and logs both summaries (BENCHMARKS.md, "Cluster mode on
// Galera"). Only with TENURE_BENCH_GALERA set: it measures, it checks
// nothing.
func TestGaleraBench(t *testing.T) {
	measurement(t, "TENURE_BENCH_GALERA")
	tasks := os.Getenv("TENURE_BENCH_TASKS")
	if tasks == "" {
		tasks = "20000"
	}
	g := galera(t)
	single := clustertest.NewDatabase(t)
	for _, setup := range []struct {
		name string
		dsn  func(i int) string
	}{
		{"three nodes on Galera (each on its own Galera node)", func(i int) string { return g.DSN(g.NewDatabase(t), i) }},
		{"three nodes on one MariaDB", func(int) string { return single }},
	} {
		c := &clTest{t: t, hc: &http.Client{Timeout: 2 * time.Second}}
		var urls []string
		dsn0 := setup.dsn(0)
		for i := range clNodes {
			dsn := dsn0
			if i > 0 && strings.Contains(dsn0, ",") {
				dsn = rotateDSN(dsn0, i)
			}
			n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn, timing: galeraTiming, extra: []string{"--partitions", "8"}}
			c.nodes = append(c.nodes, n)
			c.start(n, true)
			urls = append(urls, n.url())
		}
		out, err := exec.Command(tenureBin, "bench", "--addr", strings.Join(urls, ","), "--tasks", tasks, "--json", "--quiet").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: tenure bench: %v\n%s", setup.name, err, out)
		}
		t.Logf("%s: tenure bench --addr %s --tasks %s --json:\n%s", setup.name, strings.Join(urls, ","), tasks, out)
		for _, n := range c.nodes {
			n.proc.cmd.Process.Signal(syscall.SIGTERM)
			waitProcExit(t, n.proc)
		}
	}
}

// rotateDSN lists the addresses of a DSN's tcp(…) list from the i-th on.
func rotateDSN(dsn string, i int) string {
	open := strings.Index(dsn, "tcp(") + len("tcp(")
	end := open + strings.IndexByte(dsn[open:], ')')
	addrs := strings.Split(dsn[open:end], ",")
	addrs = append(addrs[i%len(addrs):], addrs[:i%len(addrs)]...)
	return dsn[:open] + strings.Join(addrs, ",") + dsn[end:]
}
