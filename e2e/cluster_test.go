package e2e

// Acceptance tests of cluster mode with real processes. Three `tenure server
// --mysql` nodes share one MariaDB database of the test's own
// (clustertest.NewDatabase); submitters and workers spread over all three
// nodes drive them over JSON and gRPC (the ack ledger of kill9_test.go) while
// one node is killed, frozen, cut off from the database or restarted. At
// the end every acknowledged submit, commit and completion must be there
// (verifyAcks) and no task may have two accepted commits
// (checkTaskConsistent, and the ledger itself while it records).
//
// A fault that stalls the cluster is reported with what the database shows
// (the open transactions and their lock waits, each named by the node
// whose connection runs it), and the test then checks that nothing
// acknowledged was lost all the same.
//
// No assertion reads the test's clock. The times that matter (a lock's
// expiry and its takeover, a node's last heartbeat and the move of its
// partitions) are the database's, read from its tables; orderings are
// observed in one polling loop; the deadlines of the polls only stop a hung
// test.
//
// This file holds the cluster the tests run (clTest) and how its nodes
// start; cluster_db_test.go reads the cluster's tables and the database's
// open transactions, cluster_load_test.go drives the load through every
// node and verifies it. Each test of a fault has a file of its own.

import (
	"crypto/tls"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/eventually"
)

// The cluster every test runs, and the bounds of its phases.
const (
	clNodes      = 3
	clNamespace  = "cl"
	clQueue      = "load"
	clPartitions = 4
	clLockTTL    = 3 * time.Second
	clStandby    = 100 * time.Millisecond
	clHeartbeat  = 200 * time.Millisecond
	clSilence    = 2 * time.Second
	clAssign     = 100 * time.Millisecond
	clProbe      = 200 * time.Millisecond

	// Acknowledgements the load gathers before a fault and after the
	// recovery. clLoadWait bounds the first when the machine is slower than
	// assumed (not an assertion); the second must come within
	// eventually.Deadline, or the cluster does not serve any more.
	clPreAcks  = 1000
	clPostAcks = 500
	clLoadWait = 8 * time.Second
)

// clNode is one node of the test cluster: a process, restarted with the
// same id and address.
type clNode struct {
	id   string
	addr string
	dsn  string // its database: the test's, or the same through a proxy
	proc *serverProc
	// extra are flags added to the node's command line.
	extra []string
	// timing replaces clTiming's flags when set.
	timing []string
	// clientTLS, if set, is how clients reach the node: over HTTPS, with
	// this configuration (a Clone per transport).
	clientTLS *tls.Config
}

// clTiming are the timing flags of the test cluster: fast, so that a
// fault plays out within seconds on a single database.
var clTiming = []string{
	"--lock-ttl", clLockTTL.String(),
	"--standby-check", clStandby.String(),
	"--node-heartbeat", clHeartbeat.String(),
	"--node-silence", clSilence.String(),
	"--assign-interval", clAssign.String(),
	"--node-probe-interval", clProbe.String(),
}

func (n *clNode) url() string {
	if n.clientTLS != nil {
		return "https://" + n.addr
	}
	return "http://" + n.addr
}

func (n *clNode) args() []string {
	timing := n.timing
	if timing == nil {
		timing = clTiming
	}
	args := []string{"server",
		"--mysql", n.dsn,
		"--node-id", n.id,
		"--listen", n.addr,
		"--partitions", strconv.Itoa(clPartitions),
		"--log-format", "json",
	}
	args = append(args, timing...)
	return append(args, n.extra...)
}

// clTest is a running three-node cluster and what the test observed of it.
type clTest struct {
	t     *testing.T
	dsn   string
	db    *sql.DB // the test's own pool, never through a proxy
	nodes []*clNode
	hc    *http.Client // for /readyz

	// phase is set by a test around a fault; every acknowledgement notes
	// the phase its call was sent and answered in.
	phase   atomic.Int32
	tap     syncList[ackRec]
	retries atomic.Int64 // unavailable answers retried
	moves   atomic.Int64 // clients that moved to another node
	// unavailable keeps the first unavailable answers retried in each
	// phase (the phase the call was sent in): what made a partition
	// unreachable.
	unavailable struct {
		mu   sync.Mutex
		msgs map[int32][]string
	}
	// extraQueues counts the queues a test submits to besides the load's.
	extraQueues int
}

// partitionCount is how many partitions the test's queues have.
func (c *clTest) partitionCount() int { return clPartitions * (1 + c.extraQueues) }

// newClTest starts three nodes, n1 to n3, on a fresh database. Node
// proxied (an index; -1 for none) reaches the database through a
// clustertest proxy, which is returned.
func newClTest(t *testing.T, proxied int) (*clTest, *clustertest.Proxy) {
	if testing.Short() {
		t.Skip("cluster e2e: three server processes under load; skipped with -short")
	}
	dsn := clustertest.NewDatabase(t) // skips without MySQL, fails under CI
	c := &clTest{t: t, dsn: dsn, db: clustertest.Open(t, dsn), hc: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.hc.CloseIdleConnections)
	var proxy *clustertest.Proxy
	for i := range clNodes {
		n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn}
		if i == proxied {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			proxy = clustertest.NewProxy(t, cfg.Addr)
			n.dsn = clustertest.DSNVia(dsn, proxy.Addr())
		}
		c.nodes = append(c.nodes, n)
		c.start(n, true)
	}
	c.waitEligible(c.ids())
	return c, proxy
}

// waitEligible waits until every node of ids is eligible for partitions
// (the others reach it), so that a queue created next spreads over them
// from its first submit.
func (c *clTest) waitEligible(ids []string) {
	c.t.Helper()
	c.poll(fmt.Sprintf("nodes %v eligible for partitions", ids), func() (bool, error) {
		el, err := c.eligible()
		if err != nil {
			return false, err
		}
		for _, id := range ids {
			if !el[id] {
				return false, nil
			}
		}
		return true, nil
	})
}

// eligible reads which nodes the coordinator has made eligible.
func (c *clTest) eligible() (map[string]bool, error) {
	out := make(map[string]bool)
	err := c.queryEach("SELECT node_id, eligible FROM node_eligibility", func(rows *sql.Rows) error {
		var id string
		var e bool
		err := rows.Scan(&id, &e)
		out[id] = e
		return err
	})
	return out, err
}

// launch is how node n starts on addr ("": a free port).
func (n *clNode) launch(addr string) launch {
	return launch{
		name:      n.id,
		addr:      addr,
		clientTLS: n.clientTLS,
		serving:   "tenure node " + n.id + " serving on ",
		args: func(addr string) []string {
			n.addr = addr
			return n.args()
		},
	}
}

// start runs node n and waits until it serves. With fresh, n gets a free
// port, and another one if it was taken in between (only before clients
// know the address); else it restarts on its address.
func (c *clTest) start(n *clNode, fresh bool) {
	c.t.Helper()
	addr := n.addr
	if fresh {
		addr = ""
	}
	n.proc = start(c.t, n.launch(addr))
}

func (c *clTest) node(id string) int {
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	return -1
}

func (c *clTest) ids(except ...int) []string {
	var out []string
	for i, n := range c.nodes {
		if !slices.Contains(except, i) {
			out = append(out, n.id)
		}
	}
	return out
}

// health is the status /readyz of node n answers: 200 while it serves
// (inside its trust window).
func (c *clTest) health(n *clNode) (int, error) {
	resp, err := c.hc.Get(n.url() + "/readyz")
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// poll waits until f reports done (eventually.NoError), and fails the test
// with the last error f returned if it does not.
func (c *clTest) poll(what string, f func() (bool, error)) {
	c.t.Helper()
	eventually.NoError(c.t, what, func() error {
		done, err := f()
		if err == nil && !done {
			err = eventually.ErrNotYet
		}
		return err
	})
}
