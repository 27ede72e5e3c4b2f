// Package wal is tenure's embedded write-ahead log: an append-only sequence
// of records, numbered by dense LSNs (1, 2, 3, ...), kept in segment files in
// one directory. The coordinator appends a record before it makes the record's
// effect observable and replays the log after a restart (docs/design/formats.md).
//
// # Durability contract
//
// Append assigns LSNs and queues records; it does not make them durable.
// Wait(ctx, lsn) returns nil only once every record up to lsn is durable:
// written and fsynced under SyncAlways; written (surviving a process crash
// but NOT a kernel crash or power loss) under SyncNone. Nothing that was not
// acknowledged that way is promised, though it may survive.
//
// One writer goroutine does group commit (on internal/groupcommit, the core
// the cluster's log shares): it takes every record appended
// since its last round, writes them in one write (split only at a segment
// boundary or at MaxBatchBytes) and fsyncs once, then advances DurableLSN and
// wakes the waiters. While it writes, new appends collect for the next round.
// With Options.CommitInterval under SyncAlways, a round that would start
// sooner than that after the last round started waits out the rest first,
// if the last round carried more than one Append call: an fsync costs the
// machine CPU whatever it writes (on the machine of BENCHMARKS.md, about
// 100 µs), and when fsyncs are faster than the work between them, rounds
// of one or two requests each spend that CPU again and again. Waiting lets
// more requests share each fsync; it adds at most the interval to a
// request's latency, and nothing when the log has been idle that long. A
// round of one call says nobody else is appending: a caller that waits for
// each record before it appends the next would otherwise wait out the
// interval every time, with nobody to share the fsync with.
//
// A failed write or fsync is fatal and sticky: the log never retries an
// fsync (the kernel may have dropped the dirty pages and cleared the error),
// DurableLSN never passes the failed batch, and every pending and later
// Append and Wait returns the error (Err reports it). The owner closes the
// Log and opens the directory again, which recovers what reached the disk.
// Running out of disk space is the same.
//
// Only one Log may use a directory at a time; the owner of the data
// directory enforces that.
//
// # On-disk format
//
// All integers are little-endian. Segment files are named by the LSN of their
// first record as 16 hex digits: 0000000000000001.wal, 00000000000a3f01.wal.
// Each starts with a 24-byte header:
//
//	0       8         12        16              24
//	+-------+---------+---------+---------------+
//	| magic | version | hdr crc | first lsn     |
//	+-------+---------+---------+---------------+
//	  magic     8 bytes "TENUWAL\x00"
//	  version   uint32, 1
//	  hdr crc   uint32, CRC-32C (Castagnoli) of bytes 0..12 and 16..24
//	  first lsn uint64, LSN of the first frame; must match the file name
//
// followed by zero or more frames, back to back, no padding:
//
//	0        4        8      10         12             20
//	+--------+--------+------+----------+--------------+-----------------+
//	| length | crc    | type | reserved | lsn          | payload ...     |
//	+--------+--------+------+----------+--------------+-----------------+
//	  length   uint32, payload bytes, at most MaxRecordBytes
//	  crc      uint32, CRC-32C (Castagnoli) of bytes 8..20 (type, reserved,
//	           lsn) then the payload; the length is not covered, a wrong one
//	           moves the payload window and fails the checksum
//	  type     uint16, the caller's record type, never 0 (so zeroed space
//	           never decodes as a record)
//	  reserved uint16, 0
//	  lsn      uint64, the record's LSN
//
// LSNs are dense and increasing across segments: each segment's first LSN is
// one past the previous segment's last, and each frame's LSN is one past the
// previous frame's. A gap or a repeat is corruption. A segment is at most
// SegmentBytes, header included, except that a frame larger than that goes
// alone into a fresh segment.
//
// A new segment is created under the name <segment>.tmp, its header written
// and fsynced, then renamed into place and the directory fsynced, so a
// segment file never lacks its header. The old segment is fsynced before the
// new one is created, under either sync policy, so only the last segment can
// end in a torn write.
//
// # Recovery
//
// Open reads every segment in LSN order and checks its header (magic,
// version, checksum, first LSN against the name and against the previous
// segment) and every frame: length <= MaxRecordBytes, frame within the file,
// checksum, reserved 0, type not 0, LSN the next one. At the first frame that
// fails:
//
//   - In any segment but the last: corruption.
//   - If the frame is complete and its checksum is valid (reserved or type
//     wrong, wrong LSN, or a length over MaxRecordBytes whose bytes check
//     out): corruption. A write cut short cannot produce a valid checksum.
//   - Otherwise (the file ends inside the frame header or payload, the
//     checksum fails, or the length is over MaxRecordBytes and the bytes
//     after it do not check out) Open looks at every later byte offset of the segment for
//     the start of a valid frame that could follow it: length within
//     MaxRecordBytes and the file, reserved 0, type not 0, valid checksum,
//     and an LSN between the expected one and expected + (its distance from
//     the bad frame)/20. If there is one: corruption, because records were
//     durably written after the bad one. If there is none: a torn write. Open
//     truncates the segment at the bad frame's offset, fsyncs it and logs the
//     segment, offset and bytes dropped.
//
// So a write of a multi-frame batch that was cut short (frame k partial,
// frames after it missing, or zeroes or garbage after it) is a torn tail, and
// a flipped bit in a record followed by valid records is corruption. The
// price, both ways: damage to the very last records of the log looks like a
// torn write, and they are dropped even if they had been acknowledged
// (unless the tail file names them: see below); and a power loss that wrote
// back the pages of an unacknowledged batch out of order (a hole, then a
// valid frame) is reported as corruption, so Open refuses to start although
// nothing acknowledged was lost. A format of single self-checked records
// cannot tell these cases apart.
//
// Corruption makes Open return a *CorruptionError naming the segment file
// and the offset of the bad header or frame, without modifying anything.
//
// A last segment shorter than its header (impossible with the rename above,
// handled anyway) is removed and logged, as are leftover .tmp files (of a
// segment or of the tail file). Open then
// fsyncs the last segment, because a previous process may have written it
// without fsyncing and its records are about to be reported durable, and
// appends continue after its last valid record.
//
// # The tail file
//
// Segments chain by name and header, so a missing segment between two
// others is a gap Open refuses. But a log whose newest segments are gone,
// or whose last segment was cut short, looks like a log that never had
// more. The tail file, TAIL in the log's directory, records how far the
// log was known to reach:
//
//	0       8         12        16                24
//	+-------+---------+---------+-----------------+----------+
//	| magic | version | crc     | newest segment  | last lsn |
//	+-------+---------+---------+-----------------+----------+
//	  magic          8 bytes "TENUTAIL"
//	  version        uint32, 1
//	  crc            uint32, CRC-32C of bytes 0..12 and 16..32
//	  newest segment uint64, first LSN of the newest segment when written
//	  last lsn       uint64, every record up to it was durable when written
//
// It is replaced atomically (TAIL.tmp written and fsynced, renamed, the
// directory fsynced), never names a record that is not durable, and is
// written:
//
//   - at every new segment, once the first records written to it are
//     durable (fsynced under either sync policy) and before they are
//     reported durable: so a segment that ever held an acknowledged record
//     is named, and deleting it is found;
//   - at Close, after the last fsync: the log's last record, so that after
//     a clean stop every lost record is found;
//   - at Open, when there is none (a fresh log, or one written before the
//     tail file existed, which opens as it is: nothing can be checked
//     against a file that was never written), and when a loss is accepted.
//
// Open compares the log with it. When the log ends before the tail file's
// last LSN, the records from the log's end to it are missing (Missing
// names them and what the disk shows: a segment gone, the last segment cut
// short, or bytes there that are not valid records, which are then not a
// torn write and are left as they are). Open succeeds, but Append refuses
// with ErrMissing until the owner accepts the loss (AcceptMissing, which
// cuts such bytes and rewrites the tail file) or gives up; the coordinator
// refuses to start unless the loss is accepted by name. After a crash (no
// clean Close) the tail file may name less than the log held: a segment
// cut short after a crash is found missing only up to what it names. A
// damaged tail file makes Open refuse (*TailError) without modifying
// anything; deleting it makes the log open as one without a tail file.
//
// # Compaction and offline reading
//
// DeleteBefore(lsn) removes whole segments whose records are all below lsn,
// oldest first, never the active segment nor one that holds the record
// Options.Retain names (a reader still needs it), fsyncing the directory
// after each removal so that a crash leaves a contiguous run of segments.
// The owner calls it once a snapshot covers those records (package
// snapshot); FirstLSN then moves up and Replay from below it returns
// ErrCompacted.
//
// # Following the log
//
// A Reader (NewReader) reads the durable records from an LSN on and keeps
// its place: its segment file stays open between reads, so following the
// log costs no scan (the event streams of docs/design/events.md read a log
// they fell behind on this way). Options.Tail is handed the records of
// every write right after they are durable, by the writer goroutine, while
// it says it is watched: the event streams' tail in memory. It must not
// block; the writer asks it once per write whether it is watched, and
// does nothing more when it is not.
//
// Verify checks a directory as Open would but modifies nothing: corruption
// is a *CorruptionError naming the segment and offset; what Open would
// repair (a torn tail, leftovers) is reported as notes, and records missing
// by the tail file as VerifyReport.Missing. ReplayDir reads the
// valid records of a directory the same way, for offline tools.
package wal
