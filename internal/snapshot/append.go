package snapshot

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/state"
)

// taskEncoder appends tasks to a chunk as field 1 of a TaskChunk, writing
// the bytes proto.Marshal writes for TaskMessage(t, deadline) without
// building the message: a snapshot encodes every task the state holds, and
// the message, its executions and its retry policy were most of that cost
// and all of its garbage. Any task it cannot encode that way (a string that
// is not valid UTF-8, which proto refuses) goes through proto, so that the
// two paths cannot differ in what they accept. The decoder's fast path
// (chunk.go) is its mirror.
type taskEncoder struct {
	body []byte // one task's encoding, before its length is known
	exec []byte // one execution's
}

// appendTask appends the task field of t to chunk.
func (e *taskEncoder) appendTask(chunk []byte, t *state.Task, deadline state.Time) ([]byte, error) {
	if !validStrings(t) {
		b, err := proto.MarshalOptions{}.MarshalAppend(e.body[:0], TaskMessage(t, deadline))
		if err != nil {
			return chunk, err
		}
		e.body = b
	} else {
		e.body = e.task(e.body[:0], t, deadline)
	}
	chunk = protowire.AppendTag(chunk, 1, protowire.BytesType)
	return protowire.AppendBytes(chunk, e.body), nil
}

// validStrings reports whether every string field of t is valid UTF-8, as
// proto3 requires.
func validStrings(t *state.Task) bool {
	if !utf8.ValidString(t.ID) || !utf8.ValidString(t.Namespace) || !utf8.ValidString(t.Queue) ||
		!utf8.ValidString(t.RequestID) || !utf8.ValidString(t.CommittedBy) || !utf8.ValidString(t.FailureReason) {
		return false
	}
	for i := range t.Executions {
		x := &t.Executions[i]
		if !utf8.ValidString(x.LeaseID) || !utf8.ValidString(x.WorkerID) || !utf8.ValidString(x.Reason) {
			return false
		}
	}
	return true
}

// task appends the fields of TaskMessage(t, deadline) to b in field
// order, leaving out zero values as proto3 does.
func (e *taskEncoder) task(b []byte, t *state.Task, deadline state.Time) []byte {
	b = appendString(b, 1, t.ID)
	b = appendString(b, 2, t.Namespace)
	b = appendString(b, 3, t.Queue)
	b = appendBytes(b, 4, t.Payload)
	b = appendVarint(b, 5, uint64(t.Window))
	if r := t.Retry; r != (state.RetryPolicy{}) {
		var p [40]byte
		rb := appendVarint(p[:0], 1, uint64(r.MaxAttempts))
		rb = appendVarint(rb, 2, uint64(r.InitialBackoff))
		rb = appendVarint(rb, 3, uint64(r.MaxBackoff))
		if r.Multiplier != 0 || math.Signbit(r.Multiplier) {
			rb = protowire.AppendTag(rb, 4, protowire.Fixed64Type)
			rb = protowire.AppendFixed64(rb, math.Float64bits(r.Multiplier))
		}
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, rb)
	}
	b = appendString(b, 7, t.RequestID)
	b = appendVarint(b, 8, protowire.EncodeZigZag(int64(t.Priority)))
	b = appendFixed(b, 9, int64(t.NotBefore))
	b = appendFixed(b, 10, int64(t.CreatedAt))
	b = appendFixed(b, 11, int64(t.UpdatedAt))
	b = appendVarint(b, 12, t.CreatedLSN)
	b = appendVarint(b, 13, uint64(int64(t.State)))
	b = appendVarint(b, 14, uint64(t.Attempt))
	b = appendBytes(b, 15, t.Result)
	b = appendString(b, 16, t.CommittedBy)
	b = appendString(b, 17, t.FailureReason)
	for i := range t.Executions {
		e.exec = execution(e.exec[:0], &t.Executions[i])
		b = protowire.AppendTag(b, 18, protowire.BytesType)
		b = protowire.AppendBytes(b, e.exec)
	}
	if lsns := t.LSNs(); len(lsns) > 0 {
		n := 0
		for _, v := range lsns {
			n += protowire.SizeVarint(v)
		}
		b = protowire.AppendTag(b, 19, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, v := range lsns {
			b = protowire.AppendVarint(b, v)
		}
	}
	if t.LeaseIndex() >= 0 {
		b = appendVarint(b, 20, 1)
	}
	b = appendVarint(b, 21, uint64(t.AttemptBase))
	return appendFixed(b, 22, int64(deadline))
}

// execution appends the fields of an ExecutionSnapshot of x to b.
func execution(b []byte, x *state.Execution) []byte {
	b = appendVarint(b, 1, uint64(x.Attempt))
	b = appendString(b, 2, x.LeaseID)
	b = appendString(b, 3, x.WorkerID)
	b = appendVarint(b, 4, uint64(int64(x.Status)))
	if x.Finalize {
		b = appendVarint(b, 5, 1)
	}
	b = appendFixed(b, 6, int64(x.LeasedAt))
	b = appendFixed(b, 7, int64(x.LeaseExpiry))
	b = appendFixed(b, 8, int64(x.StartedAt))
	b = appendFixed(b, 9, int64(x.CommittedAt))
	b = appendFixed(b, 10, int64(x.FinishedAt))
	b = appendString(b, 11, x.Reason)
	return appendVarint(b, 12, uint64(uint32(x.Refused)))
}

// appendString appends a string or bytes field, unless it is empty.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendBytes appends a bytes field, unless it is empty.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendVarint appends a varint field, unless it is zero.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendFixed appends a fixed64 field, unless it is zero.
func appendFixed(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, uint64(v))
}
