// Package tenurev1 holds the Go types of tenure's public API, package
// tenure.v1, generated from proto/tenure/v1/*.proto by `make generate` (do
// not edit the *.pb.go files; edit the .proto files and regenerate).
//
// The API has eight services, served with Connect (gRPC, gRPC-Web and the
// Connect protocol with JSON or binary bodies over HTTP):
//   - TaskService: Submit, SubmitBatch, GetTask, WaitTask (until the task
//     has ended), ListTasks, KillTask, RetryTask, GetTaskHistory, and the
//     bulk KillTasks, RetryTasks and PurgeTasks, for clients and
//     operators.
//   - WorkerService: Lease, Start, Heartbeat, Commit, Complete,
//     CompleteBatch, Fail and Snooze, for worker processes.
//   - QueueService: ListQueues, GetQueue, PauseQueue, ResumeQueue and
//     SetQueueLimits, for operators and dashboards (`tenure queues`).
//   - ScheduleService: CreateSchedule, GetSchedule, ListSchedules,
//     UpdateSchedule, PauseSchedule, ResumeSchedule, DeleteSchedule and
//     BackfillSchedule: tasks submitted on a cron schedule
//     (`tenure schedules`).
//   - WorkflowService: GetWorkflow, ListWorkflows, CancelWorkflow,
//     RetryWorkflow and WaitWorkflow: the tasks of a workflow batch and
//     those they spawned, as one (`tenure workflow`).
//   - AdminService: Snapshot (`tenure admin snapshot`), WhoAmI (who the
//     caller's token says it is, and which calls it may make) and
//     GetCluster (the server's mode, and a cluster's lock, nodes and
//     partitions), for operators.
//   - EventService: WatchEvents, a server stream of every record of the
//     log from a cursor, filtered by namespace, queue, task, workflow and
//     record type, resumable exactly after the last event seen
//     (`tenure events`).
//   - OutboxService: Relay, Release and ListOutboxHolds: what a relay of a
//     transactional outbox calls to submit the rows of an application's
//     outbox table exactly once (`tenure outbox relay`; the Go SDK's
//     package outbox writes the rows); ListOutboxes, the outboxes a
//     server relays itself (the dashboard).
//
// Handlers and clients are in the tenurev1connect subpackage. The .proto
// files document every field, default and limit; they are the reference for
// users of the API, and field numbers there are a compatibility promise
// (checked with `make breaking-proto`). TestDocNamesEveryCall keeps this
// list whole.
package tenurev1
