package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
)

func TestGroupCommitConcurrentAppenders(t *testing.T) {
	t.Parallel()
	const goroutines, perG = 64, 200
	// The first data fsync after the appenders start is held until all 64
	// have appended once, so at least one batch provably carries many
	// records. Everything else runs at the disk's pace.
	var armed atomic.Bool
	release := make(chan struct{})
	ffs := &faultFS{FS: fsys.OS, beforeSync: func(name string) error {
		if isSegment(name) && armed.CompareAndSwap(true, false) {
			<-release
		}
		return nil
	}}
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FS: ffs, SegmentBytes: 64 << 10})
	armed.Store(true)

	lsns := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			payload := make([]byte, 16)
			for seq := range perG {
				binary.LittleEndian.PutUint32(payload[0:], uint32(g))
				binary.LittleEndian.PutUint32(payload[4:], uint32(seq))
				lsn, err := l.Append([]Entry{{Type: 1, Payload: payload}})
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Wait(context.Background(), lsn); err != nil {
					t.Error(err)
					return
				}
				if l.DurableLSN() < lsn {
					t.Errorf("Wait(%d) returned with DurableLSN %d", lsn, l.DurableLSN())
				}
				lsns[g] = append(lsns[g], lsn)
			}
		})
	}
	for l.LastLSN() < goroutines && l.Err() == nil {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	stats := l.Stats()
	mustClose(t, l)

	const total = goroutines * perG
	if stats.Records != total || stats.Batches >= stats.Records || stats.Fsyncs > stats.Batches {
		t.Fatalf("Stats = %+v: want %d records in fewer writes, and no more fsyncs than writes", stats, total)
	}
	t.Logf("%d records in %d writes and %d fsyncs (%.1f records/write)",
		stats.Records, stats.Batches, stats.Fsyncs, float64(stats.Records)/float64(stats.Batches))

	l = openLog(t, Options{Dir: dir})
	next := make([]int, goroutines) // next seq expected from each goroutine
	var count uint64
	err := l.Replay(1, func(lsn uint64, e Entry) error {
		count++
		if lsn != count {
			t.Fatalf("lsn %d at position %d: not dense", lsn, count)
		}
		g := int(binary.LittleEndian.Uint32(e.Payload[0:]))
		seq := int(binary.LittleEndian.Uint32(e.Payload[4:]))
		if g >= goroutines || seq != next[g] {
			t.Fatalf("lsn %d holds (g %d, seq %d); want seq %d of that goroutine next", lsn, g, seq, next[g])
		}
		if lsns[g][seq] != lsn {
			t.Fatalf("(g %d, seq %d) was acknowledged as lsn %d but replays as %d", g, seq, lsns[g][seq], lsn)
		}
		next[g]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != total {
		t.Fatalf("replayed %d records, want %d", count, total)
	}
}

var errInjected = syscall.EIO

func TestFsyncFailureIsFatalAndSticky(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	var failed atomic.Int32
	ffs := &faultFS{FS: fsys.OS, beforeSync: func(name string) error {
		if isSegment(name) && fail.Load() {
			failed.Add(1)
			return errInjected // the data was written but is not known to be on disk
		}
		return nil
	}}
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, FS: ffs})
	ctx := context.Background()
	appendN(t, l, 1, 10)

	fail.Store(true)
	// Waiters blocked on the failing batch and on a later one.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			_, err := l.AppendSync(ctx, []Entry{testEntry(11 + g)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, errInjected) {
			t.Fatalf("AppendSync during the failure = %v, want the fsync error", err)
		}
		wantErrContains(t, err, "wal: fsync segment", segmentName(1))
	}
	if n := failed.Load(); n != 1 {
		t.Fatalf("fsync attempted %d times after failing; it must never be retried", n)
	}
	fatal := l.Err()
	if !errors.Is(fatal, errInjected) {
		t.Fatalf("Err() = %v, want the fsync error", fatal)
	}
	if l.DurableLSN() != 10 {
		t.Fatalf("DurableLSN = %d, want 10: nothing after the failed fsync is durable", l.DurableLSN())
	}
	if _, err := l.Append([]Entry{testEntry(99)}); !errors.Is(err, errInjected) {
		t.Fatalf("Append after failure = %v, want the sticky error", err)
	}
	if err := l.Wait(ctx, 10); err != nil {
		t.Fatalf("Wait for an LSN made durable before the failure = %v, want nil", err)
	}
	if err := l.Wait(ctx, 11); !errors.Is(err, errInjected) {
		t.Fatalf("Wait(11) after failure = %v, want the sticky error", err)
	}
	if err := l.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close = %v, want the sticky error", err)
	}
	if err := l.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("second Close = %v, want the same error", err)
	}

	// The real files hold every acknowledged record; the unacknowledged ones
	// may be there too, since they were written.
	l = openLog(t, Options{Dir: dir})
	got := replayAll(t, l, 1)
	if len(got) < 10 {
		t.Fatalf("after reopen %d records, want at least the 10 acknowledged", len(got))
	}
	checkRecords(t, got[:10], 1, 10)
}

func TestWriteFailureENOSPC(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"data", "rotation"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			var fail atomic.Bool
			ffs := &faultFS{FS: fsys.OS, beforeWrite: func(name string, p []byte) error {
				header := strings.HasPrefix(string(p), segmentMagic)
				if fail.Load() && (where == "data") != header {
					return syscall.ENOSPC
				}
				return nil
			}}
			dir := t.TempDir()
			l := openLog(t, Options{Dir: dir, FS: ffs, SegmentBytes: 1024})
			appendN(t, l, 1, 5)
			fail.Store(true)
			var err error
			for i := 6; err == nil && i < 100; i++ {
				_, err = l.AppendSync(context.Background(), []Entry{testEntry(i)})
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("AppendSync = %v, want ENOSPC", err)
			}
			wantErrContains(t, err, "disk space")
			if _, err := l.Append([]Entry{testEntry(1)}); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append after failure = %v, want the sticky error", err)
			}
			durable := l.DurableLSN()
			l.Close()
			l = openLog(t, Options{Dir: dir})
			checkRecords(t, replayAll(t, l, 1), 1, int(durable))
		})
	}
}

func TestWaitContextCanceled(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	release := make(chan struct{})
	ffs := &faultFS{FS: fsys.OS, beforeSync: func(name string) error {
		if isSegment(name) && hold.Load() {
			<-release
		}
		return nil
	}}
	l := openLog(t, Options{Dir: t.TempDir(), FS: ffs})
	hold.Store(true)
	lsn, err := l.Append([]Entry{testEntry(1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, lsn); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a canceled context = %v, want context.Canceled", err)
	}
	hold.Store(false)
	close(release)
	if err := l.Wait(context.Background(), lsn); err != nil {
		t.Fatalf("Wait after the fsync completed = %v", err)
	}
}
