// Package registry is the cluster's node table: every node registers and
// heartbeats, and the coordinator sweeps it, marking inactive the nodes
// that have been silent too long.
//
// Every time is the database's: a heartbeat writes NOW(6), and the sweep
// compares with NOW(6) in the same statement, so a node's clock cannot
// make it look alive or dead. A heartbeat from a node marked inactive makes
// it active again (it rejoins; the partitions it lost stay fenced by their
// epochs). Leave marks a node inactive at once, for a clean shutdown.
//
// A node joins (Join) only when the protocol versions it speaks meet those
// of every active node; it states them in node_protocols
// (docs/design/cluster.md, "Protocol versions").
//
// It also keeps each node's latest probe verdict on each other node
// (RecordProbes, Probes) and each node's eligibility for partitions,
// which only the coordinator writes, fenced by its lock (SetEligibility;
// docs/design/cluster.md, "Which nodes get partitions").
//
// Only the coordinator should call Sweep; a sweep by a stale coordinator
// is harmless in itself (it only marks silent nodes), and what it decides
// from it is fenced when it writes partition assignments.
package registry
