package worker

import (
	"context"

	"github.com/tenurehq/tenure/sdk/client"
)

// Middleware runs around each attempt the worker runs, on the attempt's
// goroutine: the handler (or, on a finalisation lease, the effects) and
// the report to the server, which next runs and answers with how the
// attempt ended (Finish: completed, retrying, failed for good, lost, not
// reported, with the error and the time it took). t is the leased task
// (its ID, Kind, Queue, Attempt, LeaseID, ...); ctx is the attempt's,
// which ends when the lease is lost. A middleware may pass next a ctx of
// its own (with values, a span): the handler gets it, and the reports
// carry its values; if the middleware cancels it, the handler's error
// fails the attempt as usual. It must call next once.
//
// Logging, metrics, tracing and panic reports are middleware:
//
//	func logAttempts(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
//		f := next(ctx)
//		slog.InfoContext(ctx, "attempt", "task", t.ID, "kind", t.Kind, "attempt", t.Attempt,
//			"outcome", f.Outcome, "took", f.Took, "err", f.Err)
//		return f
//	}
//
// A handler's panic is recovered before the middleware sees it: Finish.Err
// is then a *PanicError, with the panic's value and stack. The attempt
// holds its slot until the middleware returns: keep it quick.
type Middleware func(ctx context.Context, t *client.LeasedTask, next func(ctx context.Context) Finish) Finish
