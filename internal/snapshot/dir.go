package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/state"
)

const (
	filePrefix = "snap-"
	fileExt    = ".tsnap"
	tmpExt     = ".tmp"
	discardExt = ".discarded"
)

// FileName is the name of the snapshot whose state ends at lsn.
func FileName(lsn uint64) string { return fmt.Sprintf("%s%016x%s", filePrefix, lsn, fileExt) }

// ParseFileName returns the LSN in a snapshot file name.
func ParseFileName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, fileExt)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	lsn, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || FileName(lsn) != name {
		return 0, false
	}
	return lsn, true
}

// Dir is a directory of snapshot files (<data-dir>/snapshots). Only one
// process writes to it at a time; the owner of the data directory ensures
// that. Its methods are safe for concurrent use as long as no two calls
// write the same LSN.
type Dir struct {
	// FS is the file system, nil for fsys.OS.
	FS fsys.FS
	// Path is the directory. Write creates it if needed.
	Path string
}

func (d Dir) fs() fsys.FS {
	if d.FS == nil {
		return fsys.OS
	}
	return d.FS
}

// File is the path of the snapshot at lsn.
func (d Dir) File(lsn uint64) string { return filepath.Join(d.Path, FileName(lsn)) }

// Name names the snapshot at lsn for people: "snapshot <path>".
func (d Dir) Name(lsn uint64) string { return "snapshot " + d.File(lsn) }

// names returns the names of the files in the directory. A missing
// directory holds none.
func (d Dir) names() ([]string, error) {
	names, err := d.fs().ReadDirNames(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list %s: %w", d.Path, err)
	}
	return names, nil
}

// List returns the LSNs of the snapshot files in the directory, oldest
// first. A missing directory holds none. Other files are ignored.
func (d Dir) List() ([]uint64, error) {
	names, err := d.names()
	if err != nil {
		return nil, err
	}
	var lsns []uint64
	for _, n := range names {
		if lsn, ok := ParseFileName(n); ok {
			lsns = append(lsns, lsn)
		}
	}
	slices.Sort(lsns)
	return lsns, nil
}

// Info describes a written snapshot.
type Info struct {
	Path string
	Summary
}

// Save writes img atomically (see Write) and returns the file's path.
func (d Dir) Save(img *state.Image) (string, error) {
	info, err := d.Write(img)
	return info.Path, err
}

// Write writes img as the snapshot at img.LastLSN: to a temporary file,
// fsynced, renamed into place, and the directory fsynced. When it returns
// nil the snapshot is durable; when it fails, no snapshot at that LSN
// appears (a leftover temporary file may, which Clean removes).
func (d Dir) Write(img *state.Image) (Info, error) {
	fsy := d.fs()
	if err := fsys.MkdirAllSync(fsy, d.Path); err != nil {
		return Info{}, fmt.Errorf("snapshot: create directory %s: %w", d.Path, err)
	}
	path := d.File(img.LastLSN)
	tmp := path + tmpExt
	f, err := fsy.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: create %s: %w", tmp, err)
	}
	fail := func(op string, err error) (Info, error) {
		f.Close()
		fsy.Remove(tmp) // best effort; Clean removes leftovers too
		return Info{}, fmt.Errorf("snapshot: %s %s: %w", op, tmp, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	sum, err := Encode(bw, img)
	if err != nil {
		return fail("write", err)
	}
	if err := bw.Flush(); err != nil {
		return fail("write", err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	if err := f.Close(); err != nil {
		fsy.Remove(tmp)
		return Info{}, fmt.Errorf("snapshot: close %s: %w", tmp, err)
	}
	if err := fsy.Rename(tmp, path); err != nil {
		fsy.Remove(tmp)
		return Info{}, fmt.Errorf("snapshot: rename %s: %w", tmp, err)
	}
	// Without this the rename may revert in a power loss. That would lose
	// only this snapshot (the log still holds everything), but the caller
	// deletes log segments once Write returns, so it must be durable.
	if err := fsy.SyncDir(d.Path); err != nil {
		return Info{}, fmt.Errorf("snapshot: fsync directory %s: %w", d.Path, err)
	}
	return Info{Path: path, Summary: sum}, nil
}

// Load reads and verifies the snapshot at lsn.
func (d Dir) Load(lsn uint64) (*state.State, error) {
	st, _, err := d.Read(lsn)
	return st, err
}

// Read reads and verifies the snapshot at lsn and summarises it. Content
// problems are *CorruptError naming the file.
func (d Dir) Read(lsn uint64) (*state.State, Summary, error) {
	return ReadFile(d.fs(), d.File(lsn), lsn)
}

// ReadFile reads and verifies the snapshot file at path, whose name says it
// ends at lsn.
func ReadFile(fsy fsys.FS, path string, lsn uint64) (*state.State, Summary, error) {
	f, err := fsy.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, Summary{}, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, Summary{}, fmt.Errorf("snapshot: stat %s: %w", path, err)
	}
	st, sum, err := Decode(f, fi.Size())
	if ce, ok := errors.AsType[*CorruptError](err); ok {
		ce.Path = path
		return nil, sum, ce
	}
	if err != nil {
		return nil, sum, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if sum.LastLSN != lsn {
		return nil, sum, &CorruptError{Path: path, Reason: fmt.Sprintf("header says the snapshot ends at lsn %d but its name says %d (renamed by hand?)", sum.LastLSN, lsn)}
	}
	return st, sum, nil
}

// Remove deletes the snapshot at lsn and makes the removal durable.
func (d Dir) Remove(lsn uint64) error {
	fsy := d.fs()
	if err := fsy.Remove(d.File(lsn)); err != nil {
		return fmt.Errorf("snapshot: remove: %w", err)
	}
	if err := fsy.SyncDir(d.Path); err != nil {
		return fmt.Errorf("snapshot: fsync directory %s: %w", d.Path, err)
	}
	return nil
}

// Discard renames the snapshot at lsn out of the way, for inspection, and
// returns the new path: <name>.discarded, which List ignores, or
// <name>.discarded.2, .3, ... if that exists already, so that an earlier
// discarded file at the same LSN (a loss accepted before, say) is never
// overwritten. A start that found it damaged, or ahead of the log, calls
// it so that it is never chosen again.
func (d Dir) Discard(lsn uint64) (string, error) {
	fsy := d.fs()
	from := d.File(lsn)
	names, err := fsy.ReadDirNames(d.Path)
	if err != nil {
		return "", fmt.Errorf("snapshot: discard: list %s: %w", d.Path, err)
	}
	taken := make(map[string]bool, len(names))
	for _, n := range names {
		taken[n] = true
	}
	base := FileName(lsn) + discardExt
	to := base
	for i := 2; taken[to]; i++ {
		to = fmt.Sprintf("%s.%d", base, i)
	}
	to = filepath.Join(d.Path, to)
	if err := fsy.Rename(from, to); err != nil {
		return "", fmt.Errorf("snapshot: discard: %w", err)
	}
	if err := fsy.SyncDir(d.Path); err != nil {
		return "", fmt.Errorf("snapshot: fsync directory %s: %w", d.Path, err)
	}
	return to, nil
}

// Discarded returns the paths of the snapshot files Discard set aside,
// sorted. They are never read again; they stay until deleted by hand.
func (d Dir) Discarded() ([]string, error) {
	names, err := d.names()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if discardedName(n) {
			out = append(out, filepath.Join(d.Path, n))
		}
	}
	slices.Sort(out)
	return out, nil
}

// discardedName reports whether n is a name Discard gives.
func discardedName(n string) bool {
	i := strings.Index(n, discardExt)
	if i < 0 {
		return false
	}
	if _, ok := ParseFileName(n[:i]); !ok {
		return false
	}
	rest := n[i+len(discardExt):]
	if rest == "" {
		return true
	}
	k, err := strconv.Atoi(strings.TrimPrefix(rest, "."))
	return rest[0] == '.' && err == nil && k >= 2 && "."+strconv.Itoa(k) == rest
}

// Clean removes the temporary files of interrupted writes and returns their
// paths. They never hold a snapshot that was complete.
func (d Dir) Clean() ([]string, error) {
	fsy := d.fs()
	names, err := d.names()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, n := range names {
		base, ok := strings.CutSuffix(n, tmpExt)
		if _, snap := ParseFileName(base); !ok || !snap {
			continue
		}
		p := filepath.Join(d.Path, n)
		if err := fsy.Remove(p); err != nil {
			return removed, fmt.Errorf("snapshot: remove leftover %s: %w", p, err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}
