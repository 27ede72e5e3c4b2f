// Package node runs one embedded tenure node: it owns the data directory
// (an exclusive lock on it) and serves its one partition through a
// host.Host over the file WAL and the snapshot files in it. Everything
// else — recovery from the newest valid snapshot and the WAL after it, the
// expiry loop, the snapshot schedule that applies the retention period and
// lets old WAL segments go, and reopening the WAL from disk after a write
// or fsync error (never retrying a failed fsync on the same file handle) —
// is the host's, the same as for a partition in cluster mode.
//
// The data directory itself is flock'ed while a node runs (see dirLock), so
// deleting a file in it cannot let a second server in. Layout: LOCK (pid
// of the owner), wal/ (segments, package wal), snapshots/ (package
// snapshot).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/wal"
)

// Subdirectories of the data directory.
const (
	WALDir      = "wal"
	SnapshotDir = "snapshots"
)

// Config configures a node.
type Config struct {
	// DataDir holds the WAL (in DataDir/wal), the snapshots (in
	// DataDir/snapshots) and the lock file. Created if missing.
	DataDir string
	// Sync is the WAL's fsync policy (default always).
	Sync wal.SyncPolicy
	// SegmentBytes is the WAL segment size (0: the WAL's default).
	SegmentBytes int64
	// CommitInterval is the WAL's least time between two group-commit
	// rounds (wal.Options.CommitInterval; 0: none).
	CommitInterval time.Duration
	Coordinator    coordinator.Config
	// Snapshots is the snapshot schedule, retention and number of
	// snapshots kept (zero fields: the defaults of package host).
	Snapshots host.Schedule
	// RestartBackoff and MaxRestartBackoff bound the waits between
	// attempts to reopen a failed log (defaults 1 s and 15 s; see
	// host.Config).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// FS is the file system under the WAL and the snapshots (default
	// fsys.OS). Tests inject faults here; the lock file is always on the
	// host file system.
	FS fsys.FS
	// Clock is the node's time: record timestamps, lease expiry, the
	// snapshot schedule (default: Coordinator.Clock, else clock.Real).
	Clock  clock.Clock
	Logger *slog.Logger

	// AcceptLostRecords accepts, for the first start only, the loss of
	// exactly this range of records: a snapshot that verifies ends after
	// the WAL's last record, so acknowledged records are gone, and Open
	// refuses (with a *coordinator.LostRecordsError naming the range)
	// unless this is that range; see coordinator.Config.AcceptLostRecords,
	// which must be left empty.
	AcceptLostRecords coordinator.LSNRange

	// HostObserver and WALObserver, if set, are told of the node's opens,
	// snapshots, WAL writes and fsyncs (metrics); the events of every
	// record are Coordinator.Observer's.
	HostObserver host.Observer
	WALObserver  wal.Observer

	// EventTailBytes bounds the records the partition's event feed keeps
	// in memory while a stream watches it (0: events.DefaultTailBytes;
	// docs/design/events.md).
	EventTailBytes int
}

func (c *Config) withDefaults() error {
	if c.DataDir == "" {
		return errors.New("node: DataDir is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.FS == nil {
		c.FS = fsys.OS
	}
	if c.Clock == nil {
		c.Clock = c.Coordinator.Clock
	}
	if !c.Coordinator.AcceptLostRecords.IsZero() {
		return errors.New("node: set Config.AcceptLostRecords, not Config.Coordinator.AcceptLostRecords")
	}
	return nil
}

// ErrLocked means another process holds the data directory.
var ErrLocked = errors.New("node: data directory is in use")

// Node is a running embedded node.
type Node struct {
	cfg  Config
	lock *dirLock
	h    *host.Host
	// feed is the partition's event feed: the WAL's writer publishes to
	// it, and every WAL the host opens is attached to it.
	feed *events.Feed
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
	n := &Node{cfg: cfg, lock: lock}
	n.feed = events.NewFeed(events.FeedConfig{TailBytes: cfg.EventTailBytes, Lookup: n.where})
	cc := cfg.Coordinator
	cc.AcceptLostRecords = cfg.AcceptLostRecords
	n.h, err = host.Open(ctx, host.Config{
		Name:              "the node",
		Open:              n.openStorage,
		Coordinator:       cc,
		Schedule:          cfg.Snapshots,
		Reopen:            true,
		RestartBackoff:    cfg.RestartBackoff,
		MaxRestartBackoff: cfg.MaxRestartBackoff,
		Clock:             cfg.Clock,
		Logger:            cfg.Logger,
		Observer:          cfg.HostObserver,
	})
	if _, ok := errors.AsType[*coordinator.LostRecordsError](err); ok {
		lock.release()
		return nil, fmt.Errorf("node: %w; %s", err, n.lossCause())
	}
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("node: %w", err)
	}
	return n, nil
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

// lockFile is the data directory's pid file: who holds the directory, for
// the message a refused process prints. The lock itself is on the
// directory (dirLock).
const lockFile = "LOCK"

// dirLock is a data directory held by this process: the directory itself
// flock'ed, and the LOCK file in it flock'ed the same way.
//
// The lock that counts is the directory's. A lock on a file inside it
// guards only that file: once someone deletes LOCK, the next process
// creates a new one and locks it, and two servers write one WAL (the
// deleted file is still locked, by nobody that anyone can see). The
// directory cannot be deleted or replaced under a running server without
// taking its WAL and snapshots with it, so its lock holds as long as the
// data it guards is there. Locks on a directory need flock(2) on a local
// file system (Linux, the BSDs and macOS have it; a network file system
// may refuse, and then the server does not start).
//
// LOCK is locked too, so that a server or tool of a release that locked
// only that file is refused as well, and so is refused by it.
type dirLock struct {
	dir  *os.File
	file *os.File // nil for a shared lock of a directory without LOCK
}

func (l *dirLock) release() {
	if l == nil {
		return
	}
	if l.file != nil {
		l.file.Close()
	}
	l.dir.Close() // closing the last descriptor releases the flock
}

// lockDir takes an exclusive, non-blocking lock on the data directory (see
// dirLock) and writes our pid into its LOCK file, so that a second server
// fails at once with a clear message.
func lockDir(dir string) (*dirLock, error) {
	return takeDirLock(dir, syscall.LOCK_EX, func(holder string) error {
		return fmt.Errorf("%w: %s is locked by another tenure process (server pid %s, or an offline `tenure wal` command); stop it, or pass a different --data-dir", ErrLocked, dir, holder)
	})
}

// LockShared takes a shared lock on the data directory for an offline
// reader (`tenure wal`): it fails with ErrLocked, naming the server's pid,
// while a server holds the directory, and keeps a server from starting
// until release is called.
func LockShared(dataDir string) (release func(), err error) {
	l, err := takeDirLock(dataDir, syscall.LOCK_SH, func(holder string) error {
		return fmt.Errorf("%w: %s is in use by a running tenure server (pid %s)", ErrLocked, dataDir, holder)
	})
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// takeDirLock flocks dir, then its LOCK file, with how (LOCK_EX or
// LOCK_SH), without waiting; busy builds the error for a lock someone else
// holds, from the holder's pid as LOCK says it. An exclusive lock creates
// LOCK and writes our pid into it; a shared one creates nothing.
func takeDirLock(dir string, how int, busy func(holder string) error) (*dirLock, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("node: opening the data directory to lock it: %w", err)
	}
	if err := flock(d, how); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, busy(lockHolder(dir))
		}
		return nil, fmt.Errorf("node: locking the data directory %s: %w (it must be on a local file system that supports flock)", dir, err)
	}
	l := &dirLock{dir: d}
	path := filepath.Join(dir, lockFile)
	flag := os.O_RDONLY
	if how == syscall.LOCK_EX {
		flag = os.O_RDWR | os.O_CREATE
	}
	l.file, err = os.OpenFile(path, flag, 0o644)
	if how == syscall.LOCK_SH && errors.Is(err, os.ErrNotExist) {
		// No server ever ran here, or LOCK was deleted: the directory's
		// lock is all there is to take.
		return l, nil
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("node: opening lock file: %w", err)
	}
	if err := flock(l.file, how); err != nil {
		l.release()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, busy(lockHolder(dir))
		}
		return nil, fmt.Errorf("node: locking %s: %w", path, err)
	}
	if how == syscall.LOCK_EX {
		if err := l.file.Truncate(0); err == nil {
			l.file.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
	}
	return l, nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

// lockHolder is the pid the data directory's LOCK file names, for
// messages.
func lockHolder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if errors.Is(err, os.ErrNotExist) {
		return "unknown: its LOCK file was deleted"
	}
	if holder := strings.TrimSpace(string(b)); holder != "" {
		return holder
	}
	return "unknown"
}

func (n *Node) snapshots() snapshot.Dir {
	return snapshot.Dir{FS: n.cfg.FS, Path: filepath.Join(n.cfg.DataDir, SnapshotDir)}
}

// Before it opens the WAL, a node checks that the data directory takes a
// write of writeCheckBytes (written, fsynced and removed), so that on a full
// disk it does not replay its WAL only to fail at the next append: the host
// retries with a growing wait, replaying once there is room again.
const (
	writeCheckBytes = 1 << 20
	writeCheckFile  = ".tenure-write-check"
)

// openStorage opens the WAL and the snapshot directory, after checking
// that the data directory takes a write and removing the leftovers of
// interrupted snapshot writes.
func (n *Node) openStorage(context.Context) (host.Storage, error) {
	if err := fsys.CheckWrite(n.cfg.FS, n.cfg.DataDir, writeCheckFile, writeCheckBytes); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return host.Storage{}, fmt.Errorf("node: the data directory %s is out of disk space (a %d-byte write failed: %w): free space on its device", n.cfg.DataDir, writeCheckBytes, err)
		}
		return host.Storage{}, fmt.Errorf("node: the data directory %s does not take a write: %w", n.cfg.DataDir, err)
	}
	store := n.snapshots()
	if removed, err := store.Clean(); err != nil {
		return host.Storage{}, err
	} else if len(removed) > 0 {
		n.cfg.Logger.Warn("removed leftovers of interrupted snapshot writes", "files", removed)
	}
	l, err := wal.Open(wal.Options{
		Dir:            filepath.Join(n.cfg.DataDir, WALDir),
		Sync:           n.cfg.Sync,
		SegmentBytes:   n.cfg.SegmentBytes,
		CommitInterval: n.cfg.CommitInterval,
		Logger:         n.cfg.Logger,
		FS:             n.cfg.FS,
		Observer:       n.cfg.WALObserver,
		Clock:          n.cfg.Clock,
		Tail:           n.feed,
		Retain:         n.feed.Retain,
	})
	if err != nil {
		return host.Storage{}, fmt.Errorf("opening the WAL: %w", err)
	}
	n.feed.Attach(events.WAL(l))
	return host.Storage{Log: l, Snapshots: store}, nil
}

// Feeds gives the node's one event feed, whatever the namespace and queue:
// its one partition holds them all (server.EventSource).
func (n *Node) Feeds(context.Context, string, string) ([]*events.Feed, error) {
	return []*events.Feed{n.feed}, nil
}

// where finds the namespace, queue and workflow of tasks for the event
// feed, on the serving coordinator; while none serves (the WAL is being
// reopened) it fails, and so does the stream that asked, which its
// consumer resumes from its cursor.
func (n *Node) where(_ context.Context, ids []string, out []events.Target) error {
	c, err := n.h.Coordinator()
	if err != nil {
		return err
	}
	return events.Where(c, ids, out)
}

// Router routes every request of the API to the node's one partition.
func (n *Node) Router() route.Router { return route.Local(n.h) }

// Do runs fn on the serving coordinator (see host.Host.Do).
func (n *Node) Do(fn func(*coordinator.Coordinator) error) error { return n.h.Do(fn) }

// Err is non-nil while the node does not serve.
func (n *Node) Err() error { return n.h.Err() }

// Snapshot applies the retention period and takes a snapshot now (`tenure
// admin snapshot`), then deletes the WAL segments below the oldest kept
// snapshot.
func (n *Node) Snapshot(ctx context.Context) (coordinator.SnapshotResult, error) {
	return n.h.Snapshot(ctx)
}

// Coordinator returns the serving coordinator (for tools and tests), or
// nil while the node reopens its WAL.
func (n *Node) Coordinator() *coordinator.Coordinator {
	c, _ := n.h.Coordinator()
	return c
}

// WALStats returns the current WAL's counters (zero while the node reopens
// it).
func (n *Node) WALStats() wal.Stats {
	if l, ok := n.h.Storage().Log.(*wal.Log); ok {
		return l.Stats()
	}
	return wal.Stats{}
}

// WALFirstLSN returns the first record the current WAL still holds (0
// while the node reopens it).
func (n *Node) WALFirstLSN() uint64 {
	if l, ok := n.h.Storage().Log.(*wal.Log); ok {
		return l.FirstLSN()
	}
	return 0
}

// WALDisk returns the current WAL's segments and bytes on disk (zero while
// the node reopens it).
func (n *Node) WALDisk() wal.Disk {
	if l, ok := n.h.Storage().Log.(*wal.Log); ok {
		return l.Disk()
	}
	return wal.Disk{}
}

// Close stops serving, closes the WAL (which flushes and fsyncs what was
// appended) and releases the lock.
func (n *Node) Close() error {
	err := n.h.Close()
	n.lock.release()
	return err
}
