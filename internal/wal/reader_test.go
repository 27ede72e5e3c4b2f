package wal

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// readAll reads everything durable from r, max records per Read.
func readAll(t *testing.T, r *Reader, max int) []rec {
	t.Helper()
	var out []rec
	for {
		n, err := r.Read(max, func(lsn uint64, e Entry) error {
			out = append(out, rec{lsn, Entry{Type: e.Type, Payload: bytes.Clone(e.Payload)}})
			return nil
		})
		if err != nil {
			t.Fatalf("Read at lsn %d: %v", r.Next(), err)
		}
		if max > 0 && n > max {
			t.Fatalf("Read returned %d records, over max %d", n, max)
		}
		if n == 0 {
			return out
		}
	}
}

// TestReaderFollowsTheLog: a Reader reads what is durable, keeps its place
// between Reads while appends continue across segment rotations, and
// returns 0 when it has read everything durable.
func TestReaderFollowsTheLog(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir(), SegmentBytes: 2048})
	r, err := l.NewReader(0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := readAll(t, r, 7); len(got) != 0 {
		t.Fatalf("an empty log read %d records", len(got))
	}
	var got []rec
	for from := 1; from <= 400; from += 50 {
		appendN(t, l, from, from+49)
		got = append(got, readAll(t, r, 7)...)
		if r.Next() != uint64(from+50) {
			t.Fatalf("after lsn %d the reader is at %d", from+49, r.Next())
		}
	}
	checkRecords(t, got, 1, 400)
	if n := len(segmentFiles(t, l.opts.Dir)); n < 10 {
		t.Fatalf("%d segments: the test needs rotations", n)
	}

	// From the middle of a segment.
	r2, err := l.NewReader(123)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	checkRecords(t, readAll(t, r2, 0), 123, 400)
}

// TestReaderRereadsWhatFnRefused: a record fn fails on is read again.
func TestReaderRereadsWhatFnRefused(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir(), SegmentBytes: 1024})
	appendN(t, l, 1, 60)
	r, err := l.NewReader(1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := errors.New("stop")
	n, err := r.Read(0, func(lsn uint64, _ Entry) error {
		if lsn == 31 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 30 || r.Next() != 31 {
		t.Fatalf("Read = %d, %v, next %d; want 30, stop, 31", n, err, r.Next())
	}
	checkRecords(t, readAll(t, r, 0), 31, 60)
}

// TestReaderAndCompaction: a reader behind the log's first segment is
// refused ErrCompacted; with Options.Retain holding its position,
// DeleteBefore leaves its segments.
func TestReaderAndCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var hold atomic.Uint64
	l := openLog(t, Options{Dir: dir, SegmentBytes: 1024, Retain: hold.Load})
	appendN(t, l, 1, 200)
	r, err := l.NewReader(1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	checkRecords(t, readAll(t, r, 10), 1, 200)
	r2, _ := l.NewReader(5)
	defer r2.Close()

	hold.Store(5)
	if n, err := l.DeleteBefore(190); err != nil || n != 0 || l.FirstLSN() != 1 {
		t.Fatalf("DeleteBefore(190) holding lsn 5 deleted %d (%v); first lsn %d", n, err, l.FirstLSN())
	}
	hold.Store(0)
	if n, err := l.DeleteBefore(190); err != nil || n == 0 {
		t.Fatalf("DeleteBefore(190) with no hold: %d, %v", n, err)
	}
	if _, err := l.NewReader(1); !errors.Is(err, ErrCompacted) {
		t.Fatalf("NewReader below the first lsn: %v", err)
	}
	// r2 had no segment open: its next segment is gone.
	if _, err := r2.Read(0, func(uint64, Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Read of a reader whose segment was deleted: %v", err)
	}
	// r, at the end, reads on.
	appendN(t, l, 201, 230)
	checkRecords(t, readAll(t, r, 10), 201, 230)
}

// recordingTail is a Tail that keeps what it is handed.
type recordingTail struct {
	watched atomic.Bool
	mu      sync.Mutex
	got     []rec
	calls   int
}

func (t *recordingTail) Watched() bool { return t.watched.Load() }

func (t *recordingTail) Publish(first uint64, es []Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	for i, e := range es {
		t.got = append(t.got, rec{first + uint64(i), Entry{Type: e.Type, Payload: bytes.Clone(e.Payload)}})
	}
}

// TestTailIsHandedDurableRecordsWhileWatched: the writer hands the tail
// every record once durable, in order, while it is watched, and nothing
// otherwise.
func TestTailIsHandedDurableRecordsWhileWatched(t *testing.T) {
	t.Parallel()
	tail := &recordingTail{}
	l := openLog(t, Options{Dir: t.TempDir(), SegmentBytes: 2048, Tail: tail})
	appendN(t, l, 1, 20)
	if tail.calls != 0 {
		t.Fatalf("an unwatched tail was called %d times", tail.calls)
	}
	tail.watched.Store(true)
	appendN(t, l, 21, 300)
	mustClose(t, l) // the writer hands a write over after it is durable: wait for it to stop
	tail.mu.Lock()
	got := tail.got
	tail.mu.Unlock()
	// The last write before the tail was watched may have been handed
	// over (the writer asks after the write): what it was handed is
	// contiguous, and holds 21..300.
	for len(got) > 0 && got[0].lsn < 21 {
		got = got[1:]
	}
	checkRecords(t, got, 21, 300)
	if d := l.DurableLSN(); d != 300 {
		t.Fatalf("durable lsn %d", d)
	}
}

// TestReaderOfAClosedLog: a reader that has read everything of a closed log
// says so.
func TestReaderOfAClosedLog(t *testing.T) {
	t.Parallel()
	l := openLog(t, Options{Dir: t.TempDir()})
	appendN(t, l, 1, 5)
	r, _ := l.NewReader(1)
	defer r.Close()
	mustClose(t, l)
	checkRecords(t, readAll2(t, r), 1, 5)
	if _, err := r.Read(0, func(uint64, Entry) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read past the end of a closed log: %v", err)
	}
}

// readAll2 reads until Read returns an error or nothing.
func readAll2(t *testing.T, r *Reader) []rec {
	var out []rec
	for {
		n, err := r.Read(0, func(lsn uint64, e Entry) error {
			out = append(out, rec{lsn, Entry{Type: e.Type, Payload: bytes.Clone(e.Payload)}})
			return nil
		})
		if n == 0 || err != nil {
			return out
		}
	}
}
