// Package alloc computes which node owns each partition. It is pure: no
// clock, no randomness, no I/O; the same inputs give the same output
// whatever their order.
//
// CalculateAllocation promises, for any current assignment and any
// non-empty set of active nodes:
//
//   - Totality: every partition gets exactly one owner, an active node.
//   - Balance: the owners' partition counts differ by at most one (nodes
//     owning none count as zero).
//   - Stickiness: it moves the fewest partitions any balanced allocation
//     could. A partition keeps its owner while that owner is active and not
//     above its share; the nodes that keep the larger share (one extra
//     partition, when the count does not divide evenly) are those that
//     already own the most. So a join takes only what the new node needs, a
//     leave or a death moves only the departed node's partitions (and no
//     more than balance demands).
//
// Balance is over all the partitions passed in, so the coordinator passes
// every partition of every queue at once. Among the nodes with room, a
// partition that must move goes to the one with the fewest partitions of
// the same queue, then the fewest in all, so each queue's partitions spread
// over the nodes too, as far as stickiness allows.
//
// Cost: O(P·N + P log P) for P partitions and N nodes.
package alloc
