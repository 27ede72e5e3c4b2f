package e2e

// What the cluster tests read of the database: the cluster's tables (the
// coordinator lock, the partitions, the nodes), the open transactions and
// who holds them, and the nodes' JSON logs. Every time is the database's.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/wal"
)

// clLock is the coordinator lock's row. Every time is the database's.
type clLock struct {
	owner   string
	epoch   uint64
	expires time.Time // TIMESTAMP: whole seconds
	updated time.Time // the row's last write; DATETIME: whole seconds
	now     time.Time // the database's NOW(6) when it was read
}

func (c *clTest) lock() (clLock, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	var l clLock
	err := c.db.QueryRowContext(ctx, `SELECT owner_id, epoch, expires_at, updated_at, NOW(6)
		FROM helix_locks WHERE lock_key = 'coordinator_lock' AND status = 1`).
		Scan(&l.owner, &l.epoch, &l.expires, &l.updated, &l.now)
	if errors.Is(err, sql.ErrNoRows) {
		return l, false, nil
	}
	return l, err == nil, err
}

// heldLockAndParts reads the coordinator lock, which must be held, and
// the partitions; it fails the test if it cannot.
func (c *clTest) heldLockAndParts() (clLock, map[uint64]clPart) {
	c.t.Helper()
	lk, ok, err := c.lock()
	if err != nil || !ok {
		c.t.Fatalf("reading the coordinator lock: %v (held: %v)", err, ok)
	}
	ps, err := c.parts()
	if err != nil {
		c.t.Fatal(err)
	}
	return lk, ps
}

// ownerButCoordinator is the index of a node other than lk's coordinator
// that owns partitions of ps: the owner of the first of prefer that such a
// node owns, else the first node that owns any. It fails the test when
// the coordinator owns them all.
func (c *clTest) ownerButCoordinator(lk clLock, ps map[uint64]clPart, prefer ...uint64) int {
	c.t.Helper()
	for _, p := range prefer {
		if o := ps[p].owner; o != lk.owner && o != "" {
			return c.node(o)
		}
	}
	for i, n := range c.nodes {
		if n.id != lk.owner && len(ownedBy(ps, n.id)) > 0 {
			return i
		}
	}
	c.t.Fatalf("no node but the coordinator %s owns partitions: %s", lk.owner, describe(ps))
	return -1
}

// clPart is a row of the partitions table.
type clPart struct {
	id      uint64
	key     string // namespace/queue/partition_no, as the nodes log it
	owner   string
	epoch   uint64
	updated time.Time // TIMESTAMP(6), the database's
}

func (c *clTest) parts() (map[uint64]clPart, error) {
	out := make(map[uint64]clPart)
	err := c.queryEach(`SELECT id, namespace, queue, partition_no, COALESCE(owner_node_id, ''), epoch, updated_at FROM partitions`, func(rows *sql.Rows) error {
		var p clPart
		var ns, q string
		var no uint32
		if err := rows.Scan(&p.id, &ns, &q, &no, &p.owner, &p.epoch, &p.updated); err != nil {
			return err
		}
		p.key = fmt.Sprintf("%s/%s/%d", ns, q, no)
		out[p.id] = p
		return nil
	})
	return out, err
}

// queryEach runs query (with args) on the test's database, within the
// call timeout, and calls scan for each row it returns.
func (c *clTest) queryEach(query string, scan func(*sql.Rows) error, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	return queryEach(ctx, c.db, query, scan, args...)
}

// queryEach runs query (with args) on db and calls scan for each row it
// returns.
func queryEach(ctx context.Context, db *sql.DB, query string, scan func(*sql.Rows) error, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// partitionLogQuery selects the rows of a partition's log, in order.
const partitionLogQuery = "SELECT lsn, type, payload FROM partition_log WHERE partition_id = ? ORDER BY lsn"

// logEntries is a scan of the rows of partitionLogQuery: it calls fn with
// each entry of each row (mysqllog.RowRecords).
func logEntries(maxRecordBytes int, fn func(lsn uint64, e wal.Entry) error) func(*sql.Rows) error {
	return func(rows *sql.Rows) error {
		var lsn uint64
		var typ uint16
		var payload []byte
		if err := rows.Scan(&lsn, &typ, &payload); err != nil {
			return err
		}
		return mysqllog.RowRecords(lsn, typ, payload, maxRecordBytes, fn)
	}
}

// ownedBy returns the partitions of ps that id owns.
func ownedBy(ps map[uint64]clPart, id string) map[uint64]clPart {
	out := make(map[uint64]clPart)
	for k, p := range ps {
		if p.owner == id {
			out[k] = p
		}
	}
	return out
}

// movedTo is the partitions of was as ps shows them once every one has
// moved to an owner that to accepts, at a higher epoch than in was; nil
// while one has not.
func movedTo(ps, was map[uint64]clPart, to func(owner string) bool) map[uint64]clPart {
	moved := make(map[uint64]clPart)
	for id, w := range was {
		p := ps[id]
		if !to(p.owner) || p.epoch <= w.epoch {
			return nil
		}
		moved[id] = p
	}
	return moved
}

// clNodeRow is a row of the nodes table.
type clNodeRow struct {
	active        bool
	lastHeartbeat time.Time // the database's
}

func (c *clTest) nodeRows() (map[string]clNodeRow, error) {
	out := make(map[string]clNodeRow)
	err := c.queryEach(`SELECT node_id, status, last_heartbeat FROM nodes`, func(rows *sql.Rows) error {
		var id string
		var status int
		var r clNodeRow
		if err := rows.Scan(&id, &status, &r.lastHeartbeat); err != nil {
			return err
		}
		r.active = status == 1
		out[id] = r
		return nil
	})
	return out, err
}

// partsAndNodes reads the partitions and the nodes table.
func (c *clTest) partsAndNodes() (map[uint64]clPart, map[string]clNodeRow, error) {
	ps, err := c.parts()
	if err != nil {
		return nil, nil, err
	}
	nodes, err := c.nodeRows()
	return ps, nodes, err
}

// waitRejoined waits until node n is healthy, active and owns partitions
// again, and returns them.
func (c *clTest) waitRejoined(what string, n *clNode) map[uint64]clPart {
	c.t.Helper()
	var back map[uint64]clPart
	c.poll(what, func() (bool, error) {
		if code, err := c.health(n); err != nil || code != http.StatusOK {
			return false, err
		}
		ps, nodes, err := c.partsAndNodes()
		if err != nil || !nodes[n.id].active {
			return false, err
		}
		back = ownedBy(ps, n.id)
		return len(back) > 0, nil
	})
	return back
}

// waitBalanced waits until the queue's partitions exist and are all owned
// by active nodes of live, each of which owns one at least (balance: the
// counts differ by at most one), and returns them.
func (c *clTest) waitBalanced(what string, live []string) map[uint64]clPart {
	c.t.Helper()
	var got map[uint64]clPart
	c.poll(what, func() (bool, error) {
		ps, nodes, err := c.partsAndNodes()
		if err != nil {
			return false, err
		}
		if len(ps) != c.partitionCount() {
			return false, nil
		}
		count := make(map[string]int)
		for _, p := range ps {
			if !slices.Contains(live, p.owner) || !nodes[p.owner].active {
				return false, nil
			}
			count[p.owner]++
		}
		lo, hi := math.MaxInt, 0
		for _, id := range live {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if lo == 0 || hi-lo > 1 {
			return false, nil
		}
		got = ps
		return true, nil
	})
	return got
}

// describe is "key owner@epoch, …" for logs.
func describe(ps map[uint64]clPart) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%s %s@%d", p.key, p.owner, p.epoch))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// clStatus is what the tests read of `tenure cluster status --json`.
type clStatus struct {
	Coordinator *clStatusCoordinator `json:"coordinator"`
	Nodes       []struct {
		NodeID      string `json:"node_id"`
		Active      bool   `json:"active"`
		Partitions  int    `json:"partitions"`
		Eligible    bool   `json:"eligible"`
		Eligibility string `json:"eligibility"`
	} `json:"nodes"`
	Partitions  int `json:"partitions"`
	Unassigned  int `json:"unassigned"`
	OwnedByGone int `json:"owned_by_inactive_or_unknown"`
}

type clStatusCoordinator struct {
	NodeID string `json:"node_id"`
	Epoch  uint64 `json:"epoch"`
	Live   bool   `json:"live"`
}

// clusterStatusJSON runs `tenure cluster status --json` on the database.
func clusterStatusJSON(t *testing.T, dsn string) clStatus {
	t.Helper()
	code, out, errs := cli(t, "cluster", "status", "--mysql", dsn, "--json")
	if code != 0 {
		t.Fatalf("tenure cluster status --json: exit %d: %s", code, errs)
	}
	var st clStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("tenure cluster status --json printed %q: %v", out, err)
	}
	return st
}

// checkStatus runs `tenure cluster status --json` and checks that the
// cluster has settled on live: a live coordinator among them, every
// partition owned by an active node, the live nodes active.
func (c *clTest) checkStatus(live []string) {
	t := c.t
	t.Helper()
	st := clusterStatusJSON(t, c.dsn)
	if co := st.Coordinator; co == nil || !co.Live || !slices.Contains(live, co.NodeID) {
		t.Errorf("cluster status: coordinator %+v, want a live lock held by one of %v", co, live)
	}
	if st.Partitions != c.partitionCount() || st.Unassigned != 0 || st.OwnedByGone != 0 {
		t.Errorf("cluster status: %d partitions, %d unassigned, %d owned by inactive nodes; want %d, 0, 0", st.Partitions, st.Unassigned, st.OwnedByGone, c.partitionCount())
	}
	active := 0
	var desc []string
	for _, n := range st.Nodes {
		if n.Active && slices.Contains(live, n.NodeID) {
			active++
		}
		desc = append(desc, fmt.Sprintf("%s active=%v partitions=%d", n.NodeID, n.Active, n.Partitions))
	}
	if active != len(live) {
		t.Errorf("cluster status: nodes %v; want %v active", desc, live)
	}
	co := st.Coordinator
	if co == nil {
		co = &clStatusCoordinator{}
	}
	t.Logf("cluster status: coordinator %s at epoch %d; nodes: %s", co.NodeID, co.Epoch, strings.Join(desc, "; "))
}

// ---- Open transactions: who in the database holds what -----------------

// clTrx is an open InnoDB transaction of a connection to the test's
// database, as SHOW ENGINE INNODB STATUS describes it. (MariaDB's
// information_schema.INNODB_TRX and INNODB_LOCK_WAITS answered stale rows
// in these tests.)
type clTrx struct {
	thread  uint64
	host    string        // the connection's client address
	node    string        // the node whose connection runs it ("the test"; "" if none)
	active  time.Duration // open this long (whole seconds)
	rows    int           // row locks it holds
	waiting time.Duration // how long it has waited for a lock; 0: not waiting
	lock    string        // the lock it waits for
	query   string        // its statement running now; "" while idle in it
}

func (x clTrx) String() string {
	who := x.node
	if who == "" {
		who = x.host + ", a connection no process holds open any more (its client gave up on it)"
	}
	s := fmt.Sprintf("thread %d of %s, open %v, %d row locks", x.thread, who, x.active, x.rows)
	if x.waiting > 0 {
		s += fmt.Sprintf(", waiting %v for %s", x.waiting.Round(time.Millisecond), x.lock)
	}
	if x.query == "" {
		return s + ", idle in the transaction"
	}
	q := strings.Join(strings.Fields(x.query), " ")
	if len(q) > 140 {
		q = q[:140] + "…"
	}
	return s + ", running " + q
}

var (
	reTrxThread = regexp.MustCompile(`(?:MariaDB|MySQL) thread id (\d+),[^\n]*`)
	reTrxActive = regexp.MustCompile(`ACTIVE (?:\(PREPARED\) )?(\d+) sec`)
	reTrxRows   = regexp.MustCompile(`(\d+) row lock\(s\)`)
	reTrxWait   = regexp.MustCompile(`TRX HAS BEEN WAITING (\d+) us`)
	reTrxLock   = regexp.MustCompile(`RECORD LOCKS .*? index (\S+) of table (\S+) trx id \d+ ([^\n]*)`)
)

// openTrx returns the open transactions of the connections to the test's
// database.
func (c *clTest) openTrx() ([]clTrx, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	hosts := make(map[uint64]string)
	if err := queryEach(ctx, c.db, "SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = DATABASE()", func(rows *sql.Rows) error {
		var id uint64
		var host string
		err := rows.Scan(&id, &host)
		hosts[id] = host
		return err
	}); err != nil {
		return nil, err
	}
	var typ, name, status string
	if err := c.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return nil, err
	}
	_, list, _ := strings.Cut(status, "LIST OF TRANSACTIONS FOR EACH SESSION:")
	var out []clTrx
	for _, block := range strings.Split(list, "\n---TRANSACTION ")[1:] {
		block, _, _ = strings.Cut(block, "\n--------\n") // the next section
		th := reTrxThread.FindStringSubmatchIndex(block)
		act := reTrxActive.FindStringSubmatch(block)
		if th == nil || act == nil { // not started
			continue
		}
		thread, _ := strconv.ParseUint(block[th[2]:th[3]], 10, 64)
		host, ours := hosts[thread]
		if !ours {
			continue
		}
		secs, _ := strconv.Atoi(act[1])
		x := clTrx{thread: thread, host: host, node: c.nodeOfHost(host), active: time.Duration(secs) * time.Second}
		if m := reTrxRows.FindStringSubmatch(block); m != nil {
			x.rows, _ = strconv.Atoi(m[1])
		}
		if m := reTrxWait.FindStringSubmatch(block); m != nil {
			us, _ := strconv.ParseInt(m[1], 10, 64)
			x.waiting = time.Duration(us) * time.Microsecond
			if l := reTrxLock.FindStringSubmatch(block); l != nil {
				x.lock = fmt.Sprintf("%s (index %s): %s", l[2], l[1], l[3])
			}
		}
		// The statement follows the thread's line, up to the lock details.
		var q []string
		for line := range strings.Lines(block[th[1]:]) {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "------") || strings.HasPrefix(line, "Trx read view") || strings.HasPrefix(line, "RECORD LOCKS") || strings.HasPrefix(line, "TABLE LOCK") {
				break
			}
			if line != "" {
				q = append(q, line)
			}
		}
		x.query = strings.Join(q, " ")
		out = append(out, x)
	}
	return out, nil
}

// nodeOfHost returns the node whose process has the TCP connection that
// the database sees from host ("127.0.0.1:port"), found in Linux's /proc:
// "the test" for the test's own, "" if no process of the test has it
// (any more).
func (c *clTest) nodeOfHost(host string) string {
	i := strings.LastIndex(host, ":")
	if i < 0 {
		return ""
	}
	port, err := strconv.ParseUint(host[i+1:], 10, 16)
	if err != nil {
		return ""
	}
	for _, n := range c.nodes {
		if n.proc != nil && !n.proc.exited() && hasLocalPort(n.proc.cmd.Process.Pid, port) {
			return n.id
		}
	}
	if hasLocalPort(os.Getpid(), port) {
		return "the test"
	}
	return ""
}

// hasLocalPort reports whether process pid has a TCP socket open on local
// port port (Linux /proc; false where it cannot tell).
func hasLocalPort(pid int, port uint64) bool {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	sockets := make(map[string]bool)
	for _, fd := range fds {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			sockets[strings.TrimSuffix(inode, "]")] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line) // sl local_address rem_address st … inode
			if len(f) < 10 || !sockets[f[9]] {
				continue
			}
			if _, hexPort, ok := strings.Cut(f[1], ":"); ok {
				if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && p == port {
					return true
				}
			}
		}
	}
	return false
}

// heldBy returns n's open transactions that hold row locks while idle:
// they wait for n's next statement.
func (c *clTest) heldBy(n *clNode) []clTrx {
	all, err := c.openTrx()
	if err != nil {
		c.t.Logf("reading the open transactions: %v", err)
		return nil
	}
	var out []clTrx
	for _, x := range all {
		if x.node == n.id && x.rows > 0 && x.query == "" && x.waiting == 0 {
			out = append(out, x)
		}
	}
	return out
}

// freezeMidWrite sends n SIGSTOP, preferably at a moment when it is inside
// a database transaction holding row locks, so that it stays frozen
// holding them, as a process paused in the middle of a write does. A
// partition log's round is one statement in autocommit, which holds its
// locks only while the server runs it, so what it can catch is one of the
// writes of several statements (a snapshot's save, a compaction, the
// coordinator's allocation); under the test's load it mostly catches none. It tries up to 200 times, sending SIGCONT in
// between (pauses of some 40 ms, far inside the trust window), and returns
// the transactions it froze inside: none if it never caught one, and then
// n is frozen all the same. With TENURE_E2E_FREEZE_ANYTIME set it freezes
// n once, wherever it is.
func (c *clTest) freezeMidWrite(n *clNode) (held []clTrx, tries int) {
	t := c.t
	t.Helper()
	anytime := os.Getenv("TENURE_E2E_FREEZE_ANYTIME") != ""
	for tries = 1; ; tries++ {
		if err := n.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s: %v", n.id, err)
		}
		// Statements it sent before it stopped run to their end.
		time.Sleep(20 * time.Millisecond)
		if anytime {
			return c.heldBy(n), tries
		}
		if len(c.heldBy(n)) > 0 {
			time.Sleep(20 * time.Millisecond)
			if held = c.heldBy(n); len(held) > 0 {
				return held, tries
			}
		}
		if tries == 200 {
			return nil, tries
		}
		if err := n.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT %s: %v", n.id, err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
}

// lockStalled reports, failing the test (without stopping it), whether by
// the database's clock the coordinator lock has been expired for longer
// than a live node needs to take it (TTL + one standby check + 1 s for
// whole seconds) while node frozen is stopped: the live nodes can neither
// renew nor take it. The message shows the transactions open on the
// test's database.
func (c *clTest) lockStalled(frozen *clNode) bool {
	t := c.t
	t.Helper()
	lk, ok, err := c.lock()
	if err != nil || !ok {
		return false
	}
	bound := clLockTTL + clStandby + time.Second
	if lk.now.Sub(lk.expires) <= bound {
		return false
	}
	trx, err := c.openTrx()
	var desc []string
	for _, x := range trx {
		desc = append(desc, "\n  "+x.String())
	}
	if err != nil {
		desc = append(desc, "\n  (reading them: "+err.Error()+")")
	}
	var timeout int
	_ = c.db.QueryRow("SELECT @@innodb_lock_wait_timeout").Scan(&timeout)
	t.Errorf("BUG: while %s is frozen (SIGSTOP), the coordinator lock of %s (epoch %d) has been expired for %v by the database's clock, "+
		"longer than a live node needs to take it (TTL + standby check + 1 s = %v): the two live nodes can neither renew nor take it, "+
		"so the frozen node's partitions cannot move. The transactions open on the test's database (innodb_lock_wait_timeout %d s):%s",
		frozen.id, lk.owner, lk.epoch, lk.now.Sub(lk.expires).Round(time.Millisecond), bound, timeout, strings.Join(desc, ""))
	return true
}

// ---- Node logs ------------------------------------------------------------

// clLogLine is what the tests read of a node's JSON log line.
type clLogLine struct {
	Msg       string `json:"msg"`
	Partition string `json:"partition"`
	Epoch     uint64 `json:"epoch"`
	Reason    string `json:"reason"`
	// A move from one database of the --mysql list to another.
	From string `json:"from"`
	To   string `json:"to"`
	Why  string `json:"why"`
}

// logLines parses the JSON log lines of out whose msg is msg.
func logLines(out, msg string) []clLogLine {
	var got []clLogLine
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var l clLogLine
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			got = append(got, l)
		}
	}
	return got
}
