// Package tenurev1 holds the Go types of tenure's public API, package
// tenure.v1, generated from proto/tenure/v1/*.proto by `make generate` (do
// not edit the *.pb.go files; edit the .proto files and regenerate).
//
// The API has three services, served with Connect (gRPC, gRPC-Web and the
// Connect protocol with JSON or binary bodies over HTTP):
//   - TaskService: Submit, SubmitBatch, GetTask, ListTasks, KillTask and
//     GetTaskHistory, for clients and operators.
//   - WorkerService: Lease, Start, Heartbeat, Commit, Complete and Fail, for
//     worker processes.
//   - AdminService: Snapshot, for operators (`tenure admin snapshot`).
//
// Handlers and clients are in the tenurev1connect subpackage. The .proto
// files document every field, default and limit; they are the reference for
// users of the API, and field numbers there are a compatibility promise
// (checked with `make breaking-proto`).
package tenurev1
