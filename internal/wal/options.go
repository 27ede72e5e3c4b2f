package wal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/groupcommit"
)

// SyncPolicy says when appended records count as durable.
type SyncPolicy int

const (
	// SyncAlways writes and fsyncs every batch before reporting it durable.
	// Acknowledged records survive a process crash, a kernel crash and a
	// power loss.
	SyncAlways SyncPolicy = iota
	// SyncNone writes every batch but never fsyncs it (segments are still
	// fsynced when created, sealed, recovered and at Close). UNSAFE:
	// acknowledged records survive a process crash but not a kernel crash or
	// a power loss. For benchmarks and throwaway environments only.
	SyncNone
)

// ParseSyncPolicy parses "always" or "none".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "none":
		return SyncNone, nil
	}
	return 0, fmt.Errorf("wal: unknown sync policy %q: valid values are \"always\" and \"none\"", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Defaults and limits of Options. A zero field takes its default.
const (
	DefaultSegmentBytes   = 64 << 20
	DefaultMaxRecordBytes = 8 << 20
	DefaultMaxBatchBytes  = 4 << 20
	// DefaultCommitInterval is the CommitInterval `tenure server` and
	// `tenure bench` use unless told otherwise (Options' zero is none).
	DefaultCommitInterval = time.Millisecond
	// MaxCommitInterval is the largest CommitInterval.
	MaxCommitInterval = groupcommit.MaxCommitInterval

	minSegmentBytes   = 256
	maxSegmentBytes   = 1 << 30
	maxMaxRecordBytes = 64 << 20
	maxMaxBatchBytes  = 256 << 20
)

// Options configure a Log.
type Options struct {
	// Dir holds the segment files; Open creates it if needed. The caller
	// passes <data-dir>/wal and must make sure a single Log uses it.
	Dir string
	// FS is the file system, nil for fsys.OS. Tests inject faults here.
	FS fsys.FS
	// Sync is the durability policy; the zero value is SyncAlways.
	Sync SyncPolicy
	// SegmentBytes is the maximum size of a segment file, header included,
	// default 64 MiB, between 256 bytes and 1 GiB. The writer starts a new
	// segment before a frame would cross it; a frame larger than
	// SegmentBytes goes alone into a fresh segment.
	SegmentBytes int64
	// MaxRecordBytes is the maximum payload size of one record, default
	// 8 MiB, at most 64 MiB. Append rejects larger payloads; on read, a frame
	// header claiming more is corruption, so a corrupt length never makes the
	// log allocate more than this.
	MaxRecordBytes int
	// MaxBatchBytes caps the bytes of one group-commit write, default 4 MiB,
	// at most 256 MiB. A write exceeds it only to carry a single larger frame.
	MaxBatchBytes int
	// CommitInterval is the least time between the starts of two
	// group-commit rounds under SyncAlways, when the last round carried
	// more than one Append call; 0 (the default) is none. A round that
	// would start sooner after such a round waits out the rest first, so
	// that what is appended meanwhile shares its write and fsync: under
	// load there are fewer fsyncs (each costs CPU whatever it writes: see
	// the package doc), for at most CommitInterval more latency. A log idle
	// that long, or used by one caller at a time, waits for nothing.
	// Between 0 and 100 ms.
	CommitInterval time.Duration
	// Logger receives recovery reports (torn tails truncated, leftovers
	// removed); nil discards them.
	Logger *slog.Logger
	// Observer, if set, is told how long each write and fsync of segment
	// data took (metrics); the writer goroutine calls it.
	Observer Observer
	// Clock times the writes and fsyncs the Observer is told of (default
	// clock.Real).
	Clock clock.Clock
	// Tail, if set, is handed the records of every write once they are
	// durable, while it is watched (the event streams' tail in memory,
	// docs/design/events.md).
	Tail Tail
	// Retain, if set, returns the LSN of the oldest record a reader of the
	// log still needs (0: none): DeleteBefore deletes no segment that holds
	// it or a later record.
	Retain func() uint64
}

// Tail is told of the log's records once they are durable, in LSN order,
// by the writer goroutine. It must be quick and must not block: the next
// group-commit round waits for it.
type Tail interface {
	// Watched reports whether anyone reads the tail now. The writer asks
	// after every write, and calls Publish only if it is.
	Watched() bool
	// Publish hands the records first, first+1, ..., durable now. The
	// entries and their payloads are valid only during the call.
	Publish(first uint64, entries []Entry)
}

// Observer is told of the log's writes, for metrics. The writer goroutine
// calls it after each operation: it must be cheap and must not block.
type Observer interface {
	// Wrote: one group-commit write of records frames took took.
	Wrote(records int, took time.Duration)
	// Synced: one fsync of segment data took took.
	Synced(took time.Duration)
}

// settings are o's numeric options with their defaults and limits.
func (o *Options) settings() []groupcommit.Setting {
	return []groupcommit.Setting{
		groupcommit.Number[int64]{Field: "SegmentBytes", Value: &o.SegmentBytes, Default: DefaultSegmentBytes, Min: minSegmentBytes, Max: maxSegmentBytes},
		groupcommit.Number[int]{Field: "MaxRecordBytes", Value: &o.MaxRecordBytes, Default: DefaultMaxRecordBytes, Min: 1, Max: maxMaxRecordBytes},
		groupcommit.Number[int]{Field: "MaxBatchBytes", Value: &o.MaxBatchBytes, Default: DefaultMaxBatchBytes, Min: 1, Max: maxMaxBatchBytes},
		groupcommit.Number[time.Duration]{Field: "CommitInterval", Value: &o.CommitInterval, Max: MaxCommitInterval},
	}
}

// withDefaults returns o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	groupcommit.SetDefaults(o.settings()...)
	if o.FS == nil {
		o.FS = fsys.OS
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return o
}

// validate checks o after withDefaults; each error names the field and its
// limit.
func (o Options) validate() error {
	if o.Dir == "" {
		return fmt.Errorf("wal: Options.Dir is empty: set it to the log directory (<data-dir>/wal)")
	}
	if o.Sync != SyncAlways && o.Sync != SyncNone {
		return fmt.Errorf("wal: Options.Sync is %v: must be SyncAlways or SyncNone", o.Sync)
	}
	return groupcommit.CheckSettings("wal", o.settings()...)
}
