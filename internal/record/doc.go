// Package record encodes and decodes the payloads of write-ahead log records.
//
// A WAL frame (package wal) carries a record's type and LSN next to its
// payload; this package owns both: the type numbers (Type) and the payload,
// the protobuf encoding of one internal/state record, defined by the
// messages of proto/tenure/record/v1/record.proto (generated into
// recordpb).
//
// One table, the registry (registry.go), has a row per record type: its
// number, its name, its internal/state struct, its message and the two
// conversions between them. Encode, Message, Decode, TypeOf and
// Type.String are derived from it, and the tests check it against the
// record types of internal/state, the messages of record.proto and the
// statetest generator, so that a record type cannot be half added.
// docs/design/records.md describes every record type and how to add one.
//
// The encoding is part of the on-disk format. Type numbers and field
// numbers are never reused or renumbered; removed fields are reserved;
// FormatVersion names the format as a whole, for segment and snapshot
// headers to carry. Every Type has exactly one message, and each conversion
// between a state struct and its message is a plain field-by-field copy in
// both directions, so that Decode(Encode(r)) equals r for every record
// (with nil and empty byte slices treated as the same: Decode returns nil
// for empty). testdata/encoding.golden pins the bytes of one record of
// every type.
//
// Promises:
//   - Decode never panics, whatever its input, and never retains the payload
//     it is given: the returned record owns all of its memory, so the caller
//     may reuse its read buffer at once, and state.Apply may keep the
//     record's byte slices.
//   - Decode rejects a type it does not know with an error wrapping
//     ErrUnknownType, and a payload it cannot parse with one wrapping
//     ErrMalformed. It checks the encoding only: whether a record makes sense
//     is for state.Apply to decide.
//   - Encode appends to the caller's buffer and allocates little besides the
//     intermediate message, so a group commit can encode a batch of records
//     into one reused buffer. An Encoder (what the coordinator uses)
//     allocates nothing: it reuses one message per type, and writes the
//     three types every task's life writes (TaskCreated, LeaseGranted,
//     TaskCompleted) straight from their structs with package pbwire
//     (wire.go), about a third of proto's cost; the tests hold those bytes
//     to proto.Marshal's, so the format is one whichever path wrote it.
//   - Strings must be valid UTF-8 (proto3 checks it both ways). The API
//     layer guarantees that for every identifier it accepts; Encode reports a
//     violation as an error rather than writing a record no reader accepts.
package record
