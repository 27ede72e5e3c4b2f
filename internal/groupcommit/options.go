package groupcommit

import (
	"cmp"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

const (
	// PendingBatches bounds the bytes queued for the writer to this many
	// times Options.MaxBatchBytes; Append blocks beyond it.
	PendingBatches = 4
	// MaxCommitInterval is the largest Options.CommitInterval.
	MaxCommitInterval = 100 * time.Millisecond
	// maxBytesOption bounds MaxRecordBytes and MaxBatchBytes: the queue,
	// PendingBatches of them, must count in an int on every platform.
	maxBytesOption = 256 << 20
)

// Options configure a Core. The log that owns the core fills them in from
// its own options, with its own defaults.
type Options struct {
	// Name is the owning log's package ("wal", "mysqllog"): it prefixes
	// the core's errors, and Options errors name the log's Options.
	Name string
	// MaxRecordBytes is the largest payload of one entry: Check refuses a
	// larger one (ErrTooLarge). At least 1, at most 256 MiB.
	MaxRecordBytes int
	// MaxBatchBytes is the size of a batch as the log counts it (the bytes
	// argument of Append): the queue holds at most PendingBatches of them
	// before Append blocks. At least 1, at most 256 MiB.
	MaxBatchBytes int
	// CommitInterval is the least time between the starts of two rounds
	// when the first carried more than one Append call (0 is none, at most
	// MaxCommitInterval). See the package documentation.
	CommitInterval time.Duration
	// Clock times the commit interval (default clock.Real).
	Clock clock.Clock
	// Admit, if set, is asked under the core's lock before each Append
	// call is queued (after the core's own refusals: failed, closed): an
	// error refuses the call, which then appends nothing. It must be cheap
	// and must not call the core.
	Admit func() error
	// Failed, if set, is told of the fatal error that stopped the writer,
	// once, under the core's lock (the log reports it). It must not call
	// the core.
	Failed func(err error)
}

// withDefaults returns o with its zero Clock set.
func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return o
}

// validate checks o after withDefaults; each error names the field and its
// limits.
func (o Options) validate() error {
	if o.Name == "" {
		return fmt.Errorf("groupcommit: Options.Name is empty: set it to the log's package name")
	}
	return cmp.Or(
		CheckRange(o.Name, "MaxRecordBytes", o.MaxRecordBytes, 1, maxBytesOption, 0),
		CheckRange(o.Name, "MaxBatchBytes", o.MaxBatchBytes, 1, maxBytesOption, 0),
		CheckRange(o.Name, "CommitInterval", o.CommitInterval, 0, MaxCommitInterval, 0),
	)
}

// Setting is one numeric option of a log, stated once with its default and
// limits: a log lists its settings (a Number per field) and gives them to
// SetDefaults in its withDefaults and to CheckSettings in its validate.
type Setting interface {
	setDefault()
	check(name string) error
}

// Number is a Setting of an int, int64 or time.Duration field: Value points
// at the field; 0 there takes Default, and then it must be between Min and
// Max.
type Number[T ~int | ~int64] struct {
	Field             string // its name in the log's Options
	Value             *T
	Default, Min, Max T
}

func (n Number[T]) setDefault() {
	if *n.Value == 0 {
		*n.Value = n.Default
	}
}

func (n Number[T]) check(name string) error {
	return CheckRange(name, n.Field, *n.Value, n.Min, n.Max, n.Default)
}

// SetDefaults sets each setting that is 0 to its default.
func SetDefaults(settings ...Setting) {
	for _, s := range settings {
		s.setDefault()
	}
}

// CheckSettings returns the error of the first setting out of its limits
// (CheckRange), naming it as the Options field of the log name.
func CheckSettings(name string, settings ...Setting) error {
	for _, s := range settings {
		if err := s.check(name); err != nil {
			return err
		}
	}
	return nil
}

// CheckRange checks one numeric option of a log: nil if v is between lo and
// hi, else an error that names it as name's Options.field, with its value
// and limits, and what 0 means when the option has a default other than 0.
// Both logs' options, and the core's, are checked with it, so that their
// errors read alike.
func CheckRange[T ~int | ~int64](name, field string, v, lo, hi, def T) error {
	if v >= lo && v <= hi {
		return nil
	}
	zero := ""
	if def != 0 {
		zero = fmt.Sprintf(" (0 means %v)", def)
	} else if lo == 0 {
		zero = " (0 means none)"
	}
	return fmt.Errorf("%s: Options.%s is %v: must be between %v and %v%s", name, field, v, lo, hi, zero)
}
