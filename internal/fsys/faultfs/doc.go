// Package faultfs is an in-memory [fsys.FS] for tests: a disk with a page
// cache that keeps exactly the promises package fsys documents, and breaks
// the operations it is told to break.
//
// # Model
//
// Every file has two contents: what reads see (the page cache) and what is
// durable (what survives a power loss). Write and Truncate change the first;
// File.Sync copies it to the second. Directory entries are modelled the same
// way: creating, renaming or removing a name changes what OpenFile,
// ReadDirNames and friends see at once, but the change becomes durable only
// when SyncDir on its directory succeeds. A file created and fsynced but
// whose directory was never fsynced vanishes in a power loss; a rename that
// was not followed by SyncDir reverts. Directories made by MkdirAll are
// entries of their parent like files. The root directory always exists.
//
// [FS.PowerLoss] returns the disk after a reboot: a new, independent FS
// holding only the durable state. [FS.PowerLossKeep] keeps, in addition, a
// random prefix of each file's unsynced data, as a disk that wrote back some
// dirty pages, in order, before the power went. [FS.PowerLossPages] keeps
// each dirty page or not, independently, as a disk that writes back out of
// order, which can leave holes. Directory entries always revert to their
// last SyncDir. [FS.WriteBack] is the opposite: it makes the whole current
// state durable, as the kernel's write-back eventually does after a process
// crash.
//
// # Operations and faults
//
// Every call that can change the disk is one operation, numbered from 1 in
// call order: File.Write, File.Sync, File.Truncate, SyncDir, Rename, Remove,
// OpenFile with O_CREATE or O_TRUNC, and MkdirAll when it has a directory to
// create. Reads, Stat, Close, ReadDirNames and opening an existing file
// without O_TRUNC are not operations. [FS.Ops] is the count so far and
// [FS.Trace] the list, so a test can run a scripted workload once to count
// its operations and then rerun it with a fault at every index.
//
// Faults are deterministic and planned ahead:
//   - [FS.FailAt] fails one numbered operation, [FS.FailNext] the next one of
//     a kind, [FS.FailWrites] and [FS.FailSyncs] every later write or fsync
//     (SyncDir included). A failed operation has no effect at all; its error
//     is an *os.PathError (an *os.LinkError for Rename) wrapping the given
//     error, syscall.EIO by default.
//   - [FS.TearAt] makes one Write store only a prefix of its data and then
//     fail: a torn write.
//   - [FS.SetFull] makes every Write that would grow a file fail with
//     syscall.ENOSPC, having written nothing, or, after TearWrites(true),
//     half of its data (a short write).
//   - [FS.CutPowerAfter] turns the machine off right after a numbered
//     operation: every later call on the FS or its files fails with
//     [ErrPowerCut] and changes nothing, so PowerLoss, whenever it is
//     called, sees the disk exactly as that operation left it.
//
// An FS and its files are safe for concurrent use; operations are numbered
// in the order they take the FS's lock.
package faultfs
