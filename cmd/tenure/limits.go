package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/server"
)

// limitFlags are the flags of `tenure server` that bound what clients can
// hold of it (docs/guides/limits.md; server.LoadLimits), in both modes.
type limitFlags struct {
	load            server.LoadLimits
	maxRequestBytes int
	// maxMemoryBytes is the node's memory budget (0: the default;
	// memory.go).
	maxMemoryBytes int64
	// eventTailBytes bounds the records an event feed keeps in memory
	// (node.Config.EventTailBytes).
	eventTailBytes int
}

// serverLimitFlag is one flag of limitFlags: p is its value, an *int or
// *int64 (a count, at least 1) or a *time.Duration (a timeout, at least
// 10ms), which holds its default before the flag is defined.
type serverLimitFlag struct {
	name  string
	p     any
	usage string
}

// flags are the flags of f that check bounds below.
func (f *limitFlags) flags() []serverLimitFlag {
	l := &f.load
	return []serverLimitFlag{
		{"max-connections", &l.MaxConnections,
			"connections open at once; one accepted past it is closed at once"},
		{"read-header-timeout", &l.ReadHeaderTimeout,
			"time a client has to send a request's headers; then its connection is closed"},
		{"body-read-timeout", &l.BodyReadTimeout,
			"time a client has, from a request's headers, to send its body; then it is answered deadline_exceeded and its connection (HTTP/2: stream) closed"},
		{"idle-timeout", &l.IdleTimeout,
			"an idle keep-alive connection is closed after this long"},
		{"write-timeout", &l.WriteTimeout,
			"time from a request's headers to the end of its answer (a long-poll's wait included); must exceed --body-read-timeout plus 30s"},
		{"max-request-bytes", &f.maxRequestBytes,
			"largest body of a SubmitBatch or CompleteBatch, in bytes (other calls have caps derived from the payload and result limits, or 64 KiB)"},
		{"max-inflight-request-bytes", &l.MaxInflightBodyBytes,
			"request body bytes being read at once over all requests; a body that does not fit waits up to 1s, then is answered unavailable (retry)"},
		{"max-long-polls", &l.MaxLongPolls,
			"Lease calls waiting for tasks at once; past it a Lease with a wait is answered resource_exhausted"},
		{"max-long-polls-per-worker", &l.MaxLongPollsPerWorker,
			"Lease calls of one worker id waiting for tasks at once; past it resource_exhausted"},
		{"max-waiters", &l.MaxWaiters,
			"WaitTask and WaitWorkflow calls waiting at once; past it resource_exhausted"},
		{"max-header-bytes", &l.MaxHeaderBytes,
			"largest headers of one request, in bytes; past it 431 (resource_exhausted) and the connection is closed"},
		{"max-discard-bytes", &l.MaxDiscardBytes,
			"bytes of a refused request (the rest of its body or headers) read and thrown away before its connection is closed, so that a client that sends it all before reading gets the answer, not a reset"},
		{"max-event-streams", &l.MaxEventStreams,
			"WatchEvents streams open at once; past it a stream is answered resource_exhausted"},
		{"event-tail-bytes", &f.eventTailBytes,
			"bytes of the newest records kept in memory for event streams while one watches (embedded mode); a stream behind them reads the WAL"},
	}
}

func (f *limitFlags) add(fs *pflag.FlagSet) {
	f.load = server.DefaultLoadLimits
	f.maxRequestBytes = server.DefaultMaxRequestBytes
	f.eventTailBytes = events.DefaultTailBytes
	for _, l := range f.flags() {
		switch p := l.p.(type) {
		case *int:
			fs.IntVar(p, l.name, *p, l.usage)
		case *int64:
			fs.Int64Var(p, l.name, *p, l.usage)
		case *time.Duration:
			fs.DurationVar(p, l.name, *p, l.usage)
		default:
			panic(fmt.Sprintf("limit flag --%s of type %T", l.name, p))
		}
	}
	// Its bounds are memoryBudget's.
	fs.Int64Var(&f.maxMemoryBytes, "max-memory-bytes", 0,
		"memory budget of what the node holds (payloads, results, schedules, each task's fixed cost; finished tasks until --retention purges them): past it, submits are refused (resource_exhausted, retry later) while workers drain; 0: half of the memory of the machine (or its cgroup) less 256 MiB")
}

// check refuses values out of range, naming the flag.
func (f *limitFlags) check() error {
	for _, fl := range f.flags() {
		var v int64
		switch p := fl.p.(type) {
		case *int:
			v = int64(*p)
		case *int64:
			v = *p
		case *time.Duration:
			if *p < 10*time.Millisecond {
				return usageError{fmt.Sprintf("--%s %v is under 10ms", fl.name, *p)}
			}
			continue
		}
		if v < 1 {
			return usageError{fmt.Sprintf("--%s %d must be at least 1", fl.name, v)}
		}
	}
	l := f.load
	if need := l.BodyReadTimeout + coordinator.DefaultLimits.MaxWait; l.WriteTimeout <= need {
		return usageError{fmt.Sprintf("--write-timeout %v must exceed --body-read-timeout (%v) plus the longest long-poll (%v), or answers to long-polls are cut off: pass --write-timeout above %v",
			l.WriteTimeout, l.BodyReadTimeout, coordinator.DefaultLimits.MaxWait, need)}
	}
	if f.maxRequestBytes > 1<<30 || l.MaxInflightBodyBytes > 16<<30 {
		return usageError{fmt.Sprintf("--max-request-bytes %d or --max-inflight-request-bytes %d is over its ceiling (1 GiB, 16 GiB)", f.maxRequestBytes, l.MaxInflightBodyBytes)}
	}
	if l.MaxHeaderBytes < 4<<10 || l.MaxHeaderBytes > 16<<20 {
		return usageError{fmt.Sprintf("--max-header-bytes %d is outside 4096..%d", l.MaxHeaderBytes, 16<<20)}
	}
	return nil
}
