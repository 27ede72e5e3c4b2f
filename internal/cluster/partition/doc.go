// Package partition reads and writes the queues and partitions tables: the
// queues the cluster knows, their partitions, and each partition's owner
// and epoch.
//
// A partition's epoch grows by one every time its owner changes, and only
// then. The node that gains a partition opens its log at that epoch
// (mysqllog checks it in every append), so a write by the previous owner,
// whose epoch is older, can never commit after the change.
//
// Apply, the coordinator's write, is fenced by the coordinator lock: in the
// same transaction, once it holds the partition rows, it reads the
// helix_locks row with a shared lock and writes nothing unless the row names
// the caller as owner and has not expired by the database's clock. The
// shared lock holds off any takeover until the transaction ends, so
// assignments are only ever written by the current coordinator. It is taken
// last so that waiting for partition rows (locked by an owner frozen in the
// middle of an append) never blocks the coordinator's renewals.
package partition
