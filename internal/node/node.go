// Package node runs one embedded tenure node: it owns the data directory
// (an exclusive lock file), the file WAL and the snapshots in it, the
// coordinator recovered from them (newest valid snapshot, then the WAL
// after it), the coordinator's background expiry loop, and the background
// snapshots that apply the retention period and let old WAL segments go.
//
// Layout of the data directory: LOCK (pid of the owner, flock'ed), wal/
// (segments, package wal), snapshots/ (package snapshot).
//
// When the log fails (a write or fsync error), the coordinator stops
// serving; the node then reopens the WAL from disk and replays it, so memory
// again equals what is durable, and serves again. It never retries a failed
// fsync on the same file handle.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// Subdirectories of the data directory.
const (
	WALDir      = "wal"
	SnapshotDir = "snapshots"
)

// Defaults of the snapshot schedule.
const (
	DefaultSnapshotEveryRecords = 1_000_000
	DefaultSnapshotEvery        = 10 * time.Minute
)

// Config configures a node.
type Config struct {
	// DataDir holds the WAL (in DataDir/wal) and the lock file. Created if
	// missing.
	DataDir string
	// Sync is the WAL's fsync policy (default always).
	Sync wal.SyncPolicy
	// SegmentBytes is the WAL segment size (0: the WAL's default).
	SegmentBytes int64
	Coordinator  coordinator.Config
	Logger       *slog.Logger
	// RestartBackoff is the wait between attempts to reopen a failed log
	// (default 1 s).
	RestartBackoff time.Duration
	// FS is the file system under the WAL and the snapshots (default
	// fsys.OS). Tests inject faults here; the lock file is always on the
	// host file system.
	FS fsys.FS

	// A snapshot is taken in the background once SnapshotEveryRecords
	// records (default 1,000,000) were appended since the last one, or
	// SnapshotEvery (default 10 min) after it if any record was appended;
	// DisableSnapshots turns the schedule off (Snapshot still works).
	SnapshotEveryRecords uint64
	SnapshotEvery        time.Duration
	DisableSnapshots     bool
	// SnapshotCheckInterval is how often the schedule is checked (default
	// 1 s, at most SnapshotEvery).
	SnapshotCheckInterval time.Duration
	// Retention: COMPLETED, FAILED and DEAD tasks leave the state at the
	// first snapshot after they are this old (default 7 days); their
	// request ids stop deduplicating then. SnapshotsKept: how many
	// snapshots are kept (default 2); WAL segments wholly below the oldest
	// are deleted.
	Retention     time.Duration
	SnapshotsKept int

	// AcceptLostRecords accepts, for the first start only, the loss of
	// exactly this range of records: a snapshot that verifies ends after
	// the WAL's last record, so acknowledged records are gone, and Open
	// refuses (with a *coordinator.LostRecordsError naming the range)
	// unless this is that range; see coordinator.Config.AcceptLostRecords,
	// which must be left empty.
	AcceptLostRecords coordinator.LSNRange
}

func (c *Config) withDefaults() error {
	if c.DataDir == "" {
		return errors.New("node: DataDir is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Coordinator.Logger == nil {
		c.Coordinator.Logger = c.Logger
	}
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = time.Second
	}
	if c.FS == nil {
		c.FS = fsys.OS
	}
	if !c.Coordinator.AcceptLostRecords.IsZero() {
		return errors.New("node: set Config.AcceptLostRecords, not Config.Coordinator.AcceptLostRecords")
	}
	if c.SnapshotEvery < 0 || c.Retention < 0 || c.SnapshotsKept < 0 || c.SnapshotCheckInterval < 0 {
		return fmt.Errorf("node: SnapshotEvery (%v), Retention (%v), SnapshotsKept (%d) and SnapshotCheckInterval (%v) must not be negative",
			c.SnapshotEvery, c.Retention, c.SnapshotsKept, c.SnapshotCheckInterval)
	}
	if c.SnapshotEveryRecords == 0 {
		c.SnapshotEveryRecords = DefaultSnapshotEveryRecords
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotCheckInterval == 0 {
		c.SnapshotCheckInterval = time.Second
	}
	c.SnapshotCheckInterval = min(c.SnapshotCheckInterval, c.SnapshotEvery)
	if c.Retention == 0 {
		c.Retention = coordinator.DefaultRetention
	}
	if c.SnapshotsKept == 0 {
		c.SnapshotsKept = coordinator.DefaultSnapshotsKept
	}
	return nil
}

// ErrLocked means another process holds the data directory.
var ErrLocked = errors.New("node: data directory is in use")

// Node is a running embedded node. It implements the API's backend by
// forwarding to its current coordinator.
type Node struct {
	cfg  Config
	lg   *slog.Logger
	lock *os.File

	mu         sync.RWMutex
	log        *wal.Log
	coord      *coordinator.Coordinator
	restarting bool
	cause      error // why the node is reopening its WAL
	closed     bool

	// lastSnap is the LSN of the newest snapshot, lastSnapAt when the
	// schedule last took or tried one; owned by the snapshot loop and
	// Snapshot, under snapMu.
	snapMu     sync.Mutex
	lastSnap   uint64
	lastSnapAt time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Open locks the data directory, recovers its state (newest valid snapshot
// plus the WAL after it) and starts serving.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if err := fsys.MkdirAllSync(fsys.OS, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("node: creating data directory: %w", err)
	}
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, lg: cfg.Logger, lock: lock}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.open(ctx); err != nil {
		n.cancel()
		lock.Close()
		return nil, err
	}
	if !cfg.DisableSnapshots {
		n.wg.Go(n.snapshotLoop)
	}
	return n, nil
}

// lockDir takes an exclusive, non-blocking lock on DataDir/LOCK and writes
// our pid into it, so a second server fails at once with a clear message.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node: opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(f)
		f.Close()
		holder := strings.TrimSpace(string(pid))
		if holder == "" {
			holder = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is locked by another tenure process (server pid %s, or an offline `tenure wal` command); stop it, or pass a different --data-dir", ErrLocked, dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// LockShared takes a shared lock on dataDir/LOCK for an offline reader of
// the data directory (`tenure wal`): it fails with ErrLocked, naming the
// server's pid, while a server holds the directory, and keeps a server from
// starting until release is called. A data directory without a LOCK file
// was never used by a server; then there is nothing to lock.
func LockShared(dataDir string) (release func(), err error) {
	path := filepath.Join(dataDir, "LOCK")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node: opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(f)
		f.Close()
		holder := strings.TrimSpace(string(pid))
		if holder == "" {
			holder = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is in use by a running tenure server (pid %s)", ErrLocked, dataDir, holder)
	}
	return func() { f.Close() }, nil
}

func (n *Node) snapshots() snapshot.Dir {
	return snapshot.Dir{FS: n.cfg.FS, Path: filepath.Join(n.cfg.DataDir, SnapshotDir)}
}

func (n *Node) open(ctx context.Context) error {
	store := n.snapshots()
	if removed, err := store.Clean(); err != nil {
		return fmt.Errorf("node: %w", err)
	} else if len(removed) > 0 {
		n.lg.Warn("removed leftovers of interrupted snapshot writes", "files", removed)
	}
	l, err := wal.Open(wal.Options{
		Dir:          filepath.Join(n.cfg.DataDir, WALDir),
		Sync:         n.cfg.Sync,
		SegmentBytes: n.cfg.SegmentBytes,
		Logger:       n.lg,
		FS:           n.cfg.FS,
	})
	if err != nil {
		return fmt.Errorf("node: opening the WAL: %w", err)
	}
	cc := n.cfg.Coordinator
	cc.AcceptLostRecords = n.cfg.AcceptLostRecords
	c, err := coordinator.Recover(ctx, l, store, cc)
	if _, ok := errors.AsType[*coordinator.LostRecordsError](err); ok {
		l.Close()
		return fmt.Errorf("node: %w; %s", err, n.lossCause())
	}
	if err != nil {
		l.Close()
		return fmt.Errorf("node: %w", err)
	}
	// A loss is accepted once, at the start it was meant for: a reopen
	// after a storage failure must not accept another.
	n.cfg.AcceptLostRecords = coordinator.LSNRange{}
	lsns, err := store.List()
	if err != nil {
		c.Close()
		l.Close()
		return fmt.Errorf("node: %w", err)
	}
	n.snapMu.Lock()
	n.lastSnap, n.lastSnapAt = 0, time.Now()
	if len(lsns) > 0 {
		n.lastSnap = lsns[len(lsns)-1]
	}
	n.snapMu.Unlock()
	n.mu.Lock()
	n.log, n.coord = l, c
	n.mu.Unlock()
	n.wg.Go(func() {
		if err := c.Run(n.ctx); err != nil && n.ctx.Err() == nil {
			n.failed(c)
		}
	})
	return nil
}

// lossCause names the likely causes of records missing from the end of the
// WAL that a snapshot proves were there.
func (n *Node) lossCause() string {
	if n.cfg.Sync == wal.SyncNone {
		return "the WAL runs with fsync none, so the likely cause is an OS crash or power loss, which loses the records not yet written back to disk, acknowledged ones included"
	}
	return "likely causes: the WAL's segments were cut short, deleted or restored from a backup older than the snapshots, " +
		"the disk lost data it had reported written, or an OS crash or power loss while the server ran with fsync none"
}

// current returns the serving coordinator, or an unavailable error while
// the node reopens its log.
func (n *Node) current() (*coordinator.Coordinator, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return nil, fmt.Errorf("%w: the node is shutting down", coordinator.ErrUnavailable)
	}
	if n.restarting {
		return nil, fmt.Errorf("%w: the node is reopening its WAL after a storage failure (%v); retry shortly", coordinator.ErrUnavailable, n.cause)
	}
	return n.coord, nil
}

// failed is called when c stopped serving: reopen from the WAL, once.
func (n *Node) failed(c *coordinator.Coordinator) {
	n.mu.Lock()
	if n.closed || n.restarting || n.coord != c {
		n.mu.Unlock()
		return
	}
	n.restarting = true
	n.cause = c.Err()
	l := n.log
	n.mu.Unlock()
	n.lg.Error("storage failure: reopening the WAL from disk", "err", c.Err())
	n.wg.Go(func() {
		c.Close()
		l.Close() // the log already failed; Close only releases its files
		for n.ctx.Err() == nil {
			err := n.open(n.ctx)
			if err == nil {
				n.mu.Lock()
				n.restarting = false
				n.mu.Unlock()
				n.lg.Info("serving again after reopening the WAL")
				return
			}
			n.lg.Error("reopening the WAL failed; will retry", "err", err, "in", n.cfg.RestartBackoff)
			t := clock.Real.NewTimer(n.cfg.RestartBackoff)
			select {
			case <-n.ctx.Done():
				t.Stop()
			case <-t.C():
			}
		}
	})
}

// do runs op on the current coordinator and reopens the log if op found the
// coordinator stopped by a storage failure.
func do[T any](n *Node, op func(c *coordinator.Coordinator) (T, error)) (T, error) {
	c, err := n.current()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := op(c)
	if err != nil && errors.Is(err, coordinator.ErrUnavailable) && c.Err() != nil {
		n.failed(c)
	}
	return v, err
}

// Err is non-nil while the node does not serve.
func (n *Node) Err() error {
	_, err := n.current()
	return err
}

// Close stops the background loop, closes the coordinator and then the WAL
// (which flushes and fsyncs what was appended), and releases the lock.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	c, l := n.coord, n.log
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	c.Close()
	err := l.Close()
	n.lock.Close()
	return err
}

// Snapshot applies the retention period and takes a snapshot now (`tenure
// admin snapshot`), then deletes the WAL segments below the oldest kept
// snapshot.
func (n *Node) Snapshot(ctx context.Context) (coordinator.SnapshotResult, error) {
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	return n.snapshotLocked(ctx)
}

func (n *Node) snapshotLocked(ctx context.Context) (coordinator.SnapshotResult, error) {
	n.lastSnapAt = time.Now()
	res, err := do(n, func(c *coordinator.Coordinator) (coordinator.SnapshotResult, error) {
		return c.Snapshot(ctx, coordinator.SnapshotConfig{Store: n.snapshots(), Retention: n.cfg.Retention, Keep: n.cfg.SnapshotsKept})
	})
	if res.Path != "" {
		n.lastSnap = res.LSN
	}
	return res, err
}

// snapshotLoop takes snapshots on the schedule of Config until the node
// closes. A failed snapshot is logged and tried again at the next period; a
// storage failure of the log reopens the node as any request would.
func (n *Node) snapshotLoop() {
	for {
		t := clock.Real.NewTimer(n.cfg.SnapshotCheckInterval)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		n.mu.RLock()
		l, ok := n.log, !n.restarting && !n.closed
		n.mu.RUnlock()
		if !ok {
			continue
		}
		last := l.LastLSN()
		n.snapMu.Lock()
		due := last > n.lastSnap && (last-n.lastSnap >= n.cfg.SnapshotEveryRecords || time.Since(n.lastSnapAt) >= n.cfg.SnapshotEvery)
		if due {
			if _, err := n.snapshotLocked(n.ctx); err != nil && n.ctx.Err() == nil {
				n.lg.Error("background snapshot failed; will try again", "err", err, "in", n.cfg.SnapshotEvery)
				// Try again after another period or another
				// SnapshotEveryRecords records, not at every check.
				n.lastSnap = last
			}
		}
		n.snapMu.Unlock()
	}
}

// Coordinator returns the serving coordinator (for tools and tests).
func (n *Node) Coordinator() *coordinator.Coordinator {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.coord
}

// WALStats returns the current WAL's counters.
func (n *Node) WALStats() wal.Stats {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.log.Stats()
}

func (n *Node) Submit(ctx context.Context, req coordinator.SubmitRequest) (coordinator.SubmitResult, error) {
	return do(n, func(c *coordinator.Coordinator) (coordinator.SubmitResult, error) { return c.Submit(ctx, req) })
}

func (n *Node) SubmitBatch(ctx context.Context, reqs []coordinator.SubmitRequest) ([]coordinator.SubmitResult, error) {
	return do(n, func(c *coordinator.Coordinator) ([]coordinator.SubmitResult, error) { return c.SubmitBatch(ctx, reqs) })
}

func (n *Node) Get(ctx context.Context, taskID string) (*state.Task, error) {
	return do(n, func(c *coordinator.Coordinator) (*state.Task, error) { return c.Get(ctx, taskID) })
}

func (n *Node) List(ctx context.Context, f coordinator.ListFilter) ([]*state.Task, uint64, error) {
	type page struct {
		tasks []*state.Task
		next  uint64
	}
	p, err := do(n, func(c *coordinator.Coordinator) (page, error) {
		t, next, err := c.List(ctx, f)
		return page{t, next}, err
	})
	return p.tasks, p.next, err
}

func (n *Node) Kill(ctx context.Context, taskID, reason string) error {
	_, err := do(n, func(c *coordinator.Coordinator) (struct{}, error) { return struct{}{}, c.Kill(ctx, taskID, reason) })
	return err
}

func (n *Node) History(ctx context.Context, taskID string) ([]coordinator.HistoryEntry, error) {
	return do(n, func(c *coordinator.Coordinator) ([]coordinator.HistoryEntry, error) { return c.History(ctx, taskID) })
}

func (n *Node) Lease(ctx context.Context, req coordinator.LeaseRequest) ([]coordinator.Lease, error) {
	return do(n, func(c *coordinator.Coordinator) ([]coordinator.Lease, error) { return c.Lease(ctx, req) })
}

func (n *Node) Start(ctx context.Context, taskID, leaseID string) error {
	_, err := do(n, func(c *coordinator.Coordinator) (struct{}, error) { return struct{}{}, c.Start(ctx, taskID, leaseID) })
	return err
}

func (n *Node) Heartbeat(ctx context.Context, taskID, leaseID string) (time.Time, error) {
	return do(n, func(c *coordinator.Coordinator) (time.Time, error) { return c.Heartbeat(ctx, taskID, leaseID) })
}

func (n *Node) Commit(ctx context.Context, taskID, leaseID string, result []byte) (coordinator.FencingToken, error) {
	return do(n, func(c *coordinator.Coordinator) (coordinator.FencingToken, error) {
		return c.Commit(ctx, taskID, leaseID, result)
	})
}

func (n *Node) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := do(n, func(c *coordinator.Coordinator) (struct{}, error) {
		return struct{}{}, c.Complete(ctx, taskID, leaseID, result)
	})
	return err
}

func (n *Node) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (coordinator.FailResult, error) {
	return do(n, func(c *coordinator.Coordinator) (coordinator.FailResult, error) {
		return c.Fail(ctx, taskID, leaseID, reason, permanent)
	})
}
