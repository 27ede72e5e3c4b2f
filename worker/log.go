package worker

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"
)

// taskLog logs with a task's attributes (task_id, lease_id, attempt), as
// Worker.lg.With(…) would, but builds that logger only when a record is
// written: With formats the attributes at once, which costs more than a
// small task's whole run when, as usual, nothing is logged for it.
type taskLog struct {
	base *slog.Logger
	t    *Task
	lg   atomic.Pointer[slog.Logger]
}

func (l *taskLog) logger() *slog.Logger {
	if lg := l.lg.Load(); lg != nil {
		return lg
	}
	lg := l.base.With("task_id", l.t.ID, "lease_id", l.t.LeaseID, "attempt", l.t.Attempt)
	l.lg.Store(lg)
	return lg
}

// log is slog.Logger's log with the task's attributes; the record's source
// is the caller of Debug, Info, Warn or Error.
func (l *taskLog) log(level slog.Level, msg string, args ...any) {
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

func (l *taskLog) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args...) }
func (l *taskLog) Info(msg string, args ...any)  { l.log(slog.LevelInfo, msg, args...) }
func (l *taskLog) Warn(msg string, args ...any)  { l.log(slog.LevelWarn, msg, args...) }
func (l *taskLog) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args...) }
