// Package fsys is the narrow file-system interface under tenure's durable
// storage (the write-ahead log, and later snapshots).
//
// It exists so that storage code never calls package os directly: every
// open, write, fsync, rename and directory fsync goes through an [FS], and a
// fault-injecting implementation can replace [OS] in tests to fail a write or
// fsync at operation N, return ENOSPC, tear a write in half or drop data that
// was never fsynced. The interface is deliberately small, so such an
// implementation stays small too: it covers what durable storage needs and
// nothing else.
//
// What an implementation promises is what the operating system promises:
//   - File.Write may leave any prefix of its buffer in the file when it fails
//     or when the machine crashes before the next successful Sync.
//   - Data is durable only after File.Sync returns nil; a failed Sync means
//     the state of the file is unknown and must not be trusted (callers treat
//     it as fatal and never retry).
//   - A created, renamed or removed name is durable only after SyncDir on its
//     directory returns nil.
//   - Rename atomically replaces newpath.
package fsys
