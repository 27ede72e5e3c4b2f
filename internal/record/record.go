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
	out, err = proto.MarshalOptions{}.MarshalAppend(buf, m)
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
	if r == nil {
		return nil, nil, errors.New("record: encode nil record")
	}
	row := rowOf(r)
	if row == nil {
		return nil, nil, fmt.Errorf("%w: %T has no row in the registry (internal/record/registry.go): add one", ErrUnknownType, r)
	}
	m := row.toPB(r)
	if m == nil {
		return nil, nil, fmt.Errorf("record: encode nil %T", r)
	}
	return row, m, nil
}

// Decode decodes a payload of type typ. The record shares no memory with
// payload.
func Decode(typ Type, payload []byte) (state.Record, error) {
	if int(typ) >= len(byType) || byType[typ] == nil {
		return nil, fmt.Errorf("%w %d", ErrUnknownType, uint16(typ))
	}
	return byType[typ].decode(payload)
}
