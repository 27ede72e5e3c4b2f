// Package fanout runs the API calls that span partitions: a batch whose
// items several partitions hold, and a call about every partition of a
// queue (statistics, pause and resume, limits, bulk actions, schedule
// listings). It is the one place that decides how such a call is split,
// where each part runs, how many run at once, and how their answers and
// errors come back; what a call's answers mean, and how they are merged
// into its own answer, stays beside the call's handler (package server).
//
// What it promises:
//
//   - Grouping: Group splits a batch's items by partition, each part's
//     items in the batch's order, the parts in the order of their first
//     items.
//   - Where a part runs: Call runs it on the partition's coordinator when
//     this node serves it, and through the node that does otherwise
//     (route.Partition.Do, which follows a partition that moved). A Batch
//     sends the parts that one other node serves, as this node's map has
//     it (route.Partition.Peer), in one call to that node; if that node
//     refuses the call as unavailable and the call may be sent again, each
//     of its parts is run again on its own, which follows a partition that
//     moved.
//   - Bounded: at most the parallelism given run at once; a call of one
//     part runs in the caller's goroutine, with no goroutine started.
//   - Answers in order: Run's answers come back in the order of the parts
//     (a Batch's: of its calls, by their first items), each with its
//     error, to the caller's goroutine, which merges them without locks.
//   - The caller's deadline: when the caller's context ends before every
//     part has answered, Run returns at once, each part not yet answered
//     answering the context's error; an answer that comes later is
//     dropped. A part's function must therefore keep what it answers to
//     itself until it returns: it writes into nothing the caller reads.
package fanout
