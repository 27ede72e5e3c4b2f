// Package pbwire appends proto3 fields exactly as proto.Marshal writes
// them for tenure's generated messages: in field order, a zero value left
// out. The encoders of the hot formats use it to write a message straight
// from the state's structs, without building the message first: snapshot
// chunks (internal/snapshot, append.go) and the records a task's life
// writes most (internal/record, wire.go). Each caller's tests hold its
// bytes to proto.Marshal's.
//
// proto3 refuses a string field that is not valid UTF-8; these functions
// do not check. A caller checks its strings first (ValidStrings) and
// leaves a message with an invalid one to proto, so that both paths refuse
// the same inputs.
package pbwire
