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

func (f *limitFlags) add(fs *pflag.FlagSet) {
	d := server.DefaultLoadLimits
	fs.IntVar(&f.load.MaxConnections, "max-connections", d.MaxConnections,
		"connections open at once; one accepted past it is closed at once")
	fs.DurationVar(&f.load.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout,
		"time a client has to send a request's headers; then its connection is closed")
	fs.DurationVar(&f.load.BodyReadTimeout, "body-read-timeout", d.BodyReadTimeout,
		"time a client has, from a request's headers, to send its body; then it is answered deadline_exceeded and its connection (HTTP/2: stream) closed")
	fs.DurationVar(&f.load.IdleTimeout, "idle-timeout", d.IdleTimeout,
		"an idle keep-alive connection is closed after this long")
	fs.DurationVar(&f.load.WriteTimeout, "write-timeout", d.WriteTimeout,
		"time from a request's headers to the end of its answer (a long-poll's wait included); must exceed --body-read-timeout plus 30s")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes,
		"largest body of a SubmitBatch or CompleteBatch, in bytes (other calls have caps derived from the payload and result limits, or 64 KiB)")
	fs.Int64Var(&f.load.MaxInflightBodyBytes, "max-inflight-request-bytes", d.MaxInflightBodyBytes,
		"request body bytes being read at once over all requests; a body that does not fit waits up to 1s, then is answered unavailable (retry)")
	fs.IntVar(&f.load.MaxLongPolls, "max-long-polls", d.MaxLongPolls,
		"Lease calls waiting for tasks at once; past it a Lease with a wait is answered resource_exhausted")
	fs.IntVar(&f.load.MaxLongPollsPerWorker, "max-long-polls-per-worker", d.MaxLongPollsPerWorker,
		"Lease calls of one worker id waiting for tasks at once; past it resource_exhausted")
	fs.IntVar(&f.load.MaxWaiters, "max-waiters", d.MaxWaiters,
		"WaitTask and WaitWorkflow calls waiting at once; past it resource_exhausted")
	fs.Int64Var(&f.maxMemoryBytes, "max-memory-bytes", 0,
		"memory budget of what the node holds (payloads, results, schedules, each task's fixed cost; finished tasks until --retention purges them): past it, submits are refused (resource_exhausted, retry later) while workers drain; 0: half of the memory of the machine (or its cgroup) less 256 MiB")
	fs.IntVar(&f.load.MaxHeaderBytes, "max-header-bytes", d.MaxHeaderBytes,
		"largest headers of one request, in bytes; past it 431 (resource_exhausted) and the connection is closed")
	fs.Int64Var(&f.load.MaxDiscardBytes, "max-discard-bytes", d.MaxDiscardBytes,
		"bytes of a refused request (the rest of its body or headers) read and thrown away before its connection is closed, so that a client that sends it all before reading gets the answer, not a reset")
	fs.IntVar(&f.load.MaxEventStreams, "max-event-streams", d.MaxEventStreams,
		"WatchEvents streams open at once; past it a stream is answered resource_exhausted")
	fs.IntVar(&f.eventTailBytes, "event-tail-bytes", events.DefaultTailBytes,
		"bytes of the newest records kept in memory for event streams while one watches (embedded mode); a stream behind them reads the WAL")
}

// check refuses values out of range, naming the flag.
func (f *limitFlags) check() error {
	l := f.load
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"max-connections", int64(l.MaxConnections)},
		{"max-request-bytes", int64(f.maxRequestBytes)},
		{"max-inflight-request-bytes", l.MaxInflightBodyBytes},
		{"max-long-polls", int64(l.MaxLongPolls)},
		{"max-long-polls-per-worker", int64(l.MaxLongPollsPerWorker)},
		{"max-waiters", int64(l.MaxWaiters)},
		{"max-header-bytes", int64(l.MaxHeaderBytes)},
		{"max-discard-bytes", l.MaxDiscardBytes},
		{"max-event-streams", int64(l.MaxEventStreams)},
		{"event-tail-bytes", int64(f.eventTailBytes)},
	} {
		if c.v < 1 {
			return usageError{fmt.Sprintf("--%s %d must be at least 1", c.name, c.v)}
		}
	}
	for _, c := range []struct {
		name string
		v    time.Duration
	}{
		{"read-header-timeout", l.ReadHeaderTimeout},
		{"body-read-timeout", l.BodyReadTimeout},
		{"idle-timeout", l.IdleTimeout},
		{"write-timeout", l.WriteTimeout},
	} {
		if c.v < 10*time.Millisecond {
			return usageError{fmt.Sprintf("--%s %v is under 10ms", c.name, c.v)}
		}
	}
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
