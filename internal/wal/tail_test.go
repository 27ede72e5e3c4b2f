package wal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/logbuf"
)

// openMissing opens dir, which must lack records first..last, and checks
// what the log and Verify say of it: the range, the words of its
// description, appends refused, and nothing modified on disk.
func openMissing(t *testing.T, dir string, first, last uint64, what ...string) *Log {
	t.Helper()
	rep, err := Verify(Options{Dir: dir}, nil)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if m := rep.Missing; m == nil || m.First != first || m.Last != last {
		t.Fatalf("Verify: missing %+v, want records %d-%d", rep.Missing, first, last)
	}
	before := readDirBytes(t, dir)
	delete(before, tailFile) // Open may only write it when it has none
	l, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	m := l.Missing()
	if m == nil || m.First != first || m.Last != last || m.TailFile != filepath.Join(dir, tailFile) {
		t.Fatalf("Missing() = %+v, want records %d-%d named by %s", m, first, last, filepath.Join(dir, tailFile))
	}
	for _, w := range what {
		if !strings.Contains(m.String(), w) {
			t.Fatalf("Missing() says %q, want %q in it", m, w)
		}
	}
	if l.LastLSN() != first-1 {
		t.Fatalf("LastLSN %d, want %d", l.LastLSN(), first-1)
	}
	if _, err := l.Append([]Entry{testEntry(int(first))}); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), m.String()) {
		t.Fatalf("Append while records are missing = %v, want ErrMissing saying %q", err, m)
	}
	after := readDirBytes(t, dir)
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("Open with missing records modified %s", name)
		}
	}
	return l
}

// acceptAndContinue accepts the loss on l, checks that appends continue
// right after the records kept, and that a reopen finds nothing missing
// and every record kept and appended.
func acceptAndContinue(t *testing.T, l *Log, dir string, kept int) {
	t.Helper()
	if err := l.AcceptMissing(); err != nil {
		t.Fatalf("AcceptMissing: %v", err)
	}
	if l.Missing() != nil {
		t.Fatalf("Missing() after AcceptMissing = %v", l.Missing())
	}
	appendN(t, l, kept+1, kept+5)
	mustClose(t, l)
	if rep, err := Verify(Options{Dir: dir}, nil); err != nil || rep.Missing != nil {
		t.Fatalf("Verify after the accepted loss: %v, missing %v", err, rep.Missing)
	}
	l2 := openLog(t, Options{Dir: dir})
	if l2.Missing() != nil {
		t.Fatalf("reopened after the accepted loss: missing %v", l2.Missing())
	}
	checkRecords(t, replayAll(t, l2, 1), 1, kept+5)
}

func segFirst(t *testing.T, path string) uint64 {
	t.Helper()
	first, ok := parseSegmentName(filepath.Base(path))
	if !ok {
		t.Fatalf("%s is not a segment", path)
	}
	return first
}

// TestDeletedNewestSegmentAfterCleanClose: the tail file written at Close
// names the log's last record, so the deleted newest segment is found,
// every record of it named, and the loss can be accepted.
func TestDeletedNewestSegmentAfterCleanClose(t *testing.T) {
	t.Parallel()
	deleteNewestAfterClose(t, 60, 1)
}

// deleteNewestAfterClose writes a log of n records in segments of 1 KiB
// and closes it, deletes its k newest segments, and checks that Open
// finds every record from the first of them to n missing, naming the
// newest as gone, and that the loss can be accepted.
func deleteNewestAfterClose(t *testing.T, n, k int) {
	t.Helper()
	dir := writeLogClosed(t, Options{SegmentBytes: 1024}, n)
	segs := segmentFiles(t, dir)
	if len(segs) < k+2 {
		t.Fatalf("%d segments; the test needs %d", len(segs), k+2)
	}
	for _, p := range segs[len(segs)-k:] {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	first := segFirst(t, segs[len(segs)-k])
	l := openMissing(t, dir, first, uint64(n), filepath.Base(segs[len(segs)-1])+", which it names as the newest, is gone")
	acceptAndContinue(t, l, dir, int(first-1))
}

// TestDeletedNewestSegmentAfterCrash: without a clean Close, the tail file
// names the first records written to the newest segment, which it wrote
// before they were acknowledged: the deletion is found all the same, the
// range from the segment's first record to at least those.
func TestDeletedNewestSegmentAfterCrash(t *testing.T) {
	t.Parallel()
	const n = 70
	dir := writeLog(t, Options{SegmentBytes: 1024}, n)
	segs := segmentFiles(t, dir)
	newest := segs[len(segs)-1]
	first := segFirst(t, newest)
	frames := framesOf(t, newest)
	if frames[len(frames)-1].lsn == first {
		t.Fatal("the newest segment holds one record; the test needs more after the first batch")
	}
	mark, err := readTail(fsys.OS, dir)
	if err != nil || mark == nil || mark.segment != first || mark.last < first || mark.last >= n {
		t.Fatalf("tail file after a crash: %+v, %v; want segment %d and a last lsn from its first batch, below %d", mark, err, first, n)
	}
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}
	l := openMissing(t, dir, first, mark.last, "is gone")
	acceptAndContinue(t, l, dir, int(first-1))
}

// TestDeletedTwoNewestSegments: the range runs from the end of what is
// left to what the tail file names.
func TestDeletedTwoNewestSegments(t *testing.T) {
	t.Parallel()
	deleteNewestAfterClose(t, 60, 2)
}

// TestDeletedEverySegment: the log starts again at lsn 1, and every record
// the tail file names is missing.
func TestDeletedEverySegment(t *testing.T) {
	t.Parallel()
	const n = 60
	dir := writeLogClosed(t, Options{SegmentBytes: 1024}, n)
	for _, p := range segmentFiles(t, dir) {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	l := openMissing(t, dir, 1, n, "no segment is left")
	acceptAndContinue(t, l, dir, 0)
}

// TestMiddleSegmentGapThenGiveUpTheRest: a deleted middle segment is a gap
// Open refuses, naming the records; doing what it says (moving the later
// segments away) turns it into missing records that can be accepted.
func TestMiddleSegmentGapThenGiveUpTheRest(t *testing.T) {
	t.Parallel()
	const n = 60
	dir := writeLogClosed(t, Options{SegmentBytes: 1024}, n)
	segs := segmentFiles(t, dir)
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	for _, open := range []func() error{
		func() error { _, err := Verify(Options{Dir: dir}, nil); return err },
		func() error { _, err := Open(Options{Dir: dir}); return err },
	} {
		err := open()
		ce := asCorruption(t, err)
		if ce.Segment != segs[2] {
			t.Fatalf("gap reported at %s, want %s", ce.Segment, segs[2])
		}
		wantErrContains(t, err, "move "+filepath.Base(segs[2])+" and every later segment out of the directory")
	}
	for _, p := range segs[2:] {
		if err := os.Rename(p, p+".moved"); err != nil {
			t.Fatal(err)
		}
	}
	first := segFirst(t, segs[1])
	l := openMissing(t, dir, first, n, filepath.Base(segs[len(segs)-1])+", which it names as the newest, is gone")
	acceptAndContinue(t, l, dir, int(first-1))
}

// TestLastSegmentCutAfterCleanClose: records cut from the end of the last
// segment, at a frame boundary or inside a frame, or damaged there, are
// not a torn write when the tail file names them: Open leaves the bytes,
// and accepting the loss cuts them.
func TestLastSegmentCutAfterCleanClose(t *testing.T) {
	t.Parallel()
	const n = 30
	src, seg, frames := oneSegment(t, n, true)
	k := frames[n-5] // lsn n-4
	for _, tc := range []struct {
		name string
		cut  func(path string) error
		what string
	}{
		{"at a frame boundary", func(p string) error { return os.Truncate(p, k.off) }, "ends at lsn 25: it was cut short"},
		{"inside a frame", func(p string) error { return os.Truncate(p, k.off+7) }, "ends at offset"},
		{"a damaged frame", func(p string) error {
			b := mustRead(t, p)
			b[k.off+frameHeaderSize+1] ^= 0x10
			return os.WriteFile(p, b[:k.off+k.size], 0o644)
		}, "not a valid record (frame checksum mismatch)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, src)
			path := filepath.Join(dir, filepath.Base(seg))
			if err := tc.cut(path); err != nil {
				t.Fatal(err)
			}
			l := openMissing(t, dir, k.lsn, n, tc.what)
			acceptAndContinue(t, l, dir, int(k.lsn-1))
			if fi, err := os.Stat(path); err != nil || fi.Size() < k.off {
				t.Fatalf("segment after the accepted loss: %v, %v", fi, err)
			}
		})
	}
}

// TestLogWithoutTailFile: a log written before the tail file existed
// opens as it is, and gets one; so does a fresh log. A deleted tail file
// is the same, and Verify notes it.
func TestLogWithoutTailFile(t *testing.T) {
	t.Parallel()
	const n = 60
	dir := writeLogClosed(t, Options{SegmentBytes: 1024}, n)
	if err := os.Remove(filepath.Join(dir, tailFile)); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(Options{Dir: dir}, nil)
	if err != nil || rep.Missing != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "no tail file") {
		t.Fatalf("Verify without a tail file: %v, missing %v, notes %q", err, rep.Missing, rep.Notes)
	}
	var logs logbuf.Buffer
	l, err := Open(Options{Dir: dir, Logger: newLogger(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	if l.Missing() != nil || !strings.Contains(logs.String(), "wrote the tail file") {
		t.Fatalf("open without a tail file: missing %v, log:\n%s", l.Missing(), logs.String())
	}
	mark, err := readTail(fsys.OS, dir)
	segs := segmentFiles(t, dir)
	if err != nil || mark == nil || mark.last != n || mark.segment != segFirst(t, segs[len(segs)-1]) {
		t.Fatalf("tail file written at open: %+v, %v", mark, err)
	}
	mustClose(t, l)

	fresh := t.TempDir()
	l = openLog(t, Options{Dir: fresh})
	if mark, err := readTail(fsys.OS, fresh); err != nil || mark == nil || *mark != (tailMark{segment: 1, last: 0}) {
		t.Fatalf("tail file of a fresh log: %+v, %v", mark, err)
	}
	mustClose(t, l)
}

// TestTailFileRollsAndClose: the tail file follows every new segment (once
// its first records are durable) and the clean end.
func TestTailFileRollsAndClose(t *testing.T) {
	t.Parallel()
	for _, sync := range []SyncPolicy{SyncAlways, SyncNone} {
		dir := t.TempDir()
		l := openLog(t, Options{Dir: dir, SegmentBytes: 1024, Sync: sync})
		for i := 1; i <= 60; i++ {
			if _, err := l.AppendSync(context.Background(), []Entry{testEntry(i)}); err != nil {
				t.Fatal(err)
			}
			segs := segmentFiles(t, dir)
			newest := segFirst(t, segs[len(segs)-1])
			mark, err := readTail(fsys.OS, dir)
			if err != nil || mark == nil || mark.segment != newest || mark.last < newest-1 || mark.last > uint64(i) {
				t.Fatalf("sync %v, after record %d: tail file %+v, %v; want the newest segment %d and a durable lsn at or after its start",
					sync, i, mark, err, newest)
			}
		}
		mustClose(t, l)
		if mark, err := readTail(fsys.OS, dir); err != nil || mark.last != 60 {
			t.Fatalf("sync %v: tail file after Close: %+v, %v; want lsn 60", sync, mark, err)
		}
	}
}

// TestDamagedTailFile: Open and Verify refuse, name the file and say what
// to do; Open modifies nothing. A leftover of an interrupted write of it
// is removed.
func TestDamagedTailFile(t *testing.T) {
	t.Parallel()
	src := writeLogClosed(t, Options{}, 10)
	for name, damage := range map[string]func(b []byte) []byte{
		"flipped bit": func(b []byte) []byte { b[26] ^= 1; return b },
		"cut short":   func(b []byte) []byte { return b[:20] },
		"empty":       func(b []byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			path := filepath.Join(dir, tailFile)
			if err := os.WriteFile(path, damage(mustRead(t, path)), 0o644); err != nil {
				t.Fatal(err)
			}
			before := readDirBytes(t, dir)
			for _, err := range []error{
				func() error { _, err := Open(Options{Dir: dir}); return err }(),
				func() error { _, err := Verify(Options{Dir: dir}, nil); return err }(),
			} {
				if !errors.Is(err, ErrTailDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "delete "+path) {
					t.Fatalf("open with a damaged tail file: %v", err)
				}
			}
			after := readDirBytes(t, dir)
			for name, b := range before {
				if !bytes.Equal(after[name], b) {
					t.Fatalf("refused Open modified %s", name)
				}
			}
		})
	}
	t.Run("leftover", func(t *testing.T) {
		dir := copyDir(t, src)
		tmp := filepath.Join(dir, tailFile+tmpExt)
		if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
		if rep, err := Verify(Options{Dir: dir}, nil); err != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], tmp) {
			t.Fatalf("Verify with a leftover: %v, %q", err, rep.Notes)
		}
		reopenExpect(t, Options{Dir: dir}, 10)
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("leftover still there: %v", err)
		}
	})
}
