package worker

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// logger writes the worker's records. The worker's own records carry its attributes (worker_id,
// namespace, queue); a task's records add the task's (task_id, lease_id,
// attempt), as base.With(…) would, but build that logger only when a record
// is written: With formats the attributes at once, which costs more than a
// small task's whole run when, as usual, nothing is logged for it.
type logger struct {
	base *slog.Logger
	t    *client.LeasedTask // nil for the worker's own records
	with atomic.Pointer[slog.Logger]
}

func (l *logger) logger() *slog.Logger {
	if l.t == nil {
		return l.base
	}
	if lg := l.with.Load(); lg != nil {
		return lg
	}
	lg := l.base.With("task_id", l.t.ID, "lease_id", l.t.LeaseID, "attempt", l.t.Attempt)
	l.with.Store(lg)
	return lg
}

// log is slog.Logger's log with the task's attributes and the clock's time;
// the record's source is the caller of Debug, Info, Warn or Error.
func (l *logger) log(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !l.base.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // skip Callers, log and the level's method
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	_ = l.logger().Handler().Handle(ctx, r)
}

func (l *logger) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args...) }
func (l *logger) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args...) }
func (l *logger) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args...) }
func (l *logger) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args...) }
