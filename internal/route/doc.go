// Package route is the contract between the API and the partitions that
// serve it: a Router finds the partition of a request, and a Partition
// runs the request on its coordinator when this node serves it, or hands
// the original API request to the node that does.
//
// Embedded mode has one partition, always served here (Local). In cluster
// mode (package member) a queue has several partitions spread over the
// nodes; a request for one that another node serves is forwarded to it
// unchanged, marked with ForwardedHeader, and its answer — errors with
// their codes, messages and details included — comes back unchanged. A
// forwarded request is served by the receiver from its own partitions or
// refused as unavailable, never forwarded again, so a request crosses at
// most one hop even while two nodes disagree about who owns a partition.
//
// What spans partitions (a lease across a queue, a listing, a batch) is
// split and run by package fanout, and merged by the API layer (package
// server), the one place that knows how each call combines.
package route
