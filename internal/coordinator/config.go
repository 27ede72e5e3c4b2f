package coordinator

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/state"
)

// Limits bound every input. Values outside them are rejected with the limit
// in the message. The zero value of a field means its default.
type Limits struct {
	// MaxPayloadBytes caps a task's payload (default 1 MiB).
	MaxPayloadBytes int
	// MaxResultBytes caps a commit or completion result (default 1 MiB).
	MaxResultBytes int
	// MaxIDBytes caps namespaces, queues, request, task, lease and worker
	// ids (default 256).
	MaxIDBytes int
	// MaxReasonBytes caps failure and kill reasons (default 4 KiB).
	MaxReasonBytes int
	// MinWindow and MaxWindow bound a task's execution window (defaults
	// 100 ms and 24 h); DefaultWindow is used when none is given (30 s).
	MinWindow, MaxWindow, DefaultWindow time.Duration
	// MaxAttempts bounds a retry policy's attempts (default 1000).
	MaxAttempts uint32
	// DefaultRetry fills the unset fields of a submitted retry policy
	// (default: 3 attempts, 1 s initial backoff, 10 min max, multiplier 2).
	DefaultRetry state.RetryPolicy
	// MaxBackoff bounds both backoffs of a retry policy (default 24 h).
	MaxBackoff time.Duration
	// MaxDelay bounds how far in the future not_before may be (default 1
	// year).
	MaxDelay time.Duration
	// MaxBatch caps the tasks of one SubmitBatch (default 1000).
	MaxBatch int
	// MaxLeaseTasks caps the tasks of one Lease (default 1000).
	MaxLeaseTasks int
	// MaxWait caps a Lease long-poll (default 30 s).
	MaxWait time.Duration
	// MaxListPage caps the tasks of one List page (default 1000).
	MaxListPage int
	// MaxSnoozeDelay caps the delay of one Snooze (default 24 h, as a
	// retry's backoff).
	MaxSnoozeDelay time.Duration
	// MaxSnoozes caps the snoozes of one task (default 1000): each keeps
	// an execution in the task, so a task that snoozes for ever would grow
	// for ever.
	MaxSnoozes int
	// MaxProgressBytes caps a progress message (default 256).
	MaxProgressBytes int
	// MaxDependencies caps the dependencies of one task (default 10,000).
	MaxDependencies int
	// MaxWorkflowTasks caps the tasks of one workflow in a partition
	// (default 100,000).
	MaxWorkflowTasks int
	// MaxWorkflowDepth caps the longest chain of dependencies ending at a
	// new task (default 1,000).
	MaxWorkflowDepth int
	// MaxSpawn caps the tasks one commit spawns (default 10,000).
	MaxSpawn int
	// MaxAtomicBytes caps the size of the one record that creates the
	// tasks of a workflow batch or of a spawn: their payloads, names and
	// dependencies together (default 4 MiB, at most 6 MiB: under the
	// logs' record limit of 8 MiB).
	MaxAtomicBytes int
}

// DefaultLimits are the limits a zero Limits stands for.
var DefaultLimits = Limits{
	MaxPayloadBytes: 1 << 20,
	MaxResultBytes:  1 << 20,
	MaxIDBytes:      256,
	MaxReasonBytes:  4 << 10,
	MinWindow:       100 * time.Millisecond,
	MaxWindow:       24 * time.Hour,
	DefaultWindow:   30 * time.Second,
	MaxAttempts:     1000,
	DefaultRetry: state.RetryPolicy{
		MaxAttempts:    3,
		InitialBackoff: time.Second,
		MaxBackoff:     10 * time.Minute,
		Multiplier:     2,
	},
	MaxBackoff:    24 * time.Hour,
	MaxDelay:      365 * 24 * time.Hour,
	MaxBatch:      1000,
	MaxLeaseTasks: 1000,
	MaxWait:       30 * time.Second,
	MaxListPage:   1000,

	MaxSnoozeDelay:   24 * time.Hour,
	MaxSnoozes:       1000,
	MaxProgressBytes: 256,

	MaxDependencies:  10_000,
	MaxWorkflowTasks: 100_000,
	MaxWorkflowDepth: 1000,
	MaxSpawn:         10_000,
	MaxAtomicBytes:   4 << 20,
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	setDefault(&l.MaxPayloadBytes, d.MaxPayloadBytes)
	setDefault(&l.MaxResultBytes, d.MaxResultBytes)
	setDefault(&l.MaxIDBytes, d.MaxIDBytes)
	setDefault(&l.MaxReasonBytes, d.MaxReasonBytes)
	setDefault(&l.MinWindow, d.MinWindow)
	setDefault(&l.MaxWindow, d.MaxWindow)
	setDefault(&l.DefaultWindow, d.DefaultWindow)
	setDefault(&l.MaxAttempts, d.MaxAttempts)
	setDefault(&l.DefaultRetry.MaxAttempts, d.DefaultRetry.MaxAttempts)
	setDefault(&l.DefaultRetry.InitialBackoff, d.DefaultRetry.InitialBackoff)
	setDefault(&l.DefaultRetry.MaxBackoff, d.DefaultRetry.MaxBackoff)
	setDefault(&l.DefaultRetry.Multiplier, d.DefaultRetry.Multiplier)
	setDefault(&l.MaxBackoff, d.MaxBackoff)
	setDefault(&l.MaxDelay, d.MaxDelay)
	setDefault(&l.MaxBatch, d.MaxBatch)
	setDefault(&l.MaxLeaseTasks, d.MaxLeaseTasks)
	setDefault(&l.MaxWait, d.MaxWait)
	setDefault(&l.MaxListPage, d.MaxListPage)
	setDefault(&l.MaxSnoozeDelay, d.MaxSnoozeDelay)
	setDefault(&l.MaxSnoozes, d.MaxSnoozes)
	setDefault(&l.MaxProgressBytes, d.MaxProgressBytes)
	setDefault(&l.MaxDependencies, d.MaxDependencies)
	setDefault(&l.MaxWorkflowTasks, d.MaxWorkflowTasks)
	setDefault(&l.MaxWorkflowDepth, d.MaxWorkflowDepth)
	setDefault(&l.MaxSpawn, d.MaxSpawn)
	setDefault(&l.MaxAtomicBytes, d.MaxAtomicBytes)
	return l
}

// setDefault sets *p to d if it is zero.
func setDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

func (l Limits) validate() error {
	positive := []struct {
		name string
		v    int64
	}{
		{"MaxPayloadBytes", int64(l.MaxPayloadBytes)}, {"MaxResultBytes", int64(l.MaxResultBytes)},
		{"MaxIDBytes", int64(l.MaxIDBytes)}, {"MaxReasonBytes", int64(l.MaxReasonBytes)},
		{"MinWindow", int64(l.MinWindow)}, {"MaxBatch", int64(l.MaxBatch)},
		{"MaxLeaseTasks", int64(l.MaxLeaseTasks)}, {"MaxWait", int64(l.MaxWait)},
		{"MaxListPage", int64(l.MaxListPage)}, {"MaxBackoff", int64(l.MaxBackoff)}, {"MaxDelay", int64(l.MaxDelay)},
		{"MaxSnoozeDelay", int64(l.MaxSnoozeDelay)}, {"MaxSnoozes", int64(l.MaxSnoozes)}, {"MaxProgressBytes", int64(l.MaxProgressBytes)},
		{"MaxDependencies", int64(l.MaxDependencies)}, {"MaxWorkflowTasks", int64(l.MaxWorkflowTasks)},
		{"MaxWorkflowDepth", int64(l.MaxWorkflowDepth)}, {"MaxSpawn", int64(l.MaxSpawn)}, {"MaxAtomicBytes", int64(l.MaxAtomicBytes)},
	}
	for _, p := range positive {
		if p.v < 0 {
			return fmt.Errorf("coordinator: Limits.%s is negative (%d); use a positive value or 0 for the default", p.name, p.v)
		}
	}
	if l.MaxPayloadBytes > 64<<20 {
		return fmt.Errorf("coordinator: Limits.MaxPayloadBytes %d is over the 64 MiB ceiling", l.MaxPayloadBytes)
	}
	if l.MaxAtomicBytes > 6<<20 {
		return fmt.Errorf("coordinator: Limits.MaxAtomicBytes %d is over 6 MiB, which keeps one record under the logs' limit of 8 MiB", l.MaxAtomicBytes)
	}
	if l.MaxSpawn > 65536 || l.MaxBatch > 65536 {
		return fmt.Errorf("coordinator: Limits.MaxSpawn (%d) and MaxBatch (%d) are over the 65,536 tasks one record may create", l.MaxSpawn, l.MaxBatch)
	}
	if l.MinWindow > l.MaxWindow {
		return fmt.Errorf("coordinator: Limits.MinWindow %v is above MaxWindow %v", l.MinWindow, l.MaxWindow)
	}
	if l.DefaultWindow < l.MinWindow || l.DefaultWindow > l.MaxWindow {
		return fmt.Errorf("coordinator: Limits.DefaultWindow %v is outside [%v, %v]", l.DefaultWindow, l.MinWindow, l.MaxWindow)
	}
	r := l.DefaultRetry
	if r.MaxAttempts > l.MaxAttempts || r.Multiplier < 1 || r.InitialBackoff < 0 || r.MaxBackoff < r.InitialBackoff {
		return fmt.Errorf("coordinator: Limits.DefaultRetry %+v is not a valid policy (attempts 1..%d, multiplier >= 1, 0 <= initial <= max backoff)", r, l.MaxAttempts)
	}
	return nil
}

// Config configures a Coordinator. The zero value works: real clock,
// crypto-random ids, default limits, a 1 s expiry scan.
type Config struct {
	// Clock gives record timestamps and drives timers (default clock.Real).
	Clock clock.Clock
	// Rand is the randomness for task and lease ids (default crypto/rand).
	// Tests pass a seeded source so a run is reproducible.
	Rand io.Reader
	// Logger receives operational logs (default: discard).
	Logger *slog.Logger
	Limits Limits
	// ExpiryScanInterval is the period of the background scan for expired
	// leases (default 1 s). Leases are also expired lazily whenever a
	// request finds one past due.
	ExpiryScanInterval time.Duration
	// MaxExpiriesPerScan bounds the LeaseExpired records one scan writes
	// (default 10000); the rest wait for the next scan or a lazy check.
	MaxExpiriesPerScan int
	// MaxPurgedPerRecord bounds the tasks one TasksPurgedRange of the
	// retention purge drops (default 2048), and so how long the purge
	// holds requests at a time; it reads at most eight times as many.
	MaxPurgedPerRecord int
	// TaskIDSuffix is appended to every new task id. Cluster mode puts the
	// partition there ("-p<partition id>") so that any node can route a
	// request by its task id. It must start with '-', which no generated id
	// holds, and be at most 32 bytes.
	TaskIDSuffix string
	// Fence, if set, is appended as the first record after replay (before
	// expiring past-due leases): cluster mode's new owner of a partition
	// claims its epoch this way (docs/design/cluster.md, "Fencing").
	Fence *Fence
	// AcceptLostRecords is read by Recover only. When a snapshot that
	// verifies ends after the log's last record, acknowledged records are
	// gone and Recover refuses to start (*LostRecordsError), unless this is
	// exactly the range lost: then it logs the loss as an error, sets the
	// snapshot aside and serves the log as it is. A range that does not
	// match the loss accepts nothing, so a setting left in place never
	// accepts a later, different loss.
	AcceptLostRecords LSNRange
	// Observer, if set, is told of every record applied while serving and
	// of every call refused to a stale lease (metrics).
	Observer Observer
	// Memory, if set, is the memory budget of the node, shared by its
	// coordinators: past it, writes that create tasks or schedules are
	// refused with a *FullError (memory.go).
	Memory *MemoryBudget
}

// Fence is the owner a Fence record names.
type Fence struct {
	Epoch  uint64
	NodeID string
}

func (c Config) withDefaults() (Config, error) {
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Rand == nil {
		c.Rand = cryptoRand
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Limits = c.Limits.withDefaults()
	if err := c.Limits.validate(); err != nil {
		return c, err
	}
	if c.ExpiryScanInterval < 0 || c.MaxExpiriesPerScan < 0 || c.MaxPurgedPerRecord < 0 {
		return c, fmt.Errorf("coordinator: ExpiryScanInterval (%v), MaxExpiriesPerScan (%d) and MaxPurgedPerRecord (%d) must not be negative",
			c.ExpiryScanInterval, c.MaxExpiriesPerScan, c.MaxPurgedPerRecord)
	}
	if c.TaskIDSuffix != "" && (c.TaskIDSuffix[0] != '-' || len(c.TaskIDSuffix) > 32) {
		return c, fmt.Errorf("coordinator: TaskIDSuffix %q must start with '-' and be at most 32 bytes", c.TaskIDSuffix)
	}
	setDefault(&c.ExpiryScanInterval, time.Second)
	setDefault(&c.MaxExpiriesPerScan, 10000)
	setDefault(&c.MaxPurgedPerRecord, DefaultMaxPurgedPerRecord)
	return c, nil
}
