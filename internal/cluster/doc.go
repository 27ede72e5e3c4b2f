// Package cluster is the shared vocabulary of tenure's cluster mode
// (docs/design/cluster.md): nodes that share one MySQL-protocol database (MySQL
// or MariaDB), elect one coordinator through a lock row, register and
// heartbeat in a node table, and split every queue into partitions, each
// owned by exactly one node and logged in its own rows of a table.
//
// The machinery lives in the sub-packages:
//
//   - schema: the versioned, embedded migrations that create the tables.
//   - election: the coordinator lock (helix_locks), acquisition, renewal,
//     standby checks and step-down.
//   - registry: the node table, heartbeats and the coordinator's sweep.
//   - alloc: the pure, balanced and sticky partition allocation.
//   - reach: the pure decision of which nodes may be given partitions,
//     from the nodes' probes of each other.
//   - partition: the queue and partition-assignment tables, with a
//     per-partition epoch.
//   - mysqllog: a partition's write-ahead log and snapshots in the
//     database, with group commit, fencing and compaction.
//   - member: one running node: its heartbeat, election and assignment
//     loops, a host.Host per partition it serves, and the route.Router
//     that sends each request to the partition's coordinator here or to
//     its owner.
//   - remote: the API of another node, through which requests are
//     forwarded unchanged.
//   - nodeauth: the cluster secret, with which a node signs the requests
//     it forwards and checks those forwarded to it (docs/design/cluster.md,
//     "Trust between nodes").
//   - clustertest: a database of its own per test on a real server, and a
//     TCP proxy that cuts a node off the database.
//
// This package holds what they share: [PartitionKey] and [OpenDB], which
// opens a connection pool with the session settings every one of them
// relies on.
//
// # Time
//
// Every time that decides who holds a lock, whether a node is silent or
// whether a lease has expired is the database's clock (NOW(6)), read and
// compared in the same statement. A node's own clock only measures how long
// it may keep trusting what the database told it, on its monotonic clock.
// So skew between the nodes' clocks can never give two nodes the same lock.
package cluster
