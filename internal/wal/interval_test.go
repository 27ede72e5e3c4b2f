package wal

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/fsys"
)

// durableWithoutTimer appends one record and waits until it is durable,
// failing if the writer starts a timer meanwhile: a round that should not
// wait (the clock does not move, so one that waits would never finish).
func durableWithoutTimer(t *testing.T, l *Log, clk *clock.Fake) uint64 {
	t.Helper()
	lsn, err := l.Append([]Entry{{Type: 1, Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	for l.DurableLSN() < lsn {
		if n := clk.Timers(); n > 0 {
			t.Fatalf("lsn %d: the writer waits (%d timers) where it should write at once", lsn, n)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	return lsn
}

// heldLog opens a log whose next data fsync, after twoCallRound arms it,
// is held until two more Append calls are made: they go out in one round,
// a round of more than one call, the sign of concurrent callers.
type heldLog struct {
	*Log
	armed            atomic.Bool
	entered, release chan struct{}
}

func openHeldLog(t *testing.T, opts Options) *heldLog {
	t.Helper()
	h := &heldLog{}
	opts.FS = &faultFS{FS: fsys.OS, beforeSync: func(name string) error {
		if isSegment(name) && h.armed.CompareAndSwap(true, false) {
			h.entered <- struct{}{}
			<-h.release
		}
		return nil
	}}
	h.Log = openLog(t, opts)
	return h
}

// twoCallRound makes a round of two Append calls and waits until it is
// durable.
func (h *heldLog) twoCallRound(t *testing.T) {
	t.Helper()
	h.entered, h.release = make(chan struct{}), make(chan struct{})
	h.armed.Store(true)
	if _, err := h.Append([]Entry{{Type: 1, Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	<-h.entered
	var last uint64
	for range 2 {
		lsn, err := h.Append([]Entry{{Type: 1, Payload: []byte("b")}})
		if err != nil {
			t.Fatal(err)
		}
		last = lsn
	}
	close(h.release)
	if err := h.Wait(context.Background(), last); err != nil {
		t.Fatal(err)
	}
}

func TestCommitIntervalSharesAnFsyncAndSkipsTheWaitWhenIdle(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Millisecond
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := openHeldLog(t, Options{Dir: t.TempDir(), Clock: clk, CommitInterval: interval})
	ctx := context.Background()
	appendOne := func() uint64 {
		t.Helper()
		lsn, err := l.Append([]Entry{{Type: 1, Payload: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}

	// One caller, one record at a time: each round carries one call, and
	// the next waits for nothing although the clock has not moved.
	for range 3 {
		durableWithoutTimer(t, l.Log, clk)
	}

	l.twoCallRound(t)
	// The next round would start within the interval after a round of two
	// calls: it waits out the interval, and what is appended meanwhile
	// shares its write and fsync.
	before := l.Stats()
	first := appendOne()
	for clk.Timers() == 0 {
		if l.DurableLSN() >= first {
			t.Fatalf("lsn %d durable within the interval after a round of two calls", first)
		}
		runtime.Gosched()
	}
	appendOne()
	last := appendOne()
	clk.Advance(interval - time.Millisecond)
	if d := l.DurableLSN(); d >= first {
		t.Fatalf("DurableLSN %d with 1ms of the interval left; want below %d", d, first)
	}
	clk.Advance(time.Millisecond)
	if err := l.Wait(ctx, last); err != nil {
		t.Fatal(err)
	}
	after := l.Stats()
	if got := after.Fsyncs - before.Fsyncs; got != 1 {
		t.Errorf("%d fsyncs for three records appended within one interval; want 1", got)
	}
	if got := after.Records - before.Records; got != 3 {
		t.Errorf("%d records written; want 3", got)
	}

	// A log idle for the interval starts its next round at once, although
	// the last round carried three calls.
	clk.Advance(interval)
	durableWithoutTimer(t, l.Log, clk)
}

func TestCommitIntervalDoesNotWaitUnderSyncNone(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := openLog(t, Options{Dir: t.TempDir(), Clock: clk, Sync: SyncNone, CommitInterval: 10 * time.Millisecond})
	for range 3 {
		durableWithoutTimer(t, l, clk)
	}
}

func TestCommitIntervalOutOfRange(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-time.Millisecond, 101 * time.Millisecond} {
		_, err := Open(Options{Dir: t.TempDir(), CommitInterval: d})
		if err == nil || !strings.Contains(err.Error(), "Options.CommitInterval is "+d.String()) {
			t.Errorf("CommitInterval %v: err = %v; want one naming the field and its value", d, err)
		}
	}
}

func TestCloseCutsTheCommitIntervalShort(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	dir := t.TempDir()
	l := openHeldLog(t, Options{Dir: dir, Clock: clk, CommitInterval: 50 * time.Millisecond})
	l.twoCallRound(t)
	lsn, err := l.Append([]Entry{{Type: 1, Payload: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitForTimers(1) // the writer waits out the interval
	// Close does not wait for the clock, and the record it flushes is on
	// disk after it.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, Options{Dir: dir})
	if got := l2.LastLSN(); got != lsn {
		t.Fatalf("reopened log ends at lsn %d; want %d", got, lsn)
	}
}
