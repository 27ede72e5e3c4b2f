// Package server serves the tenure.v1 API (TaskService and WorkerService)
// over Connect, so the same handlers answer Connect, gRPC and gRPC-Web, with
// protobuf or JSON bodies, plus GET /healthz.
//
// It holds no task logic: it converts messages, calls a Backend (the
// coordinator, or a router over partitions in cluster mode) and maps the
// backend's typed errors to status codes: lease lost → failed_precondition,
// already committed → already_exists, unknown task → not_found, bad input →
// invalid_argument, over a size limit → resource_exhausted, storage failure
// → unavailable. JSON is strict: an unknown field is invalid_argument.
package server
