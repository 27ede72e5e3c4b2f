// Package worker runs tenure tasks: it leases the tasks of one or more
// queues, routes each by its kind to the handler registered for it, runs
// up to Options.Concurrency at once, keeps their leases alive with
// heartbeats, and reports the outcome, following the commit boundary: only
// the attempt whose Commit wins applies effects, so a stalled worker whose
// lease expired while another attempt ran never applies them a second time
// (docs/design/state-machine.md).
//
// A typed task is a Go type with a Kind (client.Args); its handler gets
// the arguments decoded:
//
//	type SendEmail struct {
//		To string `json:"to"`
//	}
//
//	func (SendEmail) Kind() string { return "send_email" }
//
//	w, err := worker.New(c, worker.Options{Queues: []string{"emails"}, Concurrency: 16})
//	if err != nil {
//		return err
//	}
//	worker.Handle(w, func(ctx context.Context, t *worker.Task[SendEmail]) error {
//		return mailer.Send(ctx, t.Args.To)
//	})
//	return w.Run(ctx)
//
// Register handlers with Handle (no result), HandleResult (a result the
// submitter reads), HandleEffects (external effects behind the commit
// boundary), HandleRaw (a kind's payload as bytes, for other languages'
// clients; kind "" for tasks without one) and HandleOther (every kind
// without a handler of its own). A task of a kind the worker has no
// handler for fails for good, with a reason that names its kind.
// Middleware (Options.Middleware) runs around each attempt.
//
// What it promises:
//
//   - A handler's ctx ends when its lease is lost: a heartbeat was refused
//     (the lease expired, the task was killed, another attempt committed),
//     or the lease's expiry (less a safety margin) passed without a
//     successful heartbeat. Its result is then discarded: nothing is
//     committed, no effect is applied, the task is retried by the server.
//     A handler must return promptly when its ctx ends.
//   - Without effects (Handle, HandleResult, HandleRaw without Effects), a
//     successful handler's result is committed and the task completed in
//     one step (Complete). Use this when the handler has no external
//     effects, or only effects that are safe to repeat.
//   - Completions are coalesced: the worker has one CompleteBatch call out at
//     a time, carrying up to Options.MaxCompleteBatch completions that
//     arrived while the previous call was out (so under light load each goes
//     at once, alone). Each item is decided, answered and logged as its own
//     Complete would be; batching changes the cost, not the outcome.
//   - Each CompleteBatch call carries the worker's next lease: for its free
//     slots and for those of its tasks in their final report at that
//     moment (client.CompleteBatch with a Lease), so a busy worker leases
//     without calls of its own. A task leased ahead starts only once a
//     slot is free: when a task in its final report has ended (its
//     middleware returned). Such a lease does not wait for tasks.
//   - Lease calls are batched without timers: the worker leases at once for
//     its free slots when none of its tasks is in its final report (an
//     idle worker long-polls even for one slot); when some are, it waits
//     for those slots to come back too (at most the reports under way) and
//     leases for them all in one call. So it calls Lease to start, and
//     when a carried lease came back short. A worker of several queues
//     asks them all in each call (client.LeaseRequest.Queues), starting
//     from a queue that rotates from call to call.
//   - Start is reported only with Options.ReportStart: without it an
//     execution shows LEASED until it is completed, failed or lost.
//   - With effects (HandleEffects, or HandleRaw with Effects), a successful
//     result is first committed. Only if the commit wins do the effects
//     run, with the fencing token; then the task is completed. A commit
//     refused as lease lost or already committed means another attempt owns
//     the task: the effects do not run. So across all attempts and all
//     workers, the effects run for one result only.
//   - The effects may still run more than once for that result: if this
//     worker crashes, or they keep failing (3 tries while heartbeating),
//     after the commit and before Complete, the task stays COMMITTED, its
//     lease expires, and a later finalisation lease (LeasedTask.Committed)
//     runs them again with the committed result, without running the
//     handler. They must therefore be idempotent, keyed by
//     FencingToken.TaskID (a task has at most one commit, so the task id
//     alone is a sufficient key).
//   - A handler error fails the attempt: the server retries the task per its
//     retry policy, or fails it for good if the error is wrapped with
//     Permanent. A handler panic is an error (a *PanicError, not
//     permanent). A payload that does not decode into the handler's type
//     fails the task for good.
//   - Middleware hears how each attempt ended: completed, retrying (the
//     server scheduled a retry), failed for good (Permanent or the last
//     attempt), lost, or unreported; with the time it took. The outcome is
//     the server's answer to the report, not a guess from the handler's
//     error.
//   - Graceful shutdown: when Run's ctx ends, the worker leases no more,
//     lets running tasks finish for up to Options.ShutdownGrace, then ends
//     their contexts and fails each task whose handler was still running
//     with the reason "worker shutting down" (not permanent: it is
//     retried). Run returns once every task goroutine has ended.
//
// Every server call goes through package client, which retries calls that
// failed with unavailable. A Lease interrupted by shutdown may have granted
// a lease nobody will hold: it expires after the task's execution window.
// A failed Lease, and an empty answer long before its wait (a server
// draining for shutdown), is followed by a doubling, jittered wait; so are
// failed effects.
//
// All the worker's timing (heartbeats, lease deadlines, the shutdown grace,
// those waits) runs on the time package's monotonic clock; the worker's
// own tests run it in a testing/synctest bubble, on its fake clock.
package worker
