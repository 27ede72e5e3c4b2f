// Package bench is the load generator behind `tenure bench`: it submits a
// deterministic workload to a tenure server, leases and completes it with
// worker loops, and measures throughput, per-call latency, the WAL's write
// and fsync counts and the process's memory.
//
// The server is either a running one (Config.Addr) or an embedded node over
// a temporary data directory (or Config.Cluster cluster nodes), served on a
// loopback port by the HTTP server `tenure server` runs
// (server.Server.Serve, with its default limits and timeouts), so that
// every call pays for encoding, the network stack, the server's wiring and
// the fsync of its record exactly as a remote client's would. Client, server and workers then
// share one process and its cores: the figures are for the whole system on
// that machine, and the memory figures include the client side.
//
// Every task counts as completed only once its Complete call has been
// acknowledged, which under the default fsync policy means its record is on
// disk. Latencies are exact percentiles of every recorded duration (they
// are sorted, not sketched); at the supported sizes that costs a few
// megabytes, allocated before the memory baseline is taken.
//
// An open-loop run (Config.Duration and Config.Rate) submits on a
// timetable whatever the workers do, for as long as it is told; its
// latency counts from when each task was due, so queueing shows. It keeps
// no per-task figure: its durations go into histograms of bounded
// relative error (1/64), per window, with the process's memory and the
// node's disk sampled at each window's end.
package bench
