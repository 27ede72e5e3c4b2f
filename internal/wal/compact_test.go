package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
)

func TestDeleteBefore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 1024})
	appendN(t, l, 1, 200)
	files := segmentFiles(t, dir)
	if len(files) < 5 {
		t.Fatalf("%d segments, want at least 5", len(files))
	}
	// The first LSN of the fourth segment: the first three hold only
	// records below it.
	fourth, _ := parseSegmentName(filepath.Base(files[3]))
	if n, err := l.DeleteBefore(fourth - 1); err != nil || n != 2 {
		t.Fatalf("DeleteBefore(%d) = %d, %v; want 2 (the third segment holds lsn %d)", fourth-1, n, err, fourth-1)
	}
	if n, err := l.DeleteBefore(fourth); err != nil || n != 1 {
		t.Fatalf("DeleteBefore(%d) = %d, %v; want 1", fourth, n, err)
	}
	if got := l.FirstLSN(); got != fourth {
		t.Fatalf("FirstLSN = %d, want %d", got, fourth)
	}
	if got := segmentFiles(t, dir); len(got) != len(files)-3 || got[0] != files[3] {
		t.Fatalf("files after delete: %v", got)
	}
	if err := l.Replay(fourth-1, func(uint64, Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Replay below FirstLSN: %v", err)
	}
	checkRecords(t, replayAll(t, l, fourth), int(fourth), 200)

	// Never the active segment, however high the bound.
	n, err := l.DeleteBefore(1 << 40)
	if err != nil || n != len(files)-4 {
		t.Fatalf("DeleteBefore(huge) = %d, %v; want %d", n, err, len(files)-4)
	}
	if got := segmentFiles(t, dir); len(got) != 1 || got[0] != files[len(files)-1] {
		t.Fatalf("active segment not kept: %v", got)
	}
	appendN(t, l, 201, 210)
	mustClose(t, l)
	if _, err := l.DeleteBefore(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("DeleteBefore after Close: %v", err)
	}

	// Reopen: the log starts at the kept segment and continues.
	l2 := openLog(t, Options{Dir: dir, SegmentBytes: 1024})
	last, _ := parseSegmentName(filepath.Base(files[len(files)-1]))
	if l2.FirstLSN() != last || l2.LastLSN() != 210 {
		t.Fatalf("reopened: FirstLSN %d LastLSN %d; want %d and 210", l2.FirstLSN(), l2.LastLSN(), last)
	}
	checkRecords(t, replayAll(t, l2, last), int(last), 210)
}

// TestDeleteBeforeConcurrentReplay runs replays while segments are appended
// and deleted: each replay either delivers exactly the records it asked for
// or stops with ErrCompacted, never a corruption error or a wrong record.
func TestDeleteBeforeConcurrentReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 512})
	appendN(t, l, 1, 50)
	var (
		wg        sync.WaitGroup
		stop      atomic.Bool
		compacted atomic.Int64
		complete  atomic.Int64
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load() || i < 20; i++ {
				from := l.FirstLSN() + uint64(w)
				want := from
				err := l.Replay(from, func(lsn uint64, e Entry) error {
					exp := testEntry(int(lsn))
					if lsn != want || e.Type != exp.Type || len(e.Payload) != len(exp.Payload) {
						return fmt.Errorf("got lsn %d type %d (%d bytes), want lsn %d", lsn, e.Type, len(e.Payload), want)
					}
					want++
					return nil
				})
				switch {
				case err == nil:
					complete.Add(1)
				case errors.Is(err, ErrCompacted):
					compacted.Add(1)
				default:
					t.Errorf("replay from %d: %v", from, err)
					return
				}
			}
		})
	}
	for i := 51; i <= 1500; i += 10 {
		appendN(t, l, i, i+9)
		if i%50 == 1 {
			if _, err := l.DeleteBefore(l.LastLSN() - 20); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if complete.Load() == 0 {
		t.Fatal("no replay completed")
	}
	t.Logf("%d replays complete, %d overtaken by compaction", complete.Load(), compacted.Load())
	checkRecords(t, replayAll(t, l, l.FirstLSN()), int(l.FirstLSN()), 1500)
}

// TestDeleteBeforePowerLoss cuts the power after every operation of a
// DeleteBefore: the log always reopens, starting at one of the segments,
// with every record from there on.
func TestDeleteBeforePowerLoss(t *testing.T) {
	t.Parallel()
	build := func(f *faultfs.FS) *Log {
		if err := f.MkdirAll("/d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := f.SyncDir("/"); err != nil {
			t.Fatal(err)
		}
		l, err := Open(Options{Dir: "/d/wal", FS: f, SegmentBytes: 512})
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 1, 120)
		return l
	}
	probe := faultfs.New()
	pl := build(probe)
	start := probe.Ops()
	n, err := pl.DeleteBefore(100)
	if err != nil || n < 3 {
		t.Fatalf("DeleteBefore = %d, %v", n, err)
	}
	end := probe.Ops()
	pl.Close()
	for cut := start + 1; cut <= end; cut++ {
		f := faultfs.New()
		l := build(f)
		f.CutPowerAfter(cut)
		l.DeleteBefore(100)
		l.Close()
		disk := f.PowerLoss()
		l2, err := Open(Options{Dir: "/d/wal", FS: disk, SegmentBytes: 512})
		if err != nil {
			t.Fatalf("cut after op %d: reopen: %v", cut, err)
		}
		first := l2.FirstLSN()
		if first > 100 || l2.LastLSN() != 120 {
			t.Fatalf("cut after op %d: log %d..%d", cut, first, l2.LastLSN())
		}
		checkRecords(t, replayAll(t, l2, first), int(first), 120)
		l2.Close()
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	src := writeLog(t, Options{SegmentBytes: 1024}, 120)
	before := readDirBytes(t, src)
	rep, err := Verify(Options{Dir: src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstLSN != 1 || rep.LastLSN != 120 || rep.Records != 120 || len(rep.Segments) != len(segmentFiles(t, src)) || len(rep.Notes) != 0 {
		t.Fatalf("report %+v", rep)
	}

	// A flipped bit in the middle: the segment and offset of that frame.
	segs := segmentFiles(t, src)
	frames := framesOf(t, segs[1])
	dir := copyDir(t, src)
	path := filepath.Join(dir, filepath.Base(segs[1]))
	b := mustRead(t, path)
	b[frames[2].off+frameHeaderSize] ^= 4
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(Options{Dir: dir}, nil)
	ce := asCorruption(t, err)
	if ce.Segment != path || ce.Offset != frames[2].off || ce.LSN != frames[2].lsn {
		t.Fatalf("corruption %+v, want %s offset %d", ce, path, frames[2].off)
	}

	// The check hook: a record that does not decode.
	_, err = Verify(Options{Dir: src}, func(lsn uint64, e Entry) error {
		if lsn == 77 {
			return errors.New("bad payload")
		}
		return nil
	})
	ce = asCorruption(t, err)
	if ce.LSN != 77 {
		t.Fatalf("check failure reported at lsn %d", ce.LSN)
	}
	wantErrContains(t, err, "record does not decode: bad payload")

	// A torn tail is a note, with file and offset, not a failure.
	dir = copyDir(t, src)
	last := segmentFiles(t, dir)[len(segs)-1]
	lf := lastFrame(t, last)
	if err := os.Truncate(last, lf.off+5); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(Options{Dir: dir}, nil)
	if err != nil || rep.LastLSN != 119 || len(rep.Notes) != 1 {
		t.Fatalf("torn tail: %+v, %v", rep, err)
	}
	wantErrContains(t, errors.New(rep.Notes[0]), last, fmt.Sprintf("offset %d", lf.off), "torn write")
	if after := readDirBytes(t, src); len(after) != len(before) {
		t.Fatal("Verify changed the directory")
	}
	for name, data := range before {
		if string(readDirBytes(t, src)[name]) != string(data) {
			t.Fatalf("Verify modified %s", name)
		}
	}
	if _, err := Verify(Options{Dir: filepath.Join(src, "missing")}, nil); err == nil {
		t.Fatal("Verify of a missing directory succeeded")
	}

	// The leftover of an interrupted segment creation is a note, and stays
	// (Open removes it, Verify reads only); a file not the log's is passed
	// over; a .wal file without a segment's name is corruption.
	dir = copyDir(t, src)
	tmp := filepath.Join(dir, segmentName(999)+tmpExt)
	other := filepath.Join(dir, "README")
	for _, p := range []string{tmp, other} {
		if err := os.WriteFile(p, []byte("TENU"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = Verify(Options{Dir: dir}, nil)
	if err != nil || rep.LastLSN != 120 || len(rep.Notes) != 1 {
		t.Fatalf("leftover: %+v, %v", rep, err)
	}
	wantErrContains(t, errors.New(rep.Notes[0]), tmp, "leftover of an interrupted segment creation")
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("Verify removed the leftover: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1.wal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(Options{Dir: dir}, nil)
	ce = asCorruption(t, err)
	if ce.Segment != filepath.Join(dir, "1.wal") {
		t.Fatalf("corruption %+v, want the badly named file", ce)
	}
}

func TestReplayDir(t *testing.T) {
	t.Parallel()
	src := writeLog(t, Options{SegmentBytes: 1024}, 90)
	var got []rec
	rep, err := ReplayDir(Options{Dir: src}, 30, func(lsn uint64, e Entry) error {
		got = append(got, rec{lsn, Entry{Type: e.Type, Payload: append([]byte(nil), e.Payload...)}})
		return nil
	})
	if err != nil || rep.LastLSN != 90 {
		t.Fatalf("ReplayDir: %+v, %v", rep, err)
	}
	checkRecords(t, got, 30, 90)

	// Torn tail: read up to the last valid record, the file untouched.
	dir := copyDir(t, src)
	segs := segmentFiles(t, dir)
	last := segs[len(segs)-1]
	lf := lastFrame(t, last)
	if err := os.Truncate(last, lf.off+3); err != nil {
		t.Fatal(err)
	}
	got = nil
	if _, err := ReplayDir(Options{Dir: dir}, 1, func(lsn uint64, e Entry) error {
		got = append(got, rec{lsn, Entry{Type: e.Type, Payload: append([]byte(nil), e.Payload...)}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, got, 1, 89)
	if fi, _ := os.Stat(last); fi.Size() != lf.off+3 {
		t.Fatal("ReplayDir truncated the torn tail")
	}

	// Below the first segment.
	os.Remove(segs[0])
	if _, err := ReplayDir(Options{Dir: dir}, 1, func(uint64, Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("ReplayDir below the first lsn: %v", err)
	}
}
