package e2e

// A node the other nodes cannot reach gets no partitions (docs/design/
// cluster.md, "Which nodes get partitions"): three nodes serve TLS with
// certificates of the cluster's CA and require client certificates of it;
// under load, a node whose certificate is of another CA joins (it has the
// database's credentials), then one of the three gets an expired
// certificate, then a good one again.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// tlsNodeArgs are the TLS flags of a node whose certificate is cert/key
// and whose client and peer CA is the file caFile, all in k.
func tlsNodeArgs(k *pki, cert, key, caFile string) []string {
	return []string{"--tls-cert", k.path(cert), "--tls-key", k.path(key), "--tls-client-ca", k.path(caFile)}
}

// ownerWatch reads the partition map every 20 ms until stopped and keeps
// every assignment to one of the nodes it watches for.
type ownerWatch struct {
	mu   sync.Mutex
	seen []string
	stop func()
	done chan struct{}
}

func (c *clTest) watchOwners(ids ...string) *ownerWatch {
	w := &ownerWatch{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = func() { cancel(); <-w.done }
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if ps, err := c.parts(); err == nil {
				for _, p := range ps {
					if slices.Contains(ids, p.owner) {
						w.mu.Lock()
						w.seen = append(w.seen, fmt.Sprintf("%s %s@%d", p.key, p.owner, p.epoch))
						w.mu.Unlock()
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	c.t.Cleanup(w.stop)
	return w
}

func (w *ownerWatch) assignments() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Compact(slices.Clone(w.seen))
}

// metricValue reads one unlabelled series of p's /metrics.
func metricValue(t *testing.T, p *serverProc, name string) float64 {
	t.Helper()
	vs := metricValues(t, scrape(t, p), name)
	if len(vs) != 1 {
		t.Fatalf("%s serves %d series of %s, want one", p.url(), len(vs), name)
	}
	return vs[0]
}

// TestClusterUntrustedNode: a node with a certificate of another CA joins
// a three-node TLS cluster under load. The others cannot reach it (its
// certificate is not of their CA; it refuses theirs), so it is never given
// a partition: no partition becomes unreachable, no call is answered
// unavailable for it, the node logs why it gets nothing, and the cluster's
// description, `tenure cluster status` and the metrics say so. Then a node
// of the three gets an expired certificate: it loses its eligibility and
// its partitions move to the other two (the window while its partitions
// are unreachable is logged); with a good certificate again it is verified
// again and gets its share back. Every acknowledgement survives.
func TestClusterUntrustedNode(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster e2e: four server processes under load; skipped with -short")
	}
	dsn := clustertest.NewDatabase(t) // skips without MySQL, fails under CI
	k := newPKI(t)
	ca, other := k.ca("ca"), k.ca("other")
	clientCfg := trust([]*certgen.CA{ca}, k.client(ca, "admin"))
	c := &clTest{t: t, dsn: dsn, db: clustertest.Open(t, dsn),
		hc: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: clientCfg.Clone()}}}
	t.Cleanup(c.hc.CloseIdleConnections)
	for i := range clNodes {
		n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn, clientTLS: clientCfg}
		k.server(ca, n.id+".pem", n.id+"-key.pem")
		n.extra = tlsNodeArgs(k, n.id+".pem", n.id+"-key.pem", "ca.pem")
		c.nodes = append(c.nodes, n)
		c.start(n, true)
	}
	c.waitEligible(c.ids())
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	// Phase 1: node u joins with a certificate of another CA, and trusts
	// only that CA. It registers (it has the database's credentials).
	c.phase.Store(1)
	watch := c.watchOwners("u")
	k.server(other, "u.pem", "u-key.pem")
	uTLS := trust([]*certgen.CA{other}, k.client(other, "u-admin"))
	u := &clNode{id: "u", dsn: dsn, clientTLS: uTLS, extra: tlsNodeArgs(k, "u.pem", "u-key.pem", "other.pem")}
	c.start(u, true)
	t.Logf("node u joined at %s with a certificate of another CA", u.addr)
	loud := "THIS NODE GETS NO PARTITIONS: the other nodes cannot reach it as they forward requests. " +
		"Check that its certificate (--tls-cert) is issued by the CA the other nodes trust (their --tls-peer-ca, or --tls-client-ca), " +
		"is valid now and names the host of its --advertise; that it trusts theirs; and that --advertise reaches it from them"
	c.poll("node u logs why it gets no partitions", func() (bool, error) {
		return len(logLines(u.proc.out.String(), loud)) > 0, nil
	})
	ld.progress("with node u in the node table", clPostAcks)
	// Long enough for several allocation rounds and probe rounds.
	for _, n := range c.nodes {
		if v := metricValue(t, n.proc, "tenure_cluster_peers_unreachable"); v != 1 {
			t.Errorf("%s: tenure_cluster_peers_unreachable %v, want 1 (node u)", n.id, v)
		}
		if v := metricValue(t, n.proc, "tenure_cluster_eligible"); v != 1 {
			t.Errorf("%s: tenure_cluster_eligible %v, want 1", n.id, v)
		}
	}
	if v := metricValue(t, u.proc, "tenure_cluster_eligible"); v != 0 {
		t.Errorf("u: tenure_cluster_eligible %v, want 0", v)
	}
	if v := metricValue(t, u.proc, "tenure_cluster_peers_unreachable"); v != 3 {
		t.Errorf("u: tenure_cluster_peers_unreachable %v, want 3", v)
	}
	desc := describeCluster(t, c.nodes[0])
	for _, n := range desc.GetNodes() {
		want := n.GetNodeId() != "u"
		if n.GetEligible() != want {
			t.Errorf("GetCluster: node %s eligible %v, want %v (%s)", n.GetNodeId(), n.GetEligible(), want, n.GetEligibility())
		}
		if n.GetNodeId() == "u" {
			t.Logf("GetCluster: node u is not eligible: %s", n.GetEligibility())
			if !strings.Contains(n.GetEligibility(), "certificate signed by unknown authority") || n.GetPartitions() != 0 {
				t.Errorf("GetCluster: node u: %d partitions, eligibility %q; want none, and the certificate error", n.GetPartitions(), n.GetEligibility())
			}
		}
	}
	status := clusterStatusJSON(t, dsn)
	for _, n := range status.Nodes {
		if n.NodeID == "u" && (n.Eligible || n.Partitions != 0 || !strings.Contains(n.Eligibility, "unknown authority")) {
			t.Errorf("cluster status: node u %+v; want not eligible, no partitions, and why", n)
		}
	}
	watch.stop()
	if got := watch.assignments(); len(got) > 0 {
		t.Errorf("partitions assigned to the node the others cannot reach: %v", got)
	}
	for _, msg := range c.unavailableIn(1) {
		if strings.Contains(msg, u.addr) || strings.Contains(msg, "certificate") {
			t.Errorf("a call was answered unavailable because of node u: %s", msg)
		}
	}
	t.Logf("phase 1: node u was never assigned a partition; %d unavailable answers retried in the phase: %v", len(c.unavailableIn(1)), c.unavailableIn(1))

	// Phase 2: n3's certificate is replaced by an expired one (of the
	// cluster's CA). New connections to it fail; it loses its
	// eligibility and its partitions move.
	c.phase.Store(2)
	n3 := c.nodes[2]
	before := ownedBy(c.waitBalanced("balanced before the expiry", c.ids()), n3.id)
	expired, err := ca.Server("tenure", k.now.Add(-48*time.Hour), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := expired.Write(k.path("n3.pem"), k.path("n3-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := n3.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	expiredAt := time.Now()
	c.poll("n3 loses its eligibility and its partitions", func() (bool, error) {
		ps, err := c.parts()
		if err != nil {
			return false, err
		}
		el, err := c.eligible()
		return err == nil && !el[n3.id] && len(ownedBy(ps, n3.id)) == 0, err
	})
	t.Logf("phase 2: n3's certificate expired; its %d partitions moved to n1 and n2 %v after the SIGHUP (the time they were unreachable for new connections)",
		len(before), time.Since(expiredAt).Round(10*time.Millisecond))
	ld.progress("with n3's certificate expired", clPostAcks)
	if !strings.Contains(n3.proc.out.String(), "THIS NODE GETS NO PARTITIONS") {
		t.Errorf("n3 did not log why it gets no partitions")
	}

	// Phase 3: a good certificate again.
	c.phase.Store(3)
	k.server(ca, "n3.pem", "n3-key.pem")
	if err := n3.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	c.waitEligible(c.ids())
	c.waitBalanced("n3 gets its share back", c.ids())
	ld.progress("with n3's certificate good again", clPostAcks)

	ld.stop()
	ld.report()
	c.verify(led, 0, c.ids())
	c.checkStatus(c.ids())
}

// describeCluster is AdminService.GetCluster through node n.
func describeCluster(t *testing.T, n *clNode) *tenurev1.GetClusterResponse {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: n.clientTLS.Clone()}}
	defer hc.CloseIdleConnections()
	admin := tenurev1connect.NewAdminServiceClient(hc, n.url(), connect.WithProtoJSON())
	resp, err := admin.GetCluster(context.Background(), connect.NewRequest(&tenurev1.GetClusterRequest{}))
	if err != nil {
		t.Fatalf("GetCluster through %s: %v", n.id, err)
	}
	return resp.Msg
}
