package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/logbuf"
)

// writeLog creates a log of n test entries in a fresh directory and leaves
// it as a crash after the last append would: every record durable, but the
// tail file as the writer left it, not naming the log's last record as
// Close does (writeLogClosed).
func writeLog(t *testing.T, opts Options, n int) string {
	t.Helper()
	opts.Dir = t.TempDir()
	l := openLog(t, opts)
	appendN(t, l, 1, n)
	tail := mustRead(t, filepath.Join(opts.Dir, tailFile))
	mustClose(t, l)
	if err := os.WriteFile(filepath.Join(opts.Dir, tailFile), tail, 0o644); err != nil {
		t.Fatal(err)
	}
	return opts.Dir
}

// writeLogClosed is writeLog with a clean Close: the tail file names record
// n.
func writeLogClosed(t *testing.T, opts Options, n int) string {
	t.Helper()
	opts.Dir = t.TempDir()
	l := openLog(t, opts)
	appendN(t, l, 1, n)
	mustClose(t, l)
	return opts.Dir
}

// reopenExpect opens dir and checks that it holds exactly records 1..n and
// that the next append gets n+1.
func reopenExpect(t *testing.T, opts Options, n int) {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	if l.LastLSN() != uint64(n) || l.DurableLSN() != uint64(n) {
		t.Fatalf("LastLSN %d DurableLSN %d, want %d", l.LastLSN(), l.DurableLSN(), n)
	}
	checkRecords(t, replayAll(t, l, 1), 1, n)
	if lsn, err := l.Append([]Entry{testEntry(n + 1)}); err != nil || lsn != uint64(n+1) {
		t.Fatalf("Append after recovery = %d, %v; want %d", lsn, err, n+1)
	}
	mustClose(t, l)
}

func TestTornTailAtEveryOffsetOfLastRecord(t *testing.T) {
	t.Parallel()
	for _, segBytes := range []int64{0, 2048} { // one segment; several
		opts := Options{SegmentBytes: segBytes}
		const n = 30
		src := writeLog(t, opts, n)
		segs := segmentFiles(t, src)
		last := segs[len(segs)-1]
		frames := framesOf(t, last)
		lf := frames[len(frames)-1]
		if lf.lsn != n || lf.size < 100 {
			t.Fatalf("last frame %+v: want lsn %d and a payload worth cutting", lf, n)
		}
		for cut := lf.off; cut < lf.off+lf.size; cut++ {
			dir := copyDir(t, src)
			seg := filepath.Join(dir, filepath.Base(last))
			if err := os.Truncate(seg, cut); err != nil {
				t.Fatal(err)
			}
			var logs logbuf.Buffer
			opts := opts
			opts.Dir, opts.Logger = dir, newLogger(&logs)
			reopenExpect(t, opts, n-1)
			if cut > lf.off && !strings.Contains(logs.String(), "truncated torn write") {
				t.Fatalf("cut at %d: no torn-write report in the log:\n%s", cut, logs.String())
			}
		}
	}
}

func TestTornTailGarbageAfterLastFrame(t *testing.T) {
	t.Parallel()
	const n = 20
	src, seg, frames := oneSegment(t, n, false)
	lf := frames[n-1]
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 64<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	// A frame header cut off after a valid length, then zeroes: as a
	// half-written batch can leave it.
	var partial [frameHeaderSize]byte
	copy(partial[:], []byte{50, 0, 0, 0, 1, 2, 3})
	tails := map[string][]byte{
		"zeroes":          make([]byte, 4096),
		"one zero":        {0},
		"random":          random,
		"partial+zeroes":  append(partial[:7], make([]byte, 100)...),
		"last frame copy": mustRead(t, seg)[lf.off : lf.off+lf.size], // a repeat of lsn n is not a valid next frame...
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, src)
			path := filepath.Join(dir, filepath.Base(seg))
			orig := mustRead(t, path)
			if err := os.WriteFile(path, append(bytes.Clone(orig), tail...), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := Open(Options{Dir: dir})
			if name == "last frame copy" {
				// ...but its checksum is valid, so it is not a torn write
				// either: a repeated LSN is corruption.
				ce := asCorruption(t, err)
				if ce.Offset != int64(len(orig)) || ce.LSN != n+1 {
					t.Fatalf("corruption at %d lsn %d, want %d lsn %d", ce.Offset, ce.LSN, len(orig), n+1)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			l.Close()
			if got := mustRead(t, path); !bytes.Equal(got, orig) {
				t.Fatalf("segment is %d bytes after recovery, want the original %d", len(got), len(orig))
			}
			reopenExpect(t, Options{Dir: dir}, n)
		})
	}
}

func lastFrame(t testing.TB, path string) frameSpan {
	t.Helper()
	frames := framesOf(t, path)
	return frames[len(frames)-1]
}

// oneSegment writes a log of records 1..n that fits in one segment
// (writeLog, or writeLogClosed if closed) and returns its directory, the
// segment's path and the segment's frames, one a record.
func oneSegment(t *testing.T, n int, closed bool) (dir, seg string, frames []frameSpan) {
	t.Helper()
	if closed {
		dir = writeLogClosed(t, Options{}, n)
	} else {
		dir = writeLog(t, Options{}, n)
	}
	segs := segmentFiles(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d records made %d segments, want 1", n, len(segs))
	}
	frames = framesOf(t, segs[0])
	if len(frames) != n {
		t.Fatalf("the segment of %d records has %d frames", n, len(frames))
	}
	return dir, segs[0], frames
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flipAndOpen flips one bit of path at off in a copy of src and returns the
// copy's directory and the error of Open, checking that Open modified
// nothing.
func flipAndOpen(t *testing.T, src, segment string, off int64, bit uint) (string, error) {
	t.Helper()
	dir := copyDir(t, src)
	path := filepath.Join(dir, filepath.Base(segment))
	b := mustRead(t, path)
	b[off] ^= 1 << bit
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := readDirBytes(t, dir)
	l, err := Open(Options{Dir: dir})
	if err == nil {
		l.Close()
		return dir, nil
	}
	after := readDirBytes(t, dir)
	if len(after) != len(before) {
		t.Fatalf("Open failed but changed the directory: %d files, had %d", len(after), len(before))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("Open failed but modified %s", name)
		}
	}
	return dir, err
}

func TestFlippedBitInMiddleRecordIsCorruption(t *testing.T) {
	t.Parallel()
	const n = 40
	src, seg, frames := oneSegment(t, n, false)
	mid := frames[n/2]
	// Every byte of the frame, the length, checksum, type, reserved, lsn and
	// payload alike, and a high and a low bit of each.
	for off := mid.off; off < mid.off+mid.size; off++ {
		for _, bit := range []uint{0, 7} {
			dir, err := flipAndOpen(t, src, seg, off, bit)
			ce := asCorruption(t, err)
			wantSeg := filepath.Join(dir, filepath.Base(seg))
			if ce.Segment != wantSeg || ce.Offset != mid.off || ce.LSN != mid.lsn {
				t.Fatalf("flip at %d bit %d: corruption at %s offset %d lsn %d; want %s offset %d lsn %d (%v)",
					off, bit, ce.Segment, ce.Offset, ce.LSN, wantSeg, mid.off, mid.lsn, err)
			}
			wantErrContains(t, err, wantSeg, "offset "+itoa(mid.off), "tenure wal verify")
		}
	}
}

func TestFlippedBitInNonLastSegmentIsCorruption(t *testing.T) {
	t.Parallel()
	src := writeLog(t, Options{SegmentBytes: 1024}, 60)
	segs := segmentFiles(t, src)
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	seg := segs[1]
	frames := framesOf(t, seg)
	lf := frames[len(frames)-1] // its last frame: nothing follows it in this file
	dir, err := flipAndOpen(t, src, seg, lf.off+lf.size-1, 3)
	ce := asCorruption(t, err)
	if ce.Segment != filepath.Join(dir, filepath.Base(seg)) || ce.Offset != lf.off || ce.LSN != lf.lsn {
		t.Fatalf("corruption %+v, want %s offset %d lsn %d", ce, seg, lf.off, lf.lsn)
	}
	wantErrContains(t, err, "not the last")

	// A damaged segment header.
	dir, err = flipAndOpen(t, src, seg, 17, 0)
	ce = asCorruption(t, err)
	if ce.Segment != filepath.Join(dir, filepath.Base(seg)) || ce.Offset != 0 {
		t.Fatalf("corruption %+v, want %s offset 0", ce, seg)
	}
}

func TestFlippedBitInLastRecordIsTornTail(t *testing.T) {
	t.Parallel()
	// Documented limitation: damage to the very last record cannot be told
	// from a torn write; it is truncated.
	const n = 10
	src, seg, frames := oneSegment(t, n, false)
	lf := frames[n-1]
	dir, err := flipAndOpen(t, src, seg, lf.off+frameHeaderSize+3, 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, filepath.Base(seg))); err != nil || fi.Size() != lf.off {
		t.Fatalf("segment size %v, %v; want truncated to %d", fi.Size(), err, lf.off)
	}
	reopenExpect(t, Options{Dir: dir}, n-1)
}

func TestLoweredMaxRecordBytesIsNotTruncation(t *testing.T) {
	t.Parallel()
	// Record 41 has a 1500-byte payload and is the last one. Reopening with a
	// smaller limit must not drop it as torn.
	const n = 41
	src := writeLog(t, Options{}, n)
	before := readDirBytes(t, src)
	_, err := Open(Options{Dir: src, MaxRecordBytes: 1000})
	ce := asCorruption(t, err)
	if ce.LSN != n {
		t.Fatalf("corruption at lsn %d, want %d: %v", ce.LSN, n, err)
	}
	wantErrContains(t, err, "MaxRecordBytes", "checksum is valid")
	for name, b := range readDirBytes(t, src) {
		if !bytes.Equal(b, before[name]) {
			t.Fatalf("%s modified", name)
		}
	}
	reopenExpect(t, Options{Dir: src}, n)
}

func TestSegmentNamingAndLeftovers(t *testing.T) {
	t.Parallel()
	src := writeLog(t, Options{SegmentBytes: 1024}, 60)
	segs := segmentFiles(t, src)

	t.Run("renamed segment", func(t *testing.T) {
		dir := copyDir(t, src)
		old := filepath.Join(dir, filepath.Base(segs[1]))
		if err := os.Rename(old, filepath.Join(dir, segmentName(1000))); err != nil {
			t.Fatal(err)
		}
		_, err := Open(Options{Dir: dir})
		asCorruption(t, err)
	})
	t.Run("missing segment", func(t *testing.T) {
		dir := copyDir(t, src)
		if err := os.Remove(filepath.Join(dir, filepath.Base(segs[1]))); err != nil {
			t.Fatal(err)
		}
		_, err := Open(Options{Dir: dir})
		ce := asCorruption(t, err)
		if ce.Segment != filepath.Join(dir, filepath.Base(segs[2])) || ce.Offset != 0 {
			t.Fatalf("corruption %+v, want the segment after the gap at offset 0", ce)
		}
		first, _ := parseSegmentName(filepath.Base(segs[1]))
		second, _ := parseSegmentName(filepath.Base(segs[2]))
		wantErrContains(t, err, fmt.Sprintf("records %d-%d are missing", first, second-1))
		wantErrContains(t, err, "put the missing segment "+filepath.Base(segs[1])+" back")
	})
	t.Run("badly named file", func(t *testing.T) {
		dir := copyDir(t, src)
		if err := os.WriteFile(filepath.Join(dir, "1.wal"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(Options{Dir: dir})
		asCorruption(t, err)
	})
	t.Run("leftovers", func(t *testing.T) {
		dir := copyDir(t, src)
		tmp := filepath.Join(dir, segmentName(999)+tmpExt)
		if err := os.WriteFile(tmp, []byte("TENU"), 0o644); err != nil {
			t.Fatal(err)
		}
		// A last segment with a torn header, continuing where the log ends.
		l, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		next := l.LastLSN() + 1
		mustClose(t, l)
		short := filepath.Join(dir, segmentName(next))
		if err := os.WriteFile(short, []byte("TENUWAL"), 0o644); err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(dir, "README")
		if err := os.WriteFile(other, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		reopenExpect(t, Options{Dir: dir}, 60)
		for _, p := range []string{tmp} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s still exists: %v", p, err)
			}
		}
		if _, err := os.Stat(other); err != nil {
			t.Fatalf("Open touched a file that is not its own: %v", err)
		}
	})
	t.Run("only segment torn header", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(77)), []byte("TEN"), 0o644); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, Options{Dir: dir})
		if l.FirstLSN() != 77 || l.LastLSN() != 76 {
			t.Fatalf("FirstLSN %d LastLSN %d, want the log to continue at 77", l.FirstLSN(), l.LastLSN())
		}
		if lsn, err := l.Append([]Entry{{Type: 1}}); err != nil || lsn != 77 {
			t.Fatalf("Append = %d, %v; want 77", lsn, err)
		}
		if err := l.Replay(1, func(uint64, Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
			t.Fatalf("Replay below FirstLSN = %v, want ErrCompacted", err)
		}
	})
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
