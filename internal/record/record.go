package record

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
)

// FormatVersion is the version of the record encoding
// (tenure.record.v1.FormatVersion). WAL segment and snapshot headers record
// it; a reader must refuse a version it does not know.
const FormatVersion = uint32(recordpb.FormatVersion_FORMAT_VERSION_1)

var (
	// ErrUnknownType is wrapped by the error for a record type that has no
	// encoding.
	ErrUnknownType = errors.New("record: unknown record type")
	// ErrMalformed is wrapped by the error for a payload that is not a valid
	// encoding of its type.
	ErrMalformed = errors.New("record: malformed payload")
)

// Encode appends the protobuf encoding of r to buf and returns it with r's
// type. On error it returns buf unchanged.
func Encode(buf []byte, r state.Record) (typ state.RecordType, out []byte, err error) {
	m, err := Message(r)
	if err != nil {
		return 0, buf, err
	}
	out, err = proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return 0, buf, fmt.Errorf("record: encode %v: %w", r.Type(), err)
	}
	return r.Type(), out, nil
}

// Message returns the protobuf message of r: what Encode marshals. Tools
// print it (as protojson) to show a record.
func Message(r state.Record) (proto.Message, error) {
	var m proto.Message
	switch r := r.(type) {
	case *state.TaskCreated:
		if r != nil {
			m = taskCreatedToPB(r)
		}
	case *state.LeaseGranted:
		if r != nil {
			m = leaseGrantedToPB(r)
		}
	case *state.LeaseExtended:
		if r != nil {
			m = leaseExtendedToPB(r)
		}
	case *state.LeaseExpired:
		if r != nil {
			m = leaseExpiredToPB(r)
		}
	case *state.ExecutionStarted:
		if r != nil {
			m = executionStartedToPB(r)
		}
	case *state.TaskCommitted:
		if r != nil {
			m = taskCommittedToPB(r)
		}
	case *state.TaskCompleted:
		if r != nil {
			m = taskCompletedToPB(r)
		}
	case *state.TaskFailed:
		if r != nil {
			m = taskFailedToPB(r)
		}
	case *state.TaskCancelled:
		if r != nil {
			m = taskCancelledToPB(r)
		}
	case *state.TaskDead:
		if r != nil {
			m = taskDeadToPB(r)
		}
	case *state.Fence:
		if r != nil {
			m = fenceToPB(r)
		}
	case *state.TasksPurged:
		if r != nil {
			m = tasksPurgedToPB(r)
		}
	case nil:
		return nil, errors.New("record: encode nil record")
	default:
		return nil, fmt.Errorf("%w %d (%T)", ErrUnknownType, r.Type(), r)
	}
	if m == nil {
		return nil, fmt.Errorf("record: encode nil %T", r)
	}
	return m, nil
}

// Decode decodes a payload of type typ. The record shares no memory with
// payload.
func Decode(typ state.RecordType, payload []byte) (state.Record, error) {
	// proto.Unmarshal copies bytes and string fields out of payload, so
	// nothing below aliases the caller's buffer.
	switch typ {
	case state.TypeTaskCreated:
		return decode(typ, payload, taskCreatedFromPB)
	case state.TypeLeaseGranted:
		return decode(typ, payload, leaseGrantedFromPB)
	case state.TypeLeaseExtended:
		return decode(typ, payload, leaseExtendedFromPB)
	case state.TypeLeaseExpired:
		return decode(typ, payload, leaseExpiredFromPB)
	case state.TypeExecutionStarted:
		return decode(typ, payload, executionStartedFromPB)
	case state.TypeTaskCommitted:
		return decode(typ, payload, taskCommittedFromPB)
	case state.TypeTaskCompleted:
		return decode(typ, payload, taskCompletedFromPB)
	case state.TypeTaskFailed:
		return decode(typ, payload, taskFailedFromPB)
	case state.TypeTaskCancelled:
		return decode(typ, payload, taskCancelledFromPB)
	case state.TypeTaskDead:
		return decode(typ, payload, taskDeadFromPB)
	case state.TypeFence:
		return decode(typ, payload, fenceFromPB)
	case state.TypeTasksPurged:
		return decode(typ, payload, tasksPurgedFromPB)
	default:
		return nil, fmt.Errorf("%w %d", ErrUnknownType, uint16(typ))
	}
}

// decode unmarshals payload into a new M and maps it with from.
func decode[M any, PM interface {
	*M
	proto.Message
}, R state.Record](typ state.RecordType, payload []byte, from func(PM) R) (state.Record, error) {
	m := PM(new(M))
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("%w: %v: %w", ErrMalformed, typ, err)
	}
	return from(m), nil
}

// noEmpty returns b, or nil if b is empty, so that a record decodes to the
// same value whether an empty byte field was omitted or written.
func noEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
