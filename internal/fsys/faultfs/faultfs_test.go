package faultfs_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
)

// disk returns an FS with a durable directory /d.
func disk(t *testing.T) *faultfs.FS {
	t.Helper()
	return faultfs.NewWithDir("/d")
}

// TestNewWithDir: the directory and its parents survive a power loss, made
// by one MkdirAll and a SyncDir of each parent, the root last; a relative
// path is refused.
func TestNewWithDir(t *testing.T) {
	f := faultfs.NewWithDir("/srv/tenure/data")
	var ops []string
	for _, op := range f.Trace() {
		ops = append(ops, string(op.Kind)+" "+op.Path)
	}
	if want := []string{"mkdir /srv/tenure/data", "syncdir /srv/tenure", "syncdir /srv", "syncdir /"}; !slices.Equal(ops, want) {
		t.Errorf("operations %q, want %q", ops, want)
	}
	lost := f.PowerLoss()
	if names, err := lost.ReadDirNames("/srv/tenure/data"); err != nil || len(names) != 0 {
		t.Fatalf("after a power loss: %v, %v; want the empty directory", names, err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "absolute") {
			t.Errorf("NewWithDir(\"data\") panicked with %v, want a word on absolute paths", r)
		}
	}()
	faultfs.NewWithDir("data")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, f fsys.FS, name string) fsys.File {
	t.Helper()
	fl, err := f.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	return fl
}

// durable creates name in /d of f and writes s, and syncs the file and
// /d: s survives a power loss.
func durable(t *testing.T, f *faultfs.FS, name, s string) fsys.File {
	t.Helper()
	fl := create(t, f, name)
	write(t, fl, s)
	must(t, fl.Sync())
	must(t, f.SyncDir("/d"))
	return fl
}

func write(t *testing.T, fl fsys.File, s string) {
	t.Helper()
	if n, err := fl.Write([]byte(s)); err != nil || n != len(s) {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}

func contents(t *testing.T, f *faultfs.FS, name string) string {
	t.Helper()
	b, err := f.ReadFile(name)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return string(b)
}

func wantMissing(t *testing.T, f *faultfs.FS, name string) {
	t.Helper()
	if _, err := f.OpenFile(name, os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenFile(%s) err = %v, want ErrNotExist", name, err)
	}
}

func TestSyncedDataSurvivesPowerLoss(t *testing.T) {
	f := disk(t)
	fl := durable(t, f, "/d/a", "hello ")
	write(t, fl, "world")
	if got := contents(t, f, "/d/a"); got != "hello world" {
		t.Fatalf("before power loss: %q", got)
	}
	lost := f.PowerLoss()
	if got := contents(t, lost, "/d/a"); got != "hello " {
		t.Fatalf("after power loss: %q, want the synced %q", got, "hello ")
	}
	// The original is unchanged, and the two are independent.
	write(t, fl, "!")
	if got := contents(t, f, "/d/a"); got != "hello world!" {
		t.Fatalf("original after power loss: %q", got)
	}
	if got := contents(t, lost, "/d/a"); got != "hello " {
		t.Fatalf("rebooted disk changed by a write to the original: %q", got)
	}
	// A rebooted disk counts from zero and is fully usable.
	if lost.Ops() != 0 {
		t.Fatalf("rebooted Ops = %d", lost.Ops())
	}
	g, err := lost.OpenFile("/d/a", os.O_RDWR|os.O_APPEND, 0)
	must(t, err)
	write(t, g, "there")
	b, err := io.ReadAll(g)
	if err != nil || len(b) != 0 {
		t.Fatalf("read at the end = %q, %v", b, err)
	}
	p := make([]byte, 5)
	if n, err := g.ReadAt(p, 6); n != 5 || err != nil || string(p) != "there" {
		t.Fatalf("ReadAt = %d %v %q", n, err, p)
	}
	if fi, err := g.Stat(); err != nil || fi.Size() != 11 || fi.Name() != "a" {
		t.Fatalf("Stat = %v, %v", fi, err)
	}
}

func TestTruncateIsVolatileUntilSync(t *testing.T) {
	f := disk(t)
	fl := durable(t, f, "/d/a", "0123456789")
	must(t, fl.Truncate(4))
	if got := contents(t, f.PowerLoss(), "/d/a"); got != "0123456789" {
		t.Fatalf("unsynced truncate survived: %q", got)
	}
	must(t, fl.Sync())
	if got := contents(t, f.PowerLoss(), "/d/a"); got != "0123" {
		t.Fatalf("synced truncate lost: %q", got)
	}
	write(t, fl, "x") // O_APPEND: at the new end, no old bytes come back
	must(t, fl.Truncate(7))
	if got := contents(t, f, "/d/a"); got != "0123x\x00\x00" {
		t.Fatalf("grown file: %q", got)
	}
}

func TestDirectoryEntriesNeedSyncDir(t *testing.T) {
	f := disk(t)
	// Created and fsynced, but the directory never was: gone after a power loss.
	a := create(t, f, "/d/a")
	write(t, a, "a")
	must(t, a.Sync())
	wantMissing(t, f.PowerLoss(), "/d/a")
	must(t, f.SyncDir("/d"))
	if got := contents(t, f.PowerLoss(), "/d/a"); got != "a" {
		t.Fatalf("after SyncDir: %q", got)
	}

	// A rename that was not dir-synced reverts; the open handle follows the file.
	must(t, f.Rename("/d/a", "/d/b"))
	write(t, a, "b")
	must(t, a.Sync())
	lost := f.PowerLoss()
	wantMissing(t, lost, "/d/b")
	if got := contents(t, lost, "/d/a"); got != "ab" {
		t.Fatalf("reverted rename: %q, want the synced data under the old name", got)
	}
	must(t, f.SyncDir("/d"))
	lost = f.PowerLoss()
	wantMissing(t, lost, "/d/a")
	if got := contents(t, lost, "/d/b"); got != "ab" {
		t.Fatalf("durable rename: %q", got)
	}

	// A remove that was not dir-synced reverts too.
	must(t, f.Remove("/d/b"))
	wantMissing(t, f, "/d/b")
	if got := contents(t, f.PowerLoss(), "/d/b"); got != "ab" {
		t.Fatalf("reverted remove: %q", got)
	}
	must(t, f.SyncDir("/d"))
	wantMissing(t, f.PowerLoss(), "/d/b")

	// Directories are entries of their parent like files.
	must(t, f.MkdirAll("/d/x/y", 0o755))
	if names, err := f.ReadDirNames("/d/x"); err != nil || !slices.Equal(names, []string{"y"}) {
		t.Fatalf("ReadDirNames = %q, %v", names, err)
	}
	if _, err := f.PowerLoss().ReadDirNames("/d/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unsynced mkdir survived: %v", err)
	}
	must(t, f.SyncDir("/d"))
	if names, err := f.PowerLoss().ReadDirNames("/d/x"); err != nil || len(names) != 0 {
		t.Fatalf("synced parent, unsynced child: %q, %v", names, err)
	}
}

func TestFailAtHasNoEffect(t *testing.T) {
	f := disk(t)
	base := f.Ops()
	fl := create(t, f, "/d/a") // op base+1
	f.FailAt(base+2, nil)
	if n, err := fl.Write([]byte("xyz")); n != 0 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Write = %d, %v; want 0, EIO", n, err)
	}
	var pe *os.PathError
	if _, err := fl.Write(nil); err != nil {
		t.Fatal(err)
	}
	write(t, fl, "ok") // base+4
	boom := errors.New("boom")
	f.FailAt(base+5, boom)
	if err := fl.Sync(); !errors.Is(err, boom) || !errors.As(err, &pe) {
		t.Fatalf("Sync = %v; want a *PathError wrapping boom", err)
	}
	if got := contents(t, f, "/d/a"); got != "ok" {
		t.Fatalf("contents %q", got)
	}
	f.FailAt(base+6, nil)
	if err := f.Rename("/d/a", "/d/b"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Rename = %v", err)
	}
	wantMissing(t, f, "/d/b")
	f.FailAt(base+7, nil)
	if err := f.SyncDir("/d"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("SyncDir = %v", err)
	}
	wantMissing(t, f.PowerLoss(), "/d/a")
	f.FailAt(base+8, nil)
	if _, err := f.OpenFile("/d/c", os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("create = %v", err)
	}
	wantMissing(t, f, "/d/c")

	tr := f.Trace()
	if len(tr) != f.Ops() || f.Ops() != base+8 {
		t.Fatalf("trace has %d ops, Ops = %d, want %d", len(tr), f.Ops(), base+8)
	}
	wantKinds := []faultfs.Kind{faultfs.OpCreate, faultfs.OpWrite, faultfs.OpWrite, faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpSyncDir, faultfs.OpCreate}
	for i, op := range tr[base:] {
		if op.N != base+1+i || op.Kind != wantKinds[i] {
			t.Fatalf("op %d = %+v, want kind %s", base+1+i, op, wantKinds[i])
		}
		if failed := op.Err != nil; failed != (i == 1 || i >= 4) {
			t.Fatalf("op %+v: failed = %v", op, failed)
		}
	}
}

func TestPersistentFaults(t *testing.T) {
	f := disk(t)
	fl := create(t, f, "/d/a")
	f.FailNext(faultfs.OpSync, nil)
	if err := fl.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("first Sync = %v", err)
	}
	must(t, fl.Sync()) // FailNext is one-shot

	f.FailSyncs(nil)
	for range 3 {
		if err := fl.Sync(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Sync = %v", err)
		}
		if err := f.SyncDir("/d"); !errors.Is(err, syscall.EIO) {
			t.Fatalf("SyncDir = %v", err)
		}
	}
	f.FailWrites(syscall.EROFS)
	if _, err := fl.Write([]byte("x")); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("Write = %v", err)
	}
	f.ClearFaults()
	write(t, fl, "x")
	must(t, fl.Sync())
	must(t, f.SyncDir("/d"))
	if got := contents(t, f.PowerLoss(), "/d/a"); got != "x" {
		t.Fatalf("after ClearFaults: %q", got)
	}
}

func TestFull(t *testing.T) {
	f := disk(t)
	fl, err := f.OpenFile("/d/a", os.O_CREATE|os.O_RDWR, 0o644)
	must(t, err)
	write(t, fl, "abcdef")
	f.SetFull(true)
	n, err := fl.Write([]byte("ghij"))
	var pe *os.PathError
	if n != 0 || !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Path != "/d/a" {
		t.Fatalf("Write while full = %d, %v; want 0 and a *PathError with ENOSPC", n, err)
	}
	// Overwriting in place needs no space (the offset is 6, so seek back
	// by reopening).
	g, err := f.OpenFile("/d/a", os.O_WRONLY, 0)
	must(t, err)
	write(t, g, "AB")
	must(t, fl.Truncate(3))
	must(t, fl.Sync())

	f.TearWrites(true)
	g2, err := f.OpenFile("/d/a", os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	if n, err := g2.Write([]byte("123456")); n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("short write = %d, %v; want 3, ENOSPC", n, err)
	}
	if got := contents(t, f, "/d/a"); got != "ABc123" {
		t.Fatalf("contents %q", got)
	}
	f.SetFull(false)
	write(t, g2, "z")
	if got := contents(t, f, "/d/a"); got != "ABc123z" {
		t.Fatalf("contents %q", got)
	}
}

func TestTearAt(t *testing.T) {
	f := disk(t)
	fl := create(t, f, "/d/a")
	f.TearAt(f.Ops()+1, 4)
	n, err := fl.Write([]byte("0123456789"))
	if n != 4 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("torn Write = %d, %v; want 4, EIO", n, err)
	}
	write(t, fl, "x")
	if got := contents(t, f, "/d/a"); got != "0123x" {
		t.Fatalf("contents %q", got)
	}
	// TearAt on an operation that is not a write fails it.
	f.TearAt(f.Ops()+1, 4)
	if err := fl.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync = %v", err)
	}
}

func TestCutPowerAfter(t *testing.T) {
	f := disk(t)
	fl := create(t, f, "/d/a")
	must(t, f.SyncDir("/d"))
	write(t, fl, "one")
	f.CutPowerAfter(f.Ops() + 2) // the next write and sync happen, then nothing
	write(t, fl, "two")
	must(t, fl.Sync())
	if !f.PowerCut() {
		t.Fatal("PowerCut = false after the planned op")
	}
	ops := f.Ops()
	if _, err := fl.Write([]byte("three")); !errors.Is(err, faultfs.ErrPowerCut) {
		t.Fatalf("Write after the cut = %v", err)
	}
	if err := f.SyncDir("/d"); !errors.Is(err, faultfs.ErrPowerCut) {
		t.Fatalf("SyncDir after the cut = %v", err)
	}
	if _, err := f.OpenFile("/d/b", os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, faultfs.ErrPowerCut) {
		t.Fatalf("OpenFile after the cut = %v", err)
	}
	if _, err := fl.Stat(); !errors.Is(err, faultfs.ErrPowerCut) {
		t.Fatalf("Stat after the cut = %v", err)
	}
	if f.Ops() != ops {
		t.Fatalf("ops counted after the cut: %d -> %d", ops, f.Ops())
	}
	if got := contents(t, f.PowerLoss(), "/d/a"); got != "onetwo" {
		t.Fatalf("after the cut: %q", got)
	}
}

func TestPowerLossKeep(t *testing.T) {
	seed := uint64(0x5eed)
	rng := rand.New(rand.NewPCG(seed, 0))
	lengths := map[int]bool{}
	for i := range 200 {
		f := disk(t)
		fl := create(t, f, "/d/a")
		must(t, f.SyncDir("/d"))
		write(t, fl, "durable|")
		must(t, fl.Sync())
		write(t, fl, "unsynced")
		got := contents(t, f.PowerLossKeep(rng), "/d/a")
		if len(got) < len("durable|") || got != "durable|unsynced"[:len(got)] {
			t.Fatalf("seed %#x round %d: %q is not a prefix of the written data that keeps the synced part", seed, i, got)
		}
		lengths[len(got)] = true
	}
	if len(lengths) != len("unsynced")+1 {
		t.Fatalf("seed %#x: kept lengths %v, want every one from 8 to 16", seed, lengths)
	}
	// Determinism: the same seed gives the same disk.
	run := func() string {
		f := disk(t)
		for _, n := range []string{"/d/a", "/d/b", "/d/c"} {
			fl := create(t, f, n)
			write(t, fl, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
		}
		must(t, f.SyncDir("/d"))
		l := f.PowerLossKeep(rand.New(rand.NewPCG(seed, 1)))
		return contents(t, l, "/d/a") + "|" + contents(t, l, "/d/b") + "|" + contents(t, l, "/d/c")
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("seed %#x: PowerLossKeep not deterministic: %q vs %q", seed, a, b)
	}
}

func TestErrorsLikeTheOS(t *testing.T) {
	f := disk(t)
	if _, err := f.OpenFile("/d/none", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := f.OpenFile("/nodir/a", os.O_CREATE|os.O_WRONLY, 0o644); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("create in a missing dir: %v", err)
	}
	if _, err := f.ReadDirNames("/nodir"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadDirNames missing: %v", err)
	}
	fl := create(t, f, "/d/a")
	if _, err := f.OpenFile("/d/a", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on an existing file: %v", err)
	}
	if _, err := fl.Read(make([]byte, 1)); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("read from a write-only file: %v", err)
	}
	must(t, fl.Close())
	if _, err := fl.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := f.Rename("/d/none", "/d/b"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("rename missing: %v", err)
	}
	if err := f.Remove("/d"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove a non-empty dir: %v", err)
	}
	if err := f.MkdirAll("/d/a/b", 0o755); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("mkdir under a file: %v", err)
	}
	// O_TRUNC empties an existing file.
	fl = create(t, f, "/d/t")
	write(t, fl, "abc")
	if _, err := f.OpenFile("/d/t", os.O_WRONLY|os.O_TRUNC, 0); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, f, "/d/t"); got != "" {
		t.Fatalf("after O_TRUNC: %q", got)
	}
}

func TestWriteBack(t *testing.T) {
	f := disk(t)
	fl := create(t, f, "/d/a")
	write(t, fl, "unsynced")
	must(t, f.MkdirAll("/d/x", 0o755))
	f.WriteBack()
	lost := f.PowerLoss()
	if got := contents(t, lost, "/d/a"); got != "unsynced" {
		t.Fatalf("after WriteBack and power loss: %q", got)
	}
	if _, err := lost.ReadDirNames("/d/x"); err != nil {
		t.Fatalf("directory after WriteBack and power loss: %v", err)
	}
}

func TestPowerLossPages(t *testing.T) {
	seed := uint64(0x9a9e5)
	rng := rand.New(rand.NewPCG(seed, 0))
	const durable, written = "0123456789", "0123456789abcdefghij"
	holes := false
	for i := range 200 {
		f := disk(t)
		fl := create(t, f, "/d/a")
		must(t, f.SyncDir("/d"))
		write(t, fl, durable)
		must(t, fl.Sync())
		write(t, fl, written[len(durable):])
		got := contents(t, f.PowerLossPages(rng, 4), "/d/a")
		if len(got) != len(durable) && len(got) != len(written) {
			t.Fatalf("seed %#x round %d: size %d, want either size", seed, i, len(got))
		}
		for j := range len(got) {
			if got[j] != written[j] && (j < len(durable) || got[j] != 0) {
				t.Fatalf("seed %#x round %d: %q: byte %d is neither written nor a hole", seed, i, got, j)
			}
		}
		holes = holes || strings.Contains(got, "\x00")
	}
	if !holes {
		t.Fatalf("seed %#x: no round left a hole", seed)
	}
}
