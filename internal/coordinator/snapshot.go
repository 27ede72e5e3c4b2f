package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// SnapshotStore keeps a partition's snapshots: a directory of files in
// embedded mode (snapshot.Dir implements it).
type SnapshotStore interface {
	// List returns the LSNs of the stored snapshots, oldest first.
	List() ([]uint64, error)
	// Load reads the snapshot at lsn and verifies it completely; an error
	// means it must not be used.
	Load(lsn uint64) (*state.State, error)
	// Save stores img durably and atomically and returns its name (a
	// path, for logs and answers).
	Save(img *state.Image) (string, error)
	// Remove deletes the snapshot at lsn durably.
	Remove(lsn uint64) error
	// Discard takes the snapshot at lsn out of use (it is damaged, or it
	// is ahead of the log and that loss was accepted); a file store sets
	// the bytes aside for inspection.
	Discard(lsn uint64) (string, error)
}

// Compactor is the optional capability of a Log to delete the records that
// a snapshot replaced (wal.Log has it).
type Compactor interface {
	// DeleteBefore deletes whole storage units (segments) whose records
	// all have LSNs below lsn and returns how many it deleted.
	DeleteBefore(lsn uint64) (int, error)
}

// firstLSNer is the optional capability of a Log to say where it starts.
type firstLSNer interface{ FirstLSN() uint64 }

// Defaults of SnapshotConfig and Config.MaxPurgedPerRecord.
const (
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultSnapshotsKept      = 2
	DefaultMaxPurgedPerRecord = 2048
)

// purgeLimits bounds each slice of a purge that drops at most maxDrop
// tasks: it reads at most 8 finished tasks per drop (those not yet past
// the retention cost a read each) and passes over at most 64 tasks per
// drop (the others cost a bit each).
func purgeLimits(maxDrop int) state.PurgeLimits {
	return state.PurgeLimits{Pass: 64 * maxDrop, Read: 8 * maxDrop, Drop: maxDrop}
}

// SnapshotConfig configures Snapshot.
type SnapshotConfig struct {
	Store SnapshotStore
	// Retention is how long COMPLETED, FAILED and DEAD tasks stay after
	// their last update (default 7 days). Each snapshot first purges older
	// ones (Purge); from then on their request ids no longer deduplicate
	// submissions.
	Retention time.Duration
	// Keep is how many snapshots are kept, newest first (default 2). Log
	// records below the oldest kept snapshot are deleted.
	Keep int
}

func (sc SnapshotConfig) withDefaults() (SnapshotConfig, error) {
	if sc.Store == nil {
		return sc, errors.New("coordinator: SnapshotConfig.Store is nil")
	}
	if sc.Retention < 0 || sc.Keep < 0 {
		return sc, fmt.Errorf("coordinator: SnapshotConfig.Retention (%v) and Keep (%d) must not be negative", sc.Retention, sc.Keep)
	}
	setDefault(&sc.Retention, DefaultRetention)
	setDefault(&sc.Keep, DefaultSnapshotsKept)
	return sc, nil
}

// PurgeResult describes a retention purge.
type PurgeResult struct {
	// Purged counts the tasks dropped, Records the TasksPurgedRange
	// records that dropped them.
	Purged, Records int
	// LastLSN is the LSN of the last record written, 0 if none was.
	LastLSN uint64
	// MaxPause is the longest that requests were held at once: one slice.
	// Took is the whole purge.
	MaxPause, Took time.Duration
}

// Purge applies the retention period: it drops the COMPLETED, FAILED and
// DEAD tasks last updated more than retention ago (0: DefaultRetention),
// and with them their request ids. It goes through the tasks in creation
// order, one slice at a time (State.PurgeSlice, bounded by
// Config.MaxPurgedPerRecord), writing one TasksPurgedRange for each slice
// that drops a task and releasing the mutex between slices, so that
// requests are served during a purge of any size. Tasks created after it
// started are left to the next. It does not wait for its records to be
// durable: a purge answers nobody, and the next acknowledged record makes
// them durable with it.
func (c *Coordinator) Purge(ctx context.Context, retention time.Duration) (PurgeResult, error) {
	if retention < 0 {
		return PurgeResult{}, fmt.Errorf("coordinator: retention %v is negative", retention)
	}
	setDefault(&retention, DefaultRetention)
	res, _, err := c.purge(ctx, retention, false)
	return res, err
}

// purge runs Purge. With mark, its last slice writes its record even if it
// drops nothing, so that the state is at a new LSN when purge returns, with
// c.mu still held since held (a snapshot copies the state then); without,
// it returns with c.mu released. On error, c.mu is released.
func (c *Coordinator) purge(ctx context.Context, retention time.Duration, mark bool) (res PurgeResult, held time.Time, err error) {
	start := c.cfg.Clock.Now()
	lim := purgeLimits(c.cfg.MaxPurgedPerRecord)
	after, end := uint64(0), uint64(0)
	for first := true; ; first = false {
		if err := ctx.Err(); err != nil {
			return res, held, err
		}
		if err := c.lock(); err != nil {
			return res, held, err
		}
		held = c.cfg.Clock.Now()
		if first {
			end = c.st.LastLSN() // tasks created later are left to the next purge
		}
		now := c.now()
		before := now.Add(-retention)
		through, drop, done := c.st.PurgeSlice(before, after, lim)
		done = done || through >= end
		if drop > 0 || (done && (mark || c.st.Forgettable(now))) {
			lsn, err := c.write(&state.TasksPurgedRange{Before: before, At: now, AfterLSN: after, ThroughLSN: through})
			if err != nil {
				c.mu.Unlock()
				return res, held, err
			}
			res.Purged += drop
			res.Records++
			res.LastLSN = lsn
		}
		res.MaxPause = max(res.MaxPause, c.cfg.Clock.Now().Sub(held))
		after = through
		if done {
			if !mark {
				c.mu.Unlock()
			}
			res.Took = c.cfg.Clock.Now().Sub(start)
			return res, held, nil
		}
		c.mu.Unlock()
		runtime.Gosched() // let the requests that wait take the mutex
	}
}

// SnapshotResult describes a snapshot taken.
type SnapshotResult struct {
	LSN    uint64 // the snapshot holds the state after this record
	Tasks  int    // tasks in the snapshot
	Purged int    // tasks the retention purge dropped just before (Purge.Purged)
	Purge  PurgeResult
	Path   string
	// Pause is how long requests were held at once: the longest slice of
	// the purge or step of the copy of the state. Took is the whole
	// operation.
	Pause, Took time.Duration
	// Removed lists the older snapshots removed; DeletedSegments counts the
	// log segments deleted below the oldest kept snapshot.
	Removed         []uint64
	DeletedSegments int
}

// Snapshot applies the retention period (Purge, whose last record puts the
// state at a new LSN), copies the state as it is then in steps, with the
// mutex released between them (copyState), and then waits until the
// copy's records are durable, saves the copy, removes snapshots beyond
// sc.Keep and deletes the log records below the oldest kept one. One
// snapshot runs at a time; requests wait only for one slice of the purge
// or one step of the copy at a time (Pause is the longest).
func (c *Coordinator) Snapshot(ctx context.Context, sc SnapshotConfig) (SnapshotResult, error) {
	sc, err := sc.withDefaults()
	if err != nil {
		return SnapshotResult{}, err
	}
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	start := c.cfg.Clock.Now()
	pr, held, err := c.purge(ctx, sc.Retention, true)
	if err != nil {
		return SnapshotResult{Purged: pr.Purged, Purge: pr}, err
	}
	last := c.st.LastLSN()
	res := SnapshotResult{LSN: last, Purged: pr.Purged, Purge: pr, Tasks: c.st.Len()}
	img, pause, err := c.copyState(held)
	res.Pause = max(pr.MaxPause, pause)
	if err != nil {
		return res, err
	}

	// A snapshot must never be ahead of the durable log: a restart would
	// then start beyond the log's end.
	if err := c.wait(ctx, last); err != nil {
		return res, err
	}
	if res.Path, err = sc.Store.Save(img); err != nil {
		return res, fmt.Errorf("coordinator: saving snapshot at lsn %d: %w", last, err)
	}
	img = nil
	lsns, err := sc.Store.List()
	if err != nil {
		return res, fmt.Errorf("coordinator: listing snapshots: %w", err)
	}
	for len(lsns) > sc.Keep {
		if err := sc.Store.Remove(lsns[0]); err != nil {
			return res, fmt.Errorf("coordinator: removing old snapshot at lsn %d: %w", lsns[0], err)
		}
		res.Removed = append(res.Removed, lsns[0])
		lsns = lsns[1:]
	}
	// Records after the oldest kept snapshot stay, so that it can serve if
	// every newer one turns out damaged.
	if c.compactor != nil && len(lsns) > 0 {
		if res.DeletedSegments, err = c.compactor.DeleteBefore(lsns[0] + 1); err != nil {
			return res, fmt.Errorf("coordinator: deleting log segments below lsn %d: %w", lsns[0]+1, err)
		}
	}
	res.Took = c.cfg.Clock.Now().Sub(start)
	c.lg.Info("snapshot taken", "lsn", res.LSN, "tasks", res.Tasks, "purged", res.Purged, "path", res.Path,
		"pause", res.Pause, "took", res.Took, "removed_snapshots", len(res.Removed), "deleted_segments", res.DeletedSegments)
	return res, nil
}

// snapshotCopyStep is how many tasks one step of a snapshot's copy of the
// state copies, holding the mutex (about 1 ms at 0.25 µs a task).
const snapshotCopyStep = 4096

// copyState copies the state, c.mu held since held, in steps of
// snapshotCopyStep tasks with the mutex released between them
// (state.ImageCopy), and returns the copy and the longest hold. c.mu is
// released when it returns.
func (c *Coordinator) copyState(held time.Time) (*state.Image, time.Duration, error) {
	cp := c.st.BeginImage()
	var pause time.Duration
	for {
		done := cp.Step(snapshotCopyStep)
		pause = max(pause, c.cfg.Clock.Now().Sub(held))
		if done {
			img, err := cp.Finish()
			c.mu.Unlock()
			if err != nil {
				// The state is whole; only this copy of it is not.
				return nil, pause, fmt.Errorf("coordinator: copying the state for a snapshot: %w", err)
			}
			return img, pause, nil
		}
		c.mu.Unlock()
		runtime.Gosched() // let the requests that wait take the mutex
		if err := c.lock(); err != nil {
			c.mu.Lock()
			cp.Abort()
			c.mu.Unlock()
			return nil, pause, err
		}
		held = c.cfg.Clock.Now()
	}
}

// missingReporter is the optional capability of a Log to know records it
// held durably and lacks now (the file WAL's tail file), and to give them
// up.
type missingReporter interface {
	Missing() *wal.Missing
	AcceptMissing() error
}

// snapshotNamer is the optional capability of a SnapshotStore to name a
// snapshot for people (snapshot.Dir: "snapshot <path>").
type snapshotNamer interface{ Name(lsn uint64) string }

// Recover opens a coordinator from the newest snapshot in store that
// loads and verifies, replaying only the log after it. A damaged snapshot
// is logged with its problem and discarded, and the next older one is
// tried; with none left, the whole log is replayed, which is possible only
// if the log still starts at LSN 1. Otherwise Recover refuses, naming what
// it tried: nothing could be served without losing records.
//
// A snapshot that verifies but ends after the log's last record proves that
// acknowledged records are gone from the log, and so does a log that
// records how far it reached and finds itself short of it: Recover refuses
// with a *LostRecordsError, unless cfg.AcceptLostRecords is exactly the
// range lost; then it logs the loss as an error, has the log give up the
// records it lacks, discards every snapshot past the log's end and serves
// the log from an older snapshot or from its start. A damaged snapshot past
// the log's end proves nothing and is handled as any damaged one.
func Recover(ctx context.Context, log Log, store SnapshotStore, cfg Config) (*Coordinator, error) {
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	lsns, err := store.List()
	if err != nil {
		return nil, fmt.Errorf("coordinator: listing snapshots: %w", err)
	}
	first := uint64(1)
	if f, ok := log.(firstLSNer); ok {
		first = f.FirstLSN()
	}
	last := log.LastLSN()
	name := func(n uint64) string { return fmt.Sprintf("snapshot at lsn %d", n) }
	if nm, ok := store.(snapshotNamer); ok {
		name = nm.Name
	}
	var (
		st       *state.State
		problems []string
		discard  []uint64
		lost     *LostRecordsError // from the newest verified snapshot past the log's end
	)
	for i := len(lsns) - 1; i >= 0 && st == nil; i-- {
		n := lsns[i]
		var problem string
		switch {
		case n > last && lost != nil:
			problem = fmt.Sprintf("it ends at lsn %d, after the log's last record %d", n, last)
		case n > last:
			if _, err := store.Load(n); err != nil {
				problem = err.Error()
				break
			}
			lost = &LostRecordsError{Snapshot: name(n), SnapshotLSN: n, LogLastLSN: last, Lost: LSNRange{First: last + 1, Last: n}}
			problem = fmt.Sprintf("it verifies and ends at lsn %d, after the log's last record %d: records %s are gone from the log", n, last, lost.Lost)
		case n+1 < first:
			problem = fmt.Sprintf("the log starts at lsn %d and no longer holds the records after it", first)
		default:
			s, err := store.Load(n)
			if err == nil {
				st = s
				break
			}
			problem = err.Error()
		}
		if problem != "" {
			if lost == nil || n != lost.SnapshotLSN { // that one is refused or accepted below
				lg.Warn("snapshot unusable; trying an older one", "lsn", n, "problem", problem)
			}
			problems = append(problems, fmt.Sprintf("%s: %s", name(n), problem))
			if n > last || n+1 >= first {
				discard = append(discard, n)
			}
		}
	}
	if st == nil && first > 1 {
		return nil, fmt.Errorf("coordinator: cannot start: the log starts at lsn %d, so its earlier records exist only in snapshots, and no snapshot is usable (%d found): %v; restore the data directory from a backup",
			first, len(lsns), problems)
	}
	mr, _ := log.(missingReporter)
	if mr != nil {
		if m := mr.Missing(); m != nil {
			if lost == nil {
				lost = &LostRecordsError{LogLastLSN: last, Lost: LSNRange{First: last + 1}}
			}
			lost.Missing = m
			lost.Lost.Last = max(lost.Lost.Last, m.Last)
		}
	}
	accept := cfg.AcceptLostRecords
	switch {
	case lost != nil && accept != lost.Lost:
		if !accept.IsZero() {
			lost.Accepted = accept
		}
		return nil, lost
	case lost != nil:
		if lost.Missing != nil {
			if err := mr.AcceptMissing(); err != nil {
				return nil, fmt.Errorf("coordinator: giving up the records %s the log lacks: %w", lost.Lost, err)
			}
		}
		args := []any{"accepted", accept.String(), "log_last_lsn", last}
		if lost.Snapshot != "" {
			args = append(args, "snapshot", lost.Snapshot, "snapshot_lsn", lost.SnapshotLSN)
		}
		if lost.Missing != nil {
			args = append(args, "log_knew", lost.Missing.String())
		}
		lg.Error("accepted the loss of acknowledged records: serving the log without them", args...)
	case !accept.IsZero():
		lg.Warn("a loss of records is accepted (--accept-lost-records), but no records are lost: remove the setting, so that it never accepts a later loss",
			"accepted", accept.String(), "log_last_lsn", last)
	}
	if st == nil {
		if len(lsns) > 0 {
			lg.Warn("no usable snapshot; replaying the whole log", "snapshots", len(lsns))
		}
		st = state.New()
	} else if len(problems) > 0 {
		lg.Warn("started from an older snapshot", "lsn", st.LastLSN(), "skipped", len(problems))
	}
	c, err := OpenFrom(ctx, log, st, cfg)
	if err != nil {
		return nil, err
	}
	// Only now that the coordinator serves: a snapshot that is damaged or
	// describes records the log does not have must never be chosen later
	// (by a restart, or as the oldest kept one).
	for _, n := range discard {
		if where, err := store.Discard(n); err != nil {
			lg.Warn("could not discard unusable snapshot", "lsn", n, "err", err)
		} else {
			lg.Warn("discarded unusable snapshot", "lsn", n, "moved_to", where)
		}
	}
	return c, nil
}

// tailLog clamps replays to the records still in the log. History reads
// back the records that touched a task; the oldest of them may have been
// replaced by a snapshot, and then only the rest is shown.
type tailLog struct{ Log }

func (l tailLog) Replay(from uint64, fn func(lsn uint64, e wal.Entry) error) error {
	f, ok := l.Log.(firstLSNer)
	if !ok {
		return l.Log.Replay(from, fn)
	}
	for try := 0; ; try++ {
		called := false
		err := l.Log.Replay(max(from, f.FirstLSN()), func(lsn uint64, e wal.Entry) error {
			called = true
			return fn(lsn, e)
		})
		// Compaction overtook the replay before it delivered anything:
		// start again from the new first record.
		if errors.Is(err, wal.ErrCompacted) && !called && try < 3 {
			continue
		}
		return err
	}
}
