package wal

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 1024, MaxRecordBytes: 4096}
	const n = 500
	l := openLog(t, opts)
	if got := l.FirstLSN(); got != 1 {
		t.Fatalf("fresh FirstLSN = %d, want 1", got)
	}
	if got := l.LastLSN(); got != 0 {
		t.Fatalf("fresh LastLSN = %d, want 0", got)
	}
	appendN(t, l, 1, n)
	if l.DurableLSN() != n || l.LastLSN() != n {
		t.Fatalf("DurableLSN %d LastLSN %d, want %d", l.DurableLSN(), l.LastLSN(), n)
	}
	checkRecords(t, replayAll(t, l, 1), 1, n) // before closing, from the live log
	mustClose(t, l)

	segs := segmentFiles(t, dir)
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several with SegmentBytes 1024", len(segs))
	}
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if frames := framesOf(t, s); fi.Size() > opts.SegmentBytes && len(frames) != 1 {
			t.Errorf("segment %s is %d bytes with %d frames; only a lone frame may exceed SegmentBytes", s, fi.Size(), len(frames))
		}
	}

	l = openLog(t, opts)
	if l.FirstLSN() != 1 || l.LastLSN() != n || l.DurableLSN() != n {
		t.Fatalf("after reopen: FirstLSN %d LastLSN %d DurableLSN %d, want 1, %d, %d", l.FirstLSN(), l.LastLSN(), l.DurableLSN(), n, n)
	}
	for _, from := range []int{0, 1, 2, 137, 250, n - 1, n} {
		checkRecords(t, replayAll(t, l, uint64(from)), max(from, 1), n)
	}
	if got := replayAll(t, l, n+1); len(got) != 0 {
		t.Fatalf("Replay(%d) gave %d records, want none", n+1, len(got))
	}
	appendN(t, l, n+1, n+10)
	mustClose(t, l)

	l = openLog(t, opts)
	checkRecords(t, replayAll(t, l, 1), 1, n+10)
}

func TestReplayStopsEarlyWithCallbackError(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir()})
	appendN(t, l, 1, 10)
	stop := errors.New("stop")
	var seen int
	err := l.Replay(3, func(lsn uint64, e Entry) error {
		seen++
		if lsn == 5 {
			return stop
		}
		return nil
	})
	if err != stop || seen != 3 {
		t.Fatalf("Replay = %v after %d records, want the callback's error after 3", err, seen)
	}
}

func TestReplayWhileAppending(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir(), SegmentBytes: 2048})
	const n = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			if _, err := l.AppendSync(context.Background(), []Entry{testEntry(i)}); err != nil {
				t.Errorf("AppendSync: %v", err)
				return
			}
		}
	}()
	for replays := 0; ; replays++ {
		select {
		case <-done:
			checkRecords(t, replayAll(t, l, 1), 1, n)
			return
		default:
		}
		before := l.DurableLSN()
		got := replayAll(t, l, 1)
		if uint64(len(got)) < before {
			t.Fatalf("replay %d saw %d records, but %d were durable before it started", replays, len(got), before)
		}
		checkRecords(t, got, 1, len(got))
	}
}

func TestCloseSemantics(t *testing.T) {
	t.Parallel()
	for _, policy := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := openLog(t, Options{Dir: dir, Sync: policy})
			ctx := context.Background()
			if err := l.Wait(ctx, 0); err != nil {
				t.Fatalf("Wait(0) = %v", err)
			}
			lsn, err := l.Append([]Entry{testEntry(1), testEntry(2)})
			if err != nil || lsn != 2 {
				t.Fatalf("Append = %d, %v; want 2", lsn, err)
			}
			if err := l.Wait(ctx, 3); err == nil || !strings.Contains(err.Error(), "last assigned lsn is 2") {
				t.Fatalf("Wait(3) = %v, want an error about an unassigned lsn", err)
			}
			if lsn, err := l.Append(nil); err != nil || lsn != 2 {
				t.Fatalf("Append(nil) = %d, %v; want 2, nil", lsn, err)
			}
			// Close flushes what was appended, even without a Wait.
			mustClose(t, l)
			mustClose(t, l)
			if l.DurableLSN() != 2 {
				t.Fatalf("DurableLSN after Close = %d, want 2", l.DurableLSN())
			}
			if s := l.Stats(); s.Fsyncs == 0 || s.Records != 2 {
				t.Fatalf("Stats after Close = %+v, want 2 records and an fsync under either policy", s)
			}
			if _, err := l.Append([]Entry{testEntry(3)}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append after Close = %v, want ErrClosed", err)
			}
			if err := l.Wait(ctx, 2); err != nil {
				t.Fatalf("Wait for a durable lsn after Close = %v, want nil", err)
			}
			if err := l.Wait(ctx, 3); !errors.Is(err, ErrClosed) {
				t.Fatalf("Wait(3) after Close = %v, want ErrClosed", err)
			}
			checkRecords(t, replayAll(t, l, 1), 1, 2) // Replay reads the files; it works after Close

			l = openLog(t, Options{Dir: dir})
			checkRecords(t, replayAll(t, l, 1), 1, 2)
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"no dir", Options{}, []string{"Options.Dir"}},
		{"sync", Options{Dir: dir, Sync: 7}, []string{"Options.Sync", "SyncPolicy(7)"}},
		{"segment small", Options{Dir: dir, SegmentBytes: 100}, []string{"Options.SegmentBytes is 100", "256", "1073741824"}},
		{"segment negative", Options{Dir: dir, SegmentBytes: -1}, []string{"Options.SegmentBytes is -1"}},
		{"segment huge", Options{Dir: dir, SegmentBytes: 2 << 30}, []string{"Options.SegmentBytes", "1073741824"}},
		{"record negative", Options{Dir: dir, MaxRecordBytes: -1}, []string{"Options.MaxRecordBytes is -1", "67108864"}},
		{"record huge", Options{Dir: dir, MaxRecordBytes: 128 << 20}, []string{"Options.MaxRecordBytes", "67108864"}},
		{"batch negative", Options{Dir: dir, MaxBatchBytes: -5}, []string{"Options.MaxBatchBytes is -5", "268435456"}},
	}
	for _, tt := range tests {
		err := tt.opts.withDefaults().validate()
		wantErrContains(t, err, tt.want...)
		if !strings.HasPrefix(err.Error(), "wal: ") {
			t.Errorf("%s: error %q lacks the wal: prefix", tt.name, err)
		}
		if _, err := Open(tt.opts); err == nil {
			t.Errorf("%s: Open succeeded", tt.name)
		}
	}
	if err := (Options{Dir: dir}).withDefaults().validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestParseSyncPolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []SyncPolicy{SyncAlways, SyncNone} {
		got, err := ParseSyncPolicy(p.String())
		if err != nil || got != p {
			t.Fatalf("ParseSyncPolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	_, err := ParseSyncPolicy("sometimes")
	wantErrContains(t, err, `"sometimes"`, `"always"`, `"none"`)
}

func TestAppendRejects(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir(), MaxRecordBytes: 1024})
	_, err := l.Append([]Entry{{Type: 1, Payload: make([]byte, 1024)}, {Type: 1, Payload: make([]byte, 1025)}})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append over the limit = %v, want ErrTooLarge", err)
	}
	wantErrContains(t, err, "MaxRecordBytes", "1024", "1025", "entry 1")
	_, err = l.Append([]Entry{{Type: 0, Payload: []byte("x")}})
	if !errors.Is(err, ErrInvalidEntry) {
		t.Fatalf("Append of type 0 = %v, want ErrInvalidEntry", err)
	}
	if l.LastLSN() != 0 {
		t.Fatalf("rejected appends assigned LSNs: LastLSN = %d", l.LastLSN())
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a rejected append made the log fail: %v", err)
	}
}

func TestMaxBatchBytesSplitsWrites(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir(), MaxBatchBytes: 100})
	es := make([]Entry, 50)
	for i := range es {
		es[i] = Entry{Type: 1, Payload: make([]byte, 60)} // 80-byte frames: one per write
	}
	if _, err := l.AppendSync(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Batches != 50 || s.Records != 50 || s.Bytes != 50*80 {
		t.Fatalf("Stats = %+v, want 50 writes of one 80-byte frame each", s)
	}
}

func TestBackpressure(t *testing.T) {
	t.Parallel()
	// 1 KiB of pending bytes at most: appenders block and resume many times.
	l := openLog(t, Options{Dir: t.TempDir(), MaxBatchBytes: 256, Sync: SyncNone})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			var last uint64
			for range 100 {
				lsn, err := l.Append([]Entry{{Type: uint16(g + 1), Payload: make([]byte, 100)}})
				if err != nil {
					t.Error(err)
					return
				}
				last = lsn
			}
			if err := l.Wait(context.Background(), last); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := len(replayAll(t, l, 1)); got != 1600 {
		t.Fatalf("replayed %d records, want 1600", got)
	}
}
