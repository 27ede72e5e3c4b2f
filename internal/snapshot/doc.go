// Package snapshot writes and reads snapshot files: the state of a
// partition at one LSN, so that a restart loads the newest snapshot and
// replays only the log after it, and log segments below the snapshots can be
// deleted (docs/design/formats.md).
//
// Promises:
//   - A snapshot file is written atomically: under a temporary name, fsynced,
//     renamed into place, and the directory fsynced. A crash or power loss at
//     any point leaves either no snapshot, a leftover temporary file (removed
//     by Dir.Clean, never read), or the complete file.
//   - Reading verifies everything before it answers: the header checksum,
//     every chunk's checksum, the task count, and a checksum over the whole
//     file; then every task goes through state.Loader, which checks what
//     State.Invariants would. A snapshot that reads without error is the
//     state that was written.
//   - The decoder never allocates more than the file holds: every length is
//     checked against MaxChunkBytes and against the bytes left in the file
//     before anything is allocated, and it never panics, whatever the input.
//   - Neither the writer nor the reader holds the whole state as one encoded
//     message: the writer works one chunk (at most 1024 tasks) at a time;
//     the reader reads chunks in order, verifies and decodes a few of them
//     (2×GOMAXPROCS+2 at most) concurrently, and adds their tasks to the
//     state in file order, so that it reports the first problem in the file
//     as a one-chunk-at-a-time reader would.
//   - The writer appends each task's bytes straight from the state.Task
//     (append.go), and the reader decodes them straight into one
//     (chunk.go): a snapshot re-encodes every task the state holds, so
//     neither builds a proto message per task. The writer's bytes are the
//     ones proto.Marshal writes for TaskMessage, and the reader falls back
//     to proto.Unmarshal on anything its fast path does not take; tests
//     hold both paths to proto's.
//
// # On-disk format
//
// Files are named snap-<last lsn as 16 hex digits>.tsnap, so lexical order is
// LSN order. All integers are little-endian. A file is a 32-byte header,
// zero or more chunks, and a 24-byte trailer:
//
//	header
//	0        8         12        16         24       32
//	+--------+---------+---------+----------+--------+
//	| magic  | version | hdr crc | last lsn | epoch  |
//	+--------+---------+---------+----------+--------+
//	  magic    "TENUSNAP"
//	  version  uint32, 9 (8 before pending deliveries, 7 before remote edges, 6 before outbox holds, 5 before the graph of workflows, 4 before keys,
//	           3 before trace contexts, progress and snoozes, 2 before schedules, 1 before
//	           the chunk of queues; all still read)
//	  hdr crc  uint32, CRC-32C (Castagnoli) of bytes 0..12 and 16..32
//	  last lsn uint64, the LSN of the last record the state includes
//	  epoch    uint64, the partition epoch (state.State.Epoch)
//
//	chunk
//	0        4       8
//	+--------+-------+--------------------------------------+
//	| length | crc   | payload: tenure.snapshot.v1.TaskChunk |
//	+--------+-------+--------------------------------------+
//	  length   uint32, payload bytes, 1..MaxChunkBytes
//	  crc      uint32, CRC-32C of the payload
//
//	trailer (the last 24 bytes of the file)
//	0          8       16       20         24
//	+----------+-------+--------+----------+
//	| end magic| tasks | chunks | file crc |
//	+----------+-------+--------+----------+
//	  end magic "TSNAPEND"
//	  tasks     uint64, number of tasks in all chunks
//	  chunks    uint32, number of chunks
//	  file crc  uint32, CRC-32C of every byte of the file before it
//
// The first chunk may hold queues instead of tasks: what the state keeps of
// its queues beyond their tasks (pauses and recent event counts).
// Chunks fill the file from the header to the trailer exactly; the reader
// knows where the trailer starts from the file size. Tasks appear in
// creation order (increasing creation LSN); the messages are defined in
// proto/tenure/snapshot/v1/snapshot.proto and carry every field of
// state.Task, including whether its last execution holds the current lease.
package snapshot
