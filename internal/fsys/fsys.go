package fsys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// FS is the set of file-system operations durable storage uses. Paths are
// host paths, as for package os.
type FS interface {
	// OpenFile opens name with the os.O_* flags and, when creating it,
	// permission perm, like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Rename renames oldpath to newpath atomically, replacing newpath.
	Rename(oldpath, newpath string) error
	// Remove removes the file name.
	Remove(name string) error
	// ReadDirNames returns the names of the entries of dir, sorted.
	ReadDirNames(dir string) ([]string, error)
	// MkdirAll creates dir and any missing parents, like os.MkdirAll.
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir fsyncs the directory dir, making the creation, rename or
	// removal of its entries durable.
	SyncDir(dir string) error
}

// File is an open file. Reads and writes through io.Reader and io.Writer use
// the file's offset; ReadAt does not move it.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	// Sync flushes the file's data and metadata to stable storage (fsync).
	Sync() error
	// Truncate changes the size of the file; it does not move the offset.
	Truncate(size int64) error
	Close() error
	Stat() (os.FileInfo, error)
}

// OS is the FS of the host operating system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		// Return a nil interface, not a non-nil File holding a nil *os.File.
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) ReadDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	cerr := d.Close()
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	slices.Sort(names)
	return names, nil
}

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAllSync creates dir and its missing parents, then fsyncs the parent
// of each directory it created, deepest first, so that the whole path is
// durable when it returns (a plain MkdirAll leaves new entries in the page
// cache, and a power loss can take them, and everything below, away).
func MkdirAllSync(fsy FS, dir string) error {
	dir = filepath.Clean(dir)
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fsy.ReadDirNames(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsy.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := fsy.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("fsync parent of %s: %w", d, err)
		}
	}
	return nil
}

// CheckWrite writes n bytes to a scratch file named name in dir, fsyncs
// it and removes it: whether the file system under dir takes a write of
// that size now. On a full disk the error wraps syscall.ENOSPC. The file
// is removed whatever happens (best effort), and written again from its
// start by the next check if a crash left it.
func CheckWrite(fsy FS, dir, name string, n int) error {
	path := filepath.Join(dir, name)
	f, err := fsy.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	chunk := make([]byte, min(n, 64<<10))
	for left := n; left > 0 && err == nil; left -= len(chunk) {
		_, err = f.Write(chunk[:min(left, len(chunk))])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := fsy.Remove(path); err == nil {
		err = rerr
	}
	return err
}
