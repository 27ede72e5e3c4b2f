package wal

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
)

// rec is a replayed record with its payload copied.
type rec struct {
	lsn uint64
	e   Entry
}

func openLog(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func replayAll(t testing.TB, l *Log, from uint64) []rec {
	t.Helper()
	var out []rec
	err := l.Replay(from, func(lsn uint64, e Entry) error {
		out = append(out, rec{lsn, Entry{Type: e.Type, Payload: bytes.Clone(e.Payload)}})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// testEntry is the deterministic entry number i (1-based) of a test log:
// sizes vary from 0 to a few hundred bytes, with an occasional large one.
func testEntry(i int) Entry {
	n := (i * 37) % 300
	if i%41 == 0 {
		n = 1500
	}
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i*7 + j)
	}
	return Entry{Type: uint16(1 + i%5), Payload: p}
}

func checkRecords(t testing.TB, got []rec, from, to int) {
	t.Helper()
	if want := to - from + 1; len(got) != max(want, 0) {
		t.Fatalf("replayed %d records, want %d (lsn %d..%d)", len(got), want, from, to)
	}
	for k, r := range got {
		i := from + k
		want := testEntry(i)
		if r.lsn != uint64(i) || r.e.Type != want.Type || !bytes.Equal(r.e.Payload, want.Payload) {
			t.Fatalf("record %d: lsn %d type %d %d bytes; want lsn %d type %d %d bytes",
				k, r.lsn, r.e.Type, len(r.e.Payload), i, want.Type, len(want.Payload))
		}
	}
}

// appendN appends testEntry(from..to) in calls of a few entries.
func appendN(t testing.TB, l *Log, from, to int) {
	t.Helper()
	for i := from; i <= to; {
		var es []Entry
		for j := 0; j < 1+i%4 && i <= to; j++ {
			es = append(es, testEntry(i))
			i++
		}
		lsn, err := l.AppendSync(context.Background(), es)
		if err != nil {
			t.Fatalf("AppendSync: %v", err)
		}
		if lsn != uint64(i-1) {
			t.Fatalf("AppendSync returned lsn %d, want %d", lsn, i-1)
		}
	}
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if err != nil {
		t.Fatal(err)
	}
	return m // Glob sorts, and hex names sort by LSN
}

// frameSpan is where a frame sits in a segment file.
type frameSpan struct {
	off, size int64
	lsn       uint64
}

// framesOf parses a segment file independently of the scanner.
func framesOf(t testing.TB, path string) []frameSpan {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []frameSpan
	for off := int64(segmentHeaderSize); off < int64(len(b)); {
		h := decodeFrameHeader(b[off:])
		out = append(out, frameSpan{off, h.frameBytes(), h.lsn})
		off += h.frameBytes()
	}
	return out
}

func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	for name, b := range readDirBytes(t, src) {
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func readDirBytes(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// faultFS wraps the OS file system with hooks that run before a segment
// file's Write or Sync and may fail it instead. Hooks are set before Open and
// never changed, so they need no locking; they keep their own state.
type faultFS struct {
	fsys.FS
	beforeWrite func(name string, p []byte) error
	beforeSync  func(name string) error
	skipSync    bool // make every fsync a no-op
}

func (f *faultFS) SyncDir(dir string) error {
	if f.skipSync {
		return nil
	}
	return f.FS.SyncDir(dir)
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

type faultFile struct {
	fsys.File
	fs   *faultFS
	name string
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.beforeWrite != nil {
		if err := f.fs.beforeWrite(f.name, p); err != nil {
			return 0, err
		}
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if f.fs.beforeSync != nil {
		if err := f.fs.beforeSync(f.name); err != nil {
			return err
		}
	}
	if f.fs.skipSync {
		return nil
	}
	return f.File.Sync()
}

// isSegment reports whether a file name is a segment's. A segment created by
// the log keeps its temporary name in its handle.
func isSegment(name string) bool { return strings.Contains(filepath.Base(name), segmentExt) }

func wantErrContains(t testing.TB, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an error containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("err = %q, want it to contain %q", err, s)
		}
	}
}

func asCorruption(t testing.TB, err error) *CorruptionError {
	t.Helper()
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want a *CorruptionError matching ErrCorrupt", err)
	}
	return ce
}
