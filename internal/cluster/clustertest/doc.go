// Package clustertest gives tests of the cluster packages a database of
// their own on a real MySQL-protocol server.
//
// The server is the one at TENURE_TEST_MYSQL_DSN (default
// root@tcp(127.0.0.1:3306)/). Each call creates a database named
// tenure_test_<random>, migrates it and drops it when the test ends. When no
// server answers the test is skipped with a message saying so, except when
// CI is set (CI starts MariaDB): then it fails, so a broken database never
// passes for a green run.
//
// # Cutting a node off
//
// For fault tests, NewProxy puts a TCP proxy on a loopback port in front of
// a target address, usually the database server, and DSNVia rewrites a DSN
// to connect through it:
//
//	dsn := clustertest.NewDatabase(t)
//	cfg, _ := mysql.ParseDSN(dsn)
//	p := clustertest.NewProxy(t, cfg.Addr)
//	db := clustertest.Open(t, clustertest.DSNVia(dsn, p.Addr()))
//
// Cut resets every connection through the proxy at once, on both sides, and
// until Restore closes new connections as soon as they are accepted, so the
// node behind it sees its database vanish while other nodes keep theirs.
// Restore lets new connections through again; Conns counts those open now.
// The proxy passes half-closes on and is closed, with all its goroutines
// ended, when the test ends.
//
// # Database servers of a test's own (Linux)
//
// StartGalera starts a three-node MariaDB Galera cluster (galera-4) on
// 127.0.0.1:3307-3309, each node with its own data directory, node 0
// bootstrapping and the others joining by state transfer; Kill, Rejoin and
// WaitSynced play a database node's death and return. StartMariaDB starts
// a plain MariaDB that a test kills, restarts, or replaces by a copy of its
// data at another address (Promote): a managed database's failover. A file
// lock per set of ports keeps two test binaries off them at once
// (servers.go). SkipWithoutGalera and SkipWithoutMariaDB skip a test,
// naming what to install, where the programs are missing.
package clustertest
