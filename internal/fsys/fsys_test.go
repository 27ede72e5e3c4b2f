package fsys_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
)

func TestOS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := fsys.OS.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "x.tmp")
	f, err := fsys.OS.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello world")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5); err != nil {
		t.Fatal(err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 5 {
		t.Fatalf("Stat = %v, %v; want size 5", fi, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.OS.Rename(tmp, filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if err := fsys.OS.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.OS.OpenFile(filepath.Join(dir, "y"), os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := fsys.OS.ReadDirNames(dir)
	if err != nil || !slices.Equal(names, []string{"x", "y"}) {
		t.Fatalf("ReadDirNames = %q, %v; want [x y]", names, err)
	}

	r, err := fsys.OS.OpenFile(filepath.Join(dir, "x"), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello", b, err)
	}
	p := make([]byte, 3)
	if _, err := r.ReadAt(p, 2); err != nil || string(p) != "llo" {
		t.Fatalf("ReadAt = %q, %v; want llo", p, err)
	}

	if err := fsys.OS.Remove(filepath.Join(dir, "y")); err != nil {
		t.Fatal(err)
	}
	f, err = fsys.OS.OpenFile(filepath.Join(dir, "missing"), os.O_RDONLY, 0)
	if !errors.Is(err, fs.ErrNotExist) || f != nil {
		t.Fatalf("OpenFile(missing) = %v, %v; want nil File and ErrNotExist", f, err)
	}
}

func TestCheckWrite(t *testing.T) {
	dir := t.TempDir()
	if err := fsys.CheckWrite(fsys.OS, dir, ".check", 200<<10); err != nil {
		t.Fatal(err)
	}
	if names, err := fsys.OS.ReadDirNames(dir); err != nil || len(names) != 0 {
		t.Fatalf("after the check: %v, %v; want an empty directory", names, err)
	}
	if err := fsys.CheckWrite(fsys.OS, filepath.Join(dir, "nope"), ".check", 1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("check in a missing directory: %v", err)
	}

	disk := faultfs.New()
	if err := disk.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	disk.SetFull(true)
	if err := fsys.CheckWrite(disk, "/d", ".check", 1<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("check on a full disk: %v, want ENOSPC", err)
	}
	if names, err := disk.ReadDirNames("/d"); err != nil || len(names) != 0 {
		t.Fatalf("after the failed check: %v, %v; want an empty directory", names, err)
	}
	disk.SetFull(false)
	if err := fsys.CheckWrite(disk, "/d", ".check", 1<<20); err != nil {
		t.Fatalf("check once there is space: %v", err)
	}
}
