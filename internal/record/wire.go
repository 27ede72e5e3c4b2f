package record

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenurehq/tenure/internal/pbwire"
	"github.com/tenurehq/tenure/internal/state"
)

// appendWire appends the payload of r written straight from its struct,
// and reports whether it did: only for the record types a task's life
// writes most (TaskCreated, LeaseGranted, TaskCompleted: every task that
// runs once writes one of each), which then skip filling a message and
// proto's reflection-driven marshal. The bytes are the ones proto.Marshal
// writes for the message (TestEncoderMatchesEncode and TestWireMatchesProto
// hold them to it). A record of another type, a nil one, or one with a
// string that is not valid UTF-8 is left to proto, which decides what it
// writes or refuses.
func appendWire(b []byte, r state.Record) ([]byte, bool) {
	switch r := r.(type) {
	case *state.TaskCreated:
		if r == nil || len(r.DependsOn) > 0 || r.OnDependencyFailure != 0 || !pbwire.ValidStrings(r.TaskID, r.Namespace, r.Queue, r.RequestID, r.By, r.Trace.Parent, r.Trace.State, r.Kind, r.Key) {
			return b, false
		}
		b = pbwire.String(b, 1, r.TaskID)
		b = pbwire.String(b, 2, r.Namespace)
		b = pbwire.String(b, 3, r.Queue)
		b = pbwire.Bytes(b, 4, r.Payload)
		b = pbwire.Varint(b, 5, uint64(r.ExecutionWindow))
		b = pbwire.RetryPolicy(b, 6, r.Retry)
		b = pbwire.String(b, 7, r.RequestID)
		b = pbwire.Fixed(b, 8, int64(r.NotBefore))
		b = pbwire.Varint(b, 9, protowire.EncodeZigZag(int64(r.Priority)))
		b = pbwire.Fixed(b, 10, int64(r.CreatedAt))
		b = pbwire.String(b, 11, r.By)
		b = pbwire.Fixed(b, 12, int64(r.Deadline))
		b = pbwire.String(b, 13, r.Trace.Parent)
		b = pbwire.String(b, 14, r.Trace.State)
		b = pbwire.String(b, 15, r.Kind)
		return pbwire.String(b, 16, r.Key), true
	case *state.LeaseGranted:
		if r == nil || !pbwire.ValidStrings(r.TaskID, r.LeaseID, r.WorkerID, r.By) {
			return b, false
		}
		b = pbwire.String(b, 1, r.TaskID)
		b = pbwire.String(b, 2, r.LeaseID)
		b = pbwire.String(b, 3, r.WorkerID)
		b = pbwire.Varint(b, 4, uint64(r.Attempt))
		b = pbwire.Fixed(b, 5, int64(r.LeaseExpiry))
		b = pbwire.Fixed(b, 6, int64(r.GrantedAt))
		return pbwire.String(b, 7, r.By), true
	case *state.TaskCompleted:
		if r == nil || len(r.Spawn)+len(r.Deliver) > 0 || !pbwire.ValidStrings(r.TaskID, r.LeaseID, r.By) {
			return b, false
		}
		b = pbwire.String(b, 1, r.TaskID)
		b = pbwire.String(b, 2, r.LeaseID)
		b = pbwire.Bytes(b, 3, r.Result)
		b = pbwire.Fixed(b, 4, int64(r.At))
		return pbwire.String(b, 5, r.By), true
	}
	return b, false
}
