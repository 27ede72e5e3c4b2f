package faultfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/fsys"
)

// Kind is the kind of a numbered operation.
type Kind string

// The kinds of operations that are counted; see the package documentation.
const (
	OpCreate   Kind = "create" // OpenFile with O_CREATE or O_TRUNC
	OpWrite    Kind = "write"
	OpSync     Kind = "sync" // File.Sync
	OpTruncate Kind = "truncate"
	OpSyncDir  Kind = "syncdir"
	OpRename   Kind = "rename"
	OpRemove   Kind = "remove"
	OpMkdir    Kind = "mkdir" // MkdirAll that creates at least one directory
)

// Op is one numbered operation, as recorded in the trace.
type Op struct {
	N     int // 1-based index, in call order
	Kind  Kind
	Path  string // the file or directory (the name a file was opened by)
	To    string // Rename's new path
	Bytes int    // bytes asked to Write, new size for Truncate
	Err   error  // what it failed with, nil if it succeeded
}

// ErrPowerCut is what every call returns after the power was cut (see
// CutPowerAfter).
var ErrPowerCut = errors.New("faultfs: power cut")

// node is a file or a directory.
type node struct {
	dir bool
	// A file's contents as reads see them, and as of its last Sync.
	data, synced []byte
	// A directory's entries as lookups see them, and as of its last SyncDir.
	entries, durEntries map[string]*node
}

func newDir() *node {
	return &node{dir: true, entries: map[string]*node{}, durEntries: map[string]*node{}}
}

// FS is the fault-injecting file system. The zero value is not usable; call
// New.
type FS struct {
	mu    sync.Mutex
	root  *node
	ops   int
	trace []Op

	failAt     map[int]error
	tearAt     map[int]int
	failNext   map[Kind]error
	failWrites error
	failSyncs  error
	full       bool
	tearFull   bool
	cutAfter   int
	cut        bool
}

var _ fsys.FS = (*FS)(nil)

// New returns an empty disk holding only the root directory.
func New() *FS {
	return &FS{root: newDir(), failAt: map[int]error{}, tearAt: map[int]int{}, failNext: map[Kind]error{}}
}

// NewWithDir returns a disk holding dir, made with its parents and durable
// (each made durable in its parent by SyncDir, the root last), as an
// operator's data directory is before anything runs on it. dir must be
// absolute; NewWithDir panics otherwise.
func NewWithDir(dir string) *FS {
	if !filepath.IsAbs(dir) {
		panic(fmt.Sprintf("faultfs: NewWithDir(%q): the directory must be an absolute path", dir))
	}
	f := New()
	if err := f.MkdirAll(dir, 0o755); err != nil {
		panic(fmt.Sprintf("faultfs: NewWithDir(%q): %v", dir, err))
	}
	for d := filepath.Clean(dir); d != "/"; d = filepath.Dir(d) {
		if err := f.SyncDir(filepath.Dir(d)); err != nil {
			panic(fmt.Sprintf("faultfs: NewWithDir(%q): %v", dir, err))
		}
	}
	return f
}

// Ops returns the number of operations so far.
func (f *FS) Ops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Trace returns a copy of every operation so far, in order.
func (f *FS) Trace() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trace)
}

// FailAt makes operation number op fail with err (syscall.EIO if nil),
// without effect. An op already past is never reached.
func (f *FS) FailAt(op int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt[op] = orEIO(err)
}

// FailNext makes the next operation of kind fail with err (syscall.EIO if
// nil), without effect.
func (f *FS) FailNext(kind Kind, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext[kind] = orEIO(err)
}

// TearAt makes operation number op, if it is a Write, store only its first n
// bytes and then fail with syscall.EIO, returning n. Any other operation
// fails as with FailAt.
func (f *FS) TearAt(op, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tearAt[op] = max(n, 0)
}

// FailWrites makes every later Write fail with err (syscall.EIO if nil),
// without effect, until ClearFaults.
func (f *FS) FailWrites(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failWrites = orEIO(err)
}

// FailSyncs makes every later File.Sync and SyncDir fail with err
// (syscall.EIO if nil), without effect, until ClearFaults.
func (f *FS) FailSyncs(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSyncs = orEIO(err)
}

// ClearFaults cancels every planned fault (FailAt, FailNext, TearAt,
// FailWrites, FailSyncs). It does not change SetFull or a power cut.
func (f *FS) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.failAt)
	clear(f.tearAt)
	clear(f.failNext)
	f.failWrites, f.failSyncs = nil, nil
}

// SetFull makes the disk full (or not): while it is, every Write that would
// grow its file fails with syscall.ENOSPC. Writes within a file's size,
// truncation and everything else still work.
func (f *FS) SetFull(full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.full = full
}

// TearWrites chooses what a Write refused for lack of space leaves behind:
// nothing (false, the default) or the first half of its data (true), as a
// write that ran out of space part way.
func (f *FS) TearWrites(tear bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tearFull = tear
}

// CutPowerAfter cuts the power right after operation number op (whether it
// succeeded or not): from then on every call fails with ErrPowerCut without
// effect, so the durable state stays as op left it. Call PowerLoss for the
// disk after the reboot.
func (f *FS) CutPowerAfter(op int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAfter = op
	if op <= f.ops {
		f.cut = true
	}
}

// PowerCut reports whether the power was cut.
func (f *FS) PowerCut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut
}

// PowerLoss returns the disk as a reboot after a power loss now would find
// it: a new FS, with no faults planned and no operation counted, holding
// every file at its last synced contents under the directory entries as of
// each directory's last SyncDir. f itself is not changed.
func (f *FS) PowerLoss() *FS {
	return f.reboot(nil)
}

// PowerLossKeep is PowerLoss, except that for each file a random prefix
// (possibly empty, possibly all) of the data written since its last Sync
// survives too, as if the disk had written back some dirty pages, in order,
// before the power went. A file truncated since its last Sync keeps either
// size. Files are visited in path order, so the result depends only on the
// state of f and on rng.
func (f *FS) PowerLossKeep(rng *rand.Rand) *FS {
	return f.reboot(func(durable, current []byte) []byte {
		p := 0
		for p < len(durable) && p < len(current) && durable[p] == current[p] {
			p++
		}
		if p == len(current) {
			if len(durable) > p && rng.IntN(2) == 0 {
				return current // the truncation reached the disk
			}
			return durable
		}
		k := rng.IntN(len(current) - p + 1)
		if k == 0 {
			return durable
		}
		return current[:p+k]
	})
}

// PowerLossPages is PowerLoss for a disk that writes dirty pages back in
// any order: for each file whose current contents differ from its durable
// ones, every page (pageBytes, aligned) survives independently in either
// version, and the file keeps either size. Where the kept size reaches past
// the data of the kept pages, the file reads zeros (a hole). Files are
// visited in path order, so the result depends only on the state of f and
// on rng.
func (f *FS) PowerLossPages(rng *rand.Rand, pageBytes int) *FS {
	if pageBytes < 1 {
		panic("faultfs: PowerLossPages needs a positive page size")
	}
	return f.reboot(func(durable, current []byte) []byte {
		if bytes.Equal(durable, current) {
			return durable
		}
		size := len(current)
		if len(durable) != len(current) && rng.IntN(2) == 0 {
			size = len(durable)
		}
		out := make([]byte, size)
		for off := 0; off < size; off += pageBytes {
			end := min(off+pageBytes, size)
			src := durable
			if rng.IntN(2) == 0 {
				src = current
			}
			if off < len(src) {
				copy(out[off:end], src[off:min(end, len(src))])
			}
		}
		return out
	})
}

func (f *FS) reboot(keep func(durable, current []byte) []byte) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	memo := map[*node]*node{} // a file reachable under two names stays one file
	var cp func(n *node) *node
	cp = func(n *node) *node {
		if c, ok := memo[n]; ok {
			return c
		}
		c := &node{dir: n.dir}
		memo[n] = c
		if n.dir {
			c.entries = make(map[string]*node, len(n.durEntries))
			for _, name := range slices.Sorted(maps.Keys(n.durEntries)) {
				c.entries[name] = cp(n.durEntries[name])
			}
			c.durEntries = maps.Clone(c.entries)
			return c
		}
		data := n.synced
		if keep != nil {
			data = keep(n.synced, n.data)
		}
		c.data, c.synced = slices.Clone(data), slices.Clone(data)
		return c
	}
	nf := New()
	nf.root = cp(f.root)
	return nf
}

// WriteBack makes everything durable: every file's current contents and
// every directory's current entries, as the kernel's write-back eventually
// does after a process crash. It is not an operation; tests use it to put a
// state that only a crash can leave (a torn write, say) on the durable disk.
func (f *FS) WriteBack() {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[*node]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.synced = slices.Clone(n.data)
			return
		}
		n.durEntries = maps.Clone(n.entries)
		for _, c := range n.entries {
			walk(c)
		}
	}
	walk(f.root)
}

// ReadFile returns the contents of a file as reads see them. It is not an
// operation and works even after the power was cut, for inspection.
func (f *FS) ReadFile(name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.dir {
		return nil, &os.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	return slices.Clone(n.data), nil
}

func orEIO(err error) error {
	if err == nil {
		return syscall.EIO
	}
	return err
}

// begin numbers an operation of kind and returns its number, for a planned
// torn write the bytes to keep (-1 if none), and the error planned for it
// (nil if none). f.mu is held and the power is on.
func (f *FS) begin(kind Kind) (n, tear int, fault error) {
	f.ops++
	n = f.ops
	if err, ok := f.failAt[n]; ok {
		delete(f.failAt, n)
		return n, -1, err
	}
	if k, ok := f.tearAt[n]; ok {
		delete(f.tearAt, n)
		if kind == OpWrite {
			return n, k, syscall.EIO
		}
		return n, -1, syscall.EIO
	}
	if err, ok := f.failNext[kind]; ok {
		delete(f.failNext, kind)
		return n, -1, err
	}
	switch kind {
	case OpWrite:
		return n, -1, f.failWrites
	case OpSync, OpSyncDir:
		return n, -1, f.failSyncs
	}
	return n, -1, nil
}

// end records op and cuts the power after it if that was planned.
func (f *FS) end(op Op) {
	f.trace = append(f.trace, op)
	if f.cutAfter != 0 && op.N >= f.cutAfter {
		f.cut = true
	}
}

// off returns the error for a call made after the power was cut, nil while
// it is on. f.mu is held.
func (f *FS) off(op, path string) error {
	if f.cut {
		return &os.PathError{Op: op, Path: path, Err: ErrPowerCut}
	}
	return nil
}

func split(name string) []string {
	c := strings.Trim(filepath.ToSlash(filepath.Clean(name)), "/")
	if c == "" || c == "." {
		return nil
	}
	return strings.Split(c, "/")
}

// lookup returns the node at name. f.mu is held.
func (f *FS) lookup(op, name string) (*node, error) {
	n := f.root
	for _, p := range split(name) {
		if !n.dir {
			return nil, &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
		c, ok := n.entries[p]
		if !ok {
			return nil, &os.PathError{Op: op, Path: name, Err: syscall.ENOENT}
		}
		n = c
	}
	return n, nil
}

// parent returns the directory that holds name, and name's last element.
// f.mu is held.
func (f *FS) parent(op, name string) (*node, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.EINVAL}
	}
	d, err := f.lookup(op, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !d.dir {
		return nil, "", &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
	}
	return d, parts[len(parts)-1], nil
}

// OpenFile opens name like os.OpenFile. With O_CREATE or O_TRUNC it is an
// operation; the name it creates is durable only after SyncDir.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (fsys.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.off("open", name); err != nil {
		return nil, err
	}
	d, base, err := f.parent("open", name)
	if err != nil {
		return nil, err
	}
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	n := d.entries[base]
	switch {
	case n != nil && n.dir:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case n == nil && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	}
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		num, _, fault := f.begin(OpCreate)
		if fault == nil && n != nil && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
			fault = syscall.EEXIST
		}
		f.end(Op{N: num, Kind: OpCreate, Path: name, Err: fault})
		if fault != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: fault}
		}
		if n == nil {
			n = &node{}
			d.entries[base] = n
		} else if flag&os.O_TRUNC != 0 && acc != os.O_RDONLY {
			n.data = nil
		}
	}
	return &file{fs: f, n: n, name: name, readable: acc != os.O_WRONLY, writable: acc != os.O_RDONLY,
		appendOnly: flag&os.O_APPEND != 0, perm: perm}, nil
}

// Rename moves oldpath to newpath, replacing newpath; durable only after
// SyncDir of both directories.
func (f *FS) Rename(oldpath, newpath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	linkErr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err} }
	if f.cut {
		return linkErr(ErrPowerCut)
	}
	od, obase, err := f.parent("rename", oldpath)
	if err != nil {
		return linkErr(errors.Unwrap(err))
	}
	n, ok := od.entries[obase]
	if !ok {
		return linkErr(syscall.ENOENT)
	}
	nd, nbase, err := f.parent("rename", newpath)
	if err != nil {
		return linkErr(errors.Unwrap(err))
	}
	if t, ok := nd.entries[nbase]; ok && t.dir && t != n {
		return linkErr(syscall.EEXIST)
	}
	num, _, fault := f.begin(OpRename)
	f.end(Op{N: num, Kind: OpRename, Path: oldpath, To: newpath, Err: fault})
	if fault != nil {
		return linkErr(fault)
	}
	delete(od.entries, obase)
	nd.entries[nbase] = n
	return nil
}

// Remove removes a file or an empty directory; durable only after SyncDir.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.off("remove", name); err != nil {
		return err
	}
	d, base, err := f.parent("remove", name)
	if err != nil {
		return err
	}
	n, ok := d.entries[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	if n.dir && len(n.entries) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	num, _, fault := f.begin(OpRemove)
	f.end(Op{N: num, Kind: OpRemove, Path: name, Err: fault})
	if fault != nil {
		return &os.PathError{Op: "remove", Path: name, Err: fault}
	}
	delete(d.entries, base)
	return nil
}

// ReadDirNames returns the names in dir, sorted.
func (f *FS) ReadDirNames(dir string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.off("open", dir); err != nil {
		return nil, err
	}
	d, err := f.lookup("open", dir)
	if err != nil {
		return nil, err
	}
	if !d.dir {
		return nil, &os.PathError{Op: "readdirent", Path: dir, Err: syscall.ENOTDIR}
	}
	return slices.Sorted(maps.Keys(d.entries)), nil
}

// MkdirAll creates dir and its missing parents; each new entry is durable
// only after SyncDir of its parent.
func (f *FS) MkdirAll(dir string, perm os.FileMode) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.off("mkdir", dir); err != nil {
		return err
	}
	parts := split(dir)
	n, missing := f.root, -1
	for i, p := range parts {
		c, ok := n.entries[p]
		if !ok {
			missing = i
			break
		}
		if !c.dir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = c
	}
	if missing < 0 {
		return nil
	}
	num, _, fault := f.begin(OpMkdir)
	f.end(Op{N: num, Kind: OpMkdir, Path: dir, Err: fault})
	if fault != nil {
		return &os.PathError{Op: "mkdir", Path: dir, Err: fault}
	}
	for _, p := range parts[missing:] {
		c := newDir()
		n.entries[p] = c
		n = c
	}
	return nil
}

// SyncDir makes the current entries of dir durable.
func (f *FS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.off("sync", dir); err != nil {
		return err
	}
	d, err := f.lookup("open", dir)
	if err != nil {
		return err
	}
	if !d.dir {
		return &os.PathError{Op: "sync", Path: dir, Err: syscall.ENOTDIR}
	}
	num, _, fault := f.begin(OpSyncDir)
	f.end(Op{N: num, Kind: OpSyncDir, Path: dir, Err: fault})
	if fault != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: fault}
	}
	d.durEntries = maps.Clone(d.entries)
	return nil
}

// file is an open file. Its state is guarded by fs.mu.
type file struct {
	fs                             *FS
	n                              *node
	name                           string
	readable, writable, appendOnly bool
	perm                           os.FileMode
	off                            int64
	closed                         bool
}

// check returns the error for a call on a closed file or after the power
// was cut. f.fs.mu is held.
func (f *file) check(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	return f.fs.off(op, f.name)
}

func (f *file) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	n, err := f.readAt("read", p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if off < 0 {
		return 0, &os.PathError{Op: "readat", Path: f.name, Err: syscall.EINVAL}
	}
	n, err := f.readAt("read", p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func (f *file) readAt(op string, p []byte, off int64) (int, error) {
	if err := f.check(op); err != nil {
		return 0, err
	}
	if !f.readable {
		return 0, &os.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	}
	if off >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	return copy(p, f.n.data[off:]), nil
}

func (f *file) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write"); err != nil {
		return 0, err
	}
	if !f.writable {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EBADF}
	}
	off := f.off
	if f.appendOnly {
		off = int64(len(f.n.data))
	}
	num, keep, fault := f.fs.begin(OpWrite)
	if fault == nil && f.fs.full && off+int64(len(p)) > int64(len(f.n.data)) {
		fault, keep = syscall.ENOSPC, 0
		if f.fs.tearFull {
			keep = len(p) / 2
		}
	}
	written := len(p)
	if fault != nil {
		written = min(max(keep, 0), len(p))
	}
	f.fs.end(Op{N: num, Kind: OpWrite, Path: f.name, Bytes: len(p), Err: fault})
	if written > 0 {
		if end := off + int64(written); end > int64(len(f.n.data)) {
			f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
		}
		copy(f.n.data[off:], p[:written])
		f.off = off + int64(written)
	}
	if fault != nil {
		return written, &os.PathError{Op: "write", Path: f.name, Err: fault}
	}
	return written, nil
}

// Sync makes the file's current contents durable (not its name: that takes
// SyncDir).
func (f *file) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("sync"); err != nil {
		return err
	}
	num, _, fault := f.fs.begin(OpSync)
	f.fs.end(Op{N: num, Kind: OpSync, Path: f.name, Err: fault})
	if fault != nil {
		return &os.PathError{Op: "sync", Path: f.name, Err: fault}
	}
	f.n.synced = slices.Clone(f.n.data)
	return nil
}

func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate"); err != nil {
		return err
	}
	if !f.writable || size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	num, _, fault := f.fs.begin(OpTruncate)
	f.fs.end(Op{N: num, Kind: OpTruncate, Path: f.name, Bytes: int(size), Err: fault})
	if fault != nil {
		return &os.PathError{Op: "truncate", Path: f.name, Err: fault}
	}
	if size <= int64(len(f.n.data)) {
		// A fresh slice: the bytes past size must not come back if the
		// file grows again.
		f.n.data = slices.Clone(f.n.data[:size])
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	return nil
}

func (f *file) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

func (f *file) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("stat"); err != nil {
		return nil, err
	}
	return fileInfo{name: filepath.Base(f.name), size: int64(len(f.n.data)), mode: f.perm}, nil
}

type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi fileInfo) ModTime() time.Time { return time.Time{} }
func (fi fileInfo) IsDir() bool        { return false }
func (fi fileInfo) Sys() any           { return nil }
