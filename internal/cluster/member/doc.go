// Package member runs one node of a tenure cluster (docs/design/cluster.md): it
// registers and heartbeats in the node table, stands for the
// coordinator lock, serves the partitions assigned to it, and answers the
// API for every partition, forwarding what it does not own.
//
// # Roles
//
// Every node runs four loops:
//
//   - Heartbeat: a registry heartbeat every HeartbeatInterval. Each one
//     that the database confirms extends the node's trust until the moment
//     the statement was sent plus TrustWindow (Silence − Silence/5). A node
//     whose trust has run out serves nothing: it answers unavailable,
//     closes its partitions and reports unhealthy, before the coordinator
//     can mark it silent and give its partitions away.
//   - Election: the node stands for the coordinator lock (package
//     election). While it holds it, it sweeps silent nodes, discovers the
//     queues, computes the balanced and sticky allocation (package alloc)
//     and writes the changes (package partition, fenced by the lock), every
//     AssignInterval. It allocates over the eligible nodes only: those
//     the other nodes reach (package reach; eligibility.go).
//   - Probes: every ProbeInterval the node calls every other active node
//     at its advertised address as it forwards a request (the TLS
//     handshake both ways, the cluster's signature, on a new connection)
//     and records its verdicts in the database, from which the
//     coordinator decides who is eligible (probe.go). A node that gets no
//     partitions because the others cannot reach it says so in its log.
//   - Assignments: every AssignInterval the node reads the partition map
//     and the node table. It opens each partition newly assigned to it: it
//     opens the partition's log in the database at the partition's epoch
//     (package mysqllog), replays it into the same state machine and
//     coordinator as embedded mode, appends a Fence record carrying the
//     epoch, and only then serves it. It closes each partition that moved
//     away or whose log failed (a fenced append, an unknown commit outcome);
//     one still assigned to it is reopened from the log. A failed partition
//     or a refused read triggers this check at once.
//
// A node refuses to start under an id that the node table shows active at
// another address and heard from within the silence (ErrNodeIDInUse).
//
// # Snapshots
//
// Each served partition is a host.Host over its database log: it is
// snapshotted into the database on the embedded mode's schedule
// (Config.Snapshots), log rows below the oldest kept snapshot are deleted,
// and a partition is opened from its newest snapshot plus the rows after
// it. When its log fails (fenced, or a commit's outcome unknown) the host
// stops and the node checks its assignments at once: it reopens the
// partition only if it is still its own.
//
// # Reads
//
// Writes are fenced by the log. A read (Get, List, History) needs no write,
// so after serving one from its copy the node confirms that the
// partition's epoch in the database is still the one it serves it at; if
// not, the read is answered unavailable. Epochs only grow, so a confirmed
// read was served while no other node could own the partition.
//
// # Routing
//
// A Member is the route.Router of the API (package server). Task ids carry
// their partition ("<id>-p<partition id>"). A request for a task runs on
// the partition's coordinator when this node serves it and is forwarded,
// as the original API request, to the owner's advertised address otherwise
// (package remote), marked so that the owner serves it from its own
// partitions and never forwards it again; a forwarded request for a
// partition the receiver does not serve is answered unavailable, and the
// SDK retries it. The answer comes back unchanged, errors included. With
// Config.PeerDialTLS the nodes call each other over HTTPS, each presenting
// its own certificate.
//
// A submit picks the partition by a hash of its request id (so a retried
// submit meets its first try's deduplication) or, without one, round
// robin; the queue is created by its first submit, once its name is
// checked. A Lease draws from this node's partitions of the queue and from
// each other node that serves some of them (Queue). Page tokens name a
// partition and a position in it.
package member
