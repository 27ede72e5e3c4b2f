// Package metrics exposes tenure's Prometheus metrics
// (docs/guides/monitoring.md lists them): it owns a registry of its own (with the Go
// runtime and process collectors, never the global default one), defines
// every metric, and implements the observer interfaces the packages below
// it call — coordinator.Observer (a counter per record applied and per
// call refused to a stale lease), host.Observer (opens, snapshots),
// wal.Observer and mysqllog.Observer (writes, fsyncs, commits) — so that
// none of them imports Prometheus. Wire a node or a cluster member with
// ConfigureNode/WatchNode or ConfigureMember/WatchMember and serve it
// through server.Options.Metrics.
//
// Promises:
//   - Bounded cardinality. Every per-queue metric is labelled namespace and
//     queue; the first Config.MaxQueues distinct pairs seen (by an event or
//     by a scrape of the per-queue gauges) keep their own labels, and every
//     other queue is reported as namespace="_other", queue="_other", for
//     the life of the process. Other labels (procedure, code, state) have
//     a fixed set of values.
//   - Cheap on the hot path. An event costs a type switch, a lock-free
//     lookup of the queue's cached counters and an atomic add; a request
//     two clock readings and a histogram observation. Nothing allocates
//     after a queue's (or a procedure and code's) first event.
//   - Live events only. Records replayed at start are not counted: the
//     counters count what this process decided since it started.
//   - The per-queue gauges (tenure_tasks, oldest waiting age, leases,
//     paused) are read at each scrape from Config.Queues; without one they
//     are absent.
//
// Time comes from the injected clock (Config.Clock).
package metrics
