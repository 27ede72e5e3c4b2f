// Package server serves the tenure.v1 API (TaskService, WorkerService,
// QueueService, ScheduleService and AdminService) over Connect, so the same handlers answer Connect, gRPC and
// gRPC-Web, with protobuf or JSON bodies, and what probes and tools point
// at a server (probes.go): GET /healthz (liveness: the process answers),
// GET /readyz and the gRPC health service (readiness: it can serve now),
// gRPC server reflection, and, opt-in and to loopback clients only, Go's
// profiler under /debug/pprof/. Opening stands in for an embedded node
// while it replays its WAL, so that the server answers (not ready) from
// the moment it listens.
//
// It holds no task logic. A call addressed to one partition (everything
// named by a task id, a submit, placed by its request id, and a call
// about one schedule, placed by its name: schedules.go) goes through
// the route.Router to that partition: served here, the handler converts the
// request, calls the partition's coordinator and converts its answer;
// served by another node, the original request is forwarded and the far
// node's answer handed back unchanged. What spans partitions — a lease
// across a queue, a listing, a batch, queue statistics and controls, bulk
// actions — is split and run by package fanout and merged beside its
// handler (submitbatch.go, completebatch.go, lease.go, list.go,
// queues.go, bulk.go, flow.go, schedules.go), as API messages, so a part
// answered by another node is never converted back and forth.
//
// Errors: a coordinator error maps to one status code — lease lost and
// wrong state → failed_precondition, already committed and a schedule
// defined otherwise → already_exists, unknown task or schedule → not_found, bad input → invalid_argument, over a size
// limit → resource_exhausted, storage failure or partition moving →
// unavailable — and carries a tenurev1.ErrorDetail with its reason and the
// fields a caller acts on (task, lease, committing lease, state, field,
// size, limit). Callers branch on the detail, never on the message, which
// may be reworded at any time (Options.Reword proves it in tests). JSON is
// strict: an unknown field is invalid_argument.
//
// Authentication (Options.Auth, auth.go): every call but the health
// probes needs a bearer token; the token's role and scope decide the
// call (internal/auth), and a refusal is unauthenticated or
// permission_denied, logged and counted. An allowed call's context carries
// the token's name (internal/principal).
//
// Serving (http.go): Server.Serve is the one place the API's HTTP server
// is assembled, with the limits below, TLS or h2c; `tenure server`, a
// cluster node, `tenure bench` and the tests standing for them all use it.
//
// Limits (limits.go, bodies.go, conns.go; docs/guides/limits.md): what one
// client can hold of the server is bounded — connections (the listener of
// Serve, counting header and write timeouts), each request body's size
// by its procedure and the time to receive it, the body bytes being read
// at once, each request's headers, and the Lease calls long-polling at
// once, per server and per worker id. Each hit is counted through
// Metrics.LimitHit. Every refusal reaches the client as the API's error,
// also a client that sends its whole request before it reads: a
// connection closed while its client may still be sending is closed by a
// bounded lingering close (conns.go), and a refusal for a size is HTTP 413
// (answers.go), since a 429 is retried by generic HTTP clients.
package server
