package wal

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
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

func TestCommitIntervalSharesAnFsyncAndSkipsTheWaitWhenIdle(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Millisecond
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := openLog(t, Options{Dir: t.TempDir(), Clock: clk, CommitInterval: interval})
	ctx := context.Background()

	// The first round has none before it: it waits for nothing.
	durableWithoutTimer(t, l, clk)

	// The next round would start within the interval (the clock has not
	// moved): it waits out the interval, and what is appended meanwhile
	// shares its write and fsync.
	before := l.Stats()
	var last uint64
	for i := range 3 {
		lsn, err := l.Append([]Entry{{Type: 1, Payload: []byte{byte(i)}}})
		if err != nil {
			t.Fatal(err)
		}
		// The writer waits on a timer of the clock, and the record is not
		// written before the clock moves.
		for i == 0 && clk.Timers() == 0 {
			if l.DurableLSN() >= lsn {
				t.Fatalf("lsn %d durable within the interval after the last round", lsn)
			}
			runtime.Gosched()
		}
		last = lsn
	}
	if d := l.DurableLSN(); d >= last-2 {
		t.Fatalf("DurableLSN %d before the interval passed; want below %d", d, last-2)
	}
	clk.Advance(interval - time.Millisecond)
	if d := l.DurableLSN(); d >= last-2 {
		t.Fatalf("DurableLSN %d with 1ms of the interval left; want below %d", d, last-2)
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

	// A log idle for the interval starts its next round at once.
	clk.Advance(interval)
	durableWithoutTimer(t, l, clk)
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
	l, err := Open(Options{Dir: dir, Clock: clk, CommitInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	durableWithoutTimer(t, l, clk)
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
