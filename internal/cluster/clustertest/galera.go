//go:build linux

package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/testenv"
)

// GaleraPort is the client port of Galera node 0; node i listens on
// GaleraPort+i. Node i's group communication listens on 4567+10i, its
// incremental state transfer on 4568+10i and its snapshot transfer on
// 4444+10i, all on 127.0.0.1.
const GaleraPort = 3307

// Galera is a three-node MariaDB Galera cluster of a test binary.
type Galera struct {
	*Servers
	Nodes [3]*Server
}

// StartGalera starts a fresh three-node Galera cluster — node 0
// bootstraps it (--wsrep-new-cluster), nodes 1 and 2 join and receive its
// data by state transfer (rsync) — and returns once every node is synced
// in a primary component of three. Galera's own timeouts keep their
// defaults (a dead node is evicted after about 6 s), so what the tests see
// is what a user's cluster does. Close stops it.
func StartGalera(logf func(string, ...any)) (*Galera, error) {
	ss, err := newServers("galera", logf)
	if err != nil {
		return nil, err
	}
	g := &Galera{Servers: ss}
	var peers []string
	for i := range g.Nodes {
		peers = append(peers, fmt.Sprintf("127.0.0.1:%d", 4567+10*i))
	}
	for i := range g.Nodes {
		s, err := ss.add(fmt.Sprintf("galera%d", i), GaleraPort+i, i > 0,
			"binlog_format=ROW",
			"default_storage_engine=InnoDB",
			"innodb_autoinc_lock_mode=2",
			"wsrep_on=ON",
			"wsrep_provider="+galeraProvider,
			"wsrep_cluster_name=tenure_test",
			"wsrep_cluster_address=gcomm://"+strings.Join(peers, ","),
			fmt.Sprintf("wsrep_node_address=127.0.0.1:%d", 4567+10*i),
			fmt.Sprintf("wsrep_node_name=galera%d", i),
			"wsrep_sst_method=rsync",
			fmt.Sprintf("wsrep_sst_receive_address=127.0.0.1:%d", 4444+10*i),
			fmt.Sprintf(`wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=64M"`, 4567+10*i, 4568+10*i),
		)
		if err != nil {
			ss.Close()
			return nil, err
		}
		g.Nodes[i] = s
	}
	if err := g.Nodes[0].start("--wsrep-new-cluster"); err != nil {
		ss.Close()
		return nil, err
	}
	if err := g.WaitSynced(0, 1); err != nil {
		ss.Close()
		return nil, err
	}
	for i := 1; i < len(g.Nodes); i++ {
		if err := g.Nodes[i].start(); err != nil {
			ss.Close()
			return nil, err
		}
	}
	for i := range g.Nodes {
		if err := g.WaitSynced(i, len(g.Nodes)); err != nil {
			ss.Close()
			return nil, err
		}
	}
	logf("clustertest: Galera cluster of 3 nodes on 127.0.0.1:%d-%d synced (data under %s)", GaleraPort, GaleraPort+2, ss.dir)
	return g, nil
}

// WaitSynced waits until node i is ready, synced, and in a primary
// component of size nodes.
func (g *Galera) WaitSynced(i, size int) error {
	s := g.Nodes[i]
	return s.waitUntil(fmt.Sprintf("synced in a cluster of %d", size), func(ctx context.Context) (bool, error) {
		st, err := s.Status(ctx, "wsrep_")
		if err != nil {
			return false, err
		}
		return st["wsrep_ready"] == "ON" && st["wsrep_local_state_comment"] == "Synced" &&
			st["wsrep_cluster_status"] == "Primary" && st["wsrep_cluster_size"] == strconv.Itoa(size), nil
	})
}

// Rejoin starts node i again after Kill, without bootstrapping: it joins
// the others and receives their data by state transfer (a donor among
// them is desynced meanwhile). It returns once all three are synced.
func (g *Galera) Rejoin(i int) error {
	if err := g.Nodes[i].start(); err != nil {
		return err
	}
	for j := range g.Nodes {
		if err := g.WaitSynced(j, len(g.Nodes)); err != nil {
			return err
		}
	}
	return nil
}

// DSN is the DSN of database db over the three nodes, node first listed
// first (a tenure node uses that one, and the others if it fails).
func (g *Galera) DSN(db string, first int) string {
	var addrs []string
	for k := range g.Nodes {
		addrs = append(addrs, g.Nodes[(first+k)%len(g.Nodes)].Addr())
	}
	return "root@tcp(" + strings.Join(addrs, ",") + ")/" + db
}

// NewDatabase creates a database of t's own on the cluster, dropped when t
// ends, and returns its name.
func (g *Galera) NewDatabase(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tenure_galera_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateDatabase(ctx, g.DSN(name, 0)); err != nil {
		t.Fatalf("clustertest: creating database %s on Galera: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := cluster.OpenDB(g.DSN("", 0))
		if err != nil {
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("clustertest: dropping database %s on Galera: %v", name, err)
		}
	})
	return name
}

// SkipWithoutGalera skips t, naming what to install, when the Galera
// tests cannot run here; under CI (CI set) it fails instead, since .ci/run
// installs what they need.
func SkipWithoutGalera(t testing.TB) {
	t.Helper()
	if m := GaleraMissing(); m != "" {
		testenv.SkipOrFail(t, "clustertest: the Galera tests cannot run: "+m)
	}
}

// SkipWithoutMariaDB is SkipWithoutGalera for a test that starts a plain
// MariaDB server of its own.
func SkipWithoutMariaDB(t testing.TB) {
	t.Helper()
	if m := MariaDBMissing(); m != "" {
		testenv.SkipOrFail(t, "clustertest: the test cannot start a MariaDB server: "+m)
	}
}

// MariaDB is a plain (not replicated) MariaDB server of a test, which the
// test stops and brings back, or replaces: the database of a managed
// service that fails over.
type MariaDB struct {
	*Servers
	Primary *Server
}

// StartMariaDB starts a fresh MariaDB server on port and waits until it
// answers. Close stops it.
func StartMariaDB(port int, logf func(string, ...any)) (*MariaDB, error) {
	ss, err := newServers("mariadb", logf)
	if err != nil {
		return nil, err
	}
	s, err := ss.add("mariadb", port, false, "wsrep_on=OFF", "innodb_flush_log_at_trx_commit=1")
	if err != nil {
		ss.Close()
		return nil, err
	}
	if err := s.start(); err != nil {
		ss.Close()
		return nil, err
	}
	if err := s.WaitAnswering(); err != nil {
		ss.Close()
		return nil, err
	}
	return &MariaDB{Servers: ss, Primary: s}, nil
}

// WaitAnswering waits until the server answers a statement.
func (s *Server) WaitAnswering() error {
	return s.waitUntil("answering", func(ctx context.Context) (bool, error) {
		_, err := s.Status(ctx, "Uptime")
		return err == nil, err
	})
}

// Restart starts the server again after Kill or Stop, on its data
// directory, and waits until it answers.
func (s *Server) Restart() error {
	if err := s.start(); err != nil {
		return err
	}
	return s.WaitAnswering()
}

// Promote stands for a managed database's failover to a replica: it makes
// a server on port from a copy of from's data directory (from must be
// stopped: the copy is what a synchronous replica holds), starts it and
// waits until it answers.
func (m *MariaDB) Promote(from *Server, port int) (*Server, error) {
	s, err := m.add(fmt.Sprintf("replica%d", port), port, true, "wsrep_on=OFF", "innodb_flush_log_at_trx_commit=1")
	if err != nil {
		return nil, err
	}
	if out, err := execCopy(from.dir, s.dir); err != nil {
		return nil, fmt.Errorf("clustertest: copying %s to %s: %w\n%s", from.dir, s.dir, err, out)
	}
	if err := chownMySQL(m.dir); err != nil {
		return nil, err
	}
	return s, s.Restart()
}
