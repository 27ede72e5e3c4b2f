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
func Encode(buf []byte, r state.Record) (typ Type, out []byte, err error) {
	row, m, err := message(r)
	if err != nil {
		return 0, buf, err
	}
	return marshal(row, buf, m)
}

// Encoder encodes records as Encode does: the types a task's life writes
// most straight from their structs (wire.go), the others into one message
// per record type that it reuses from record to record, where Encode
// allocates a message (and its nested messages) for each. It keeps the
// last record of each type it encoded reachable. Its zero value is ready;
// it is not safe for concurrent use.
type Encoder struct {
	msgs []proto.Message // by Type
}

// Encode is Encode (the function) with e's messages.
func (e *Encoder) Encode(buf []byte, r state.Record) (typ Type, out []byte, err error) {
	row, err := rowFor(r)
	if err != nil {
		return 0, buf, err
	}
	if out, ok := appendWire(buf, r); ok {
		return row.typ, out, nil
	}
	if e.msgs == nil {
		e.msgs = make([]proto.Message, len(byType))
	}
	m := e.msgs[row.typ]
	if m == nil {
		m = row.newMsg()
		e.msgs[row.typ] = m
	}
	if !row.fill(r, m) {
		return 0, buf, fmt.Errorf("record: encode nil %T", r)
	}
	return marshal(row, buf, m)
}

func marshal(row *row, buf []byte, m proto.Message) (Type, []byte, error) {
	out, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return 0, buf, fmt.Errorf("record: encode %s: %w", row.name, err)
	}
	return row.typ, out, nil
}

// Message returns the protobuf message of r: what Encode marshals. Tools
// print it (as protojson) to show a record.
func Message(r state.Record) (proto.Message, error) {
	_, m, err := message(r)
	return m, err
}

func message(r state.Record) (*row, proto.Message, error) {
	row, err := rowFor(r)
	if err != nil {
		return nil, nil, err
	}
	m := row.toPB(r)
	if m == nil {
		return nil, nil, fmt.Errorf("record: encode nil %T", r)
	}
	return row, m, nil
}

// rowFor returns the row of r, or the error of encoding a record without
// one.
func rowFor(r state.Record) (*row, error) {
	if r == nil {
		return nil, errors.New("record: encode nil record")
	}
	row := rowOf(r)
	if row == nil {
		return nil, fmt.Errorf("%w: %T has no row in the registry (internal/record/registry.go): add one", ErrUnknownType, r)
	}
	return row, nil
}

// Decode decodes a payload of type typ. The record shares no memory with
// payload.
func Decode(typ Type, payload []byte) (state.Record, error) {
	if int(typ) >= len(byType) || byType[typ] == nil {
		return nil, fmt.Errorf("%w %d", ErrUnknownType, uint16(typ))
	}
	return byType[typ].decode(payload)
}
