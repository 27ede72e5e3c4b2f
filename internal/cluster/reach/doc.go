// Package reach decides which nodes of a cluster may be given partitions:
// those the other nodes can reach (docs/design/cluster.md, "Which nodes get
// partitions").
//
// Every node probes every other active node at its advertised address as
// it forwards a request: over the cluster's TLS client configuration (the
// peer CA, its own certificate as the client certificate), on a new
// connection, with a request signed by the cluster secret, and the far
// node must answer with its own id. Each node records its latest verdict
// on each other node in the database. A node that had the database's
// credentials but whose certificate the others do not trust (another CA,
// expired, a rotation gone wrong), or whose advertised address is wrong,
// fails these probes. The coordinator turns the verdicts into each node's
// eligibility with Decide, and allocates partitions over the eligible
// nodes only.
//
// Decide is pure: no clock, no I/O; the caller passes the active nodes
// with the eligibility they have now and the verdicts recent enough to
// count. The rules:
//
//   - The voters are the active nodes eligible now: the nodes already
//     verified decide who joins them. With none (a cluster starting, or
//     every eligible node gone), every active node votes.
//   - A node that is not eligible becomes eligible when more than half of
//     the other voters report it reachable.
//   - An eligible node stops being eligible when more than half of the
//     other voters report it unreachable.
//   - A node that is the only voter (a cluster of one) is eligible.
//
// Between the two thresholds nothing changes: a voter that has not
// reported yet, or whose report is too old, counts neither way, so one
// slow prober neither admits nor evicts anyone. A voter's report on itself
// does not count, nor a non-voter's on anyone: a node that cannot verify
// the cluster cannot vote the cluster out.
//
// When no active node is eligible the caller allocates over every active
// node, as before eligibility existed: two nodes that cannot verify each
// other have no majority to tell which one is wrong.
package reach
