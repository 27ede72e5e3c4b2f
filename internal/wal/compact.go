package wal

import (
	"fmt"
	"log/slog"
	"slices"
)

// DeleteBefore removes every segment whose records all have LSNs below lsn
// (the records a snapshot at lsn-1 replaces), oldest first, never the
// active segment nor one a reader still needs (Options.Retain), and returns
// how many it removed. Each removal is made
// durable (directory fsync) before the next, so a crash leaves the log a
// contiguous run of segments. FirstLSN moves up at once: a Replay from
// below it returns ErrCompacted, and one already running when its next
// segment goes returns ErrCompacted too.
//
// A failed removal stops there and returns the error; the segments not
// removed stay on disk, unknown to this Log until the next Open, which
// finds them again (they remain a contiguous prefix).
func (l *Log) DeleteBefore(lsn uint64) (deleted int, err error) {
	if err := l.gc.Closed(); err != nil {
		return 0, err
	}
	if l.opts.Retain != nil {
		if hold := l.opts.Retain(); hold != 0 {
			lsn = min(lsn, hold)
		}
	}
	l.mu.Lock()
	n := 0
	for n+1 < len(l.segments) && l.segments[n+1].first <= lsn {
		n++
	}
	victims := slices.Clone(l.segments[:n])
	if n > 0 {
		l.segments = slices.Clone(l.segments[n:])
	}
	l.mu.Unlock()

	for i, seg := range victims {
		if err := l.opts.FS.Remove(seg.path); err != nil {
			return i, fmt.Errorf("wal: delete segment %s: %w", seg.path, err)
		}
		if err := l.opts.FS.SyncDir(l.opts.Dir); err != nil {
			return i + 1, fmt.Errorf("wal: fsync directory %s after deleting %s: %w", l.opts.Dir, seg.path, err)
		}
	}
	if n > 0 {
		l.opts.Logger.Info("wal: deleted segments below a snapshot",
			slog.Int("segments", n), slog.Uint64("first_lsn", l.FirstLSN()))
	}
	return n, nil
}
