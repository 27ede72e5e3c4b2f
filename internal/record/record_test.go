package record

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
)

// t0 is an arbitrary instant with all 8 bytes in use.
var t0 = state.TimeOf(time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC))

// examples holds one record of every type with every field set to a
// non-zero value. TestExamplesSetEveryField keeps it that way.
func examples() []state.Record {
	return []state.Record{
		&state.TaskCreated{
			TaskID:          "task-1",
			Namespace:       "billing",
			Queue:           "invoices",
			Payload:         []byte(`{"invoice":42}`),
			ExecutionWindow: 30 * time.Second,
			Retry: state.RetryPolicy{
				MaxAttempts:    5,
				InitialBackoff: time.Second,
				MaxBackoff:     5 * time.Minute,
				Multiplier:     1.5,
			},
			RequestID: "req-7",
			NotBefore: t0.Add(time.Minute),
			Priority:  -3,
			CreatedAt: t0,
		},
		&state.LeaseGranted{
			TaskID:      "task-1",
			LeaseID:     "lease-1",
			WorkerID:    "worker-a",
			Attempt:     1,
			LeaseExpiry: t0.Add(30 * time.Second),
			GrantedAt:   t0,
		},
		&state.LeaseExtended{
			TaskID:         "task-1",
			LeaseID:        "lease-1",
			NewLeaseExpiry: t0.Add(time.Minute),
			At:             t0.Add(20 * time.Second),
		},
		&state.LeaseExpired{
			TaskID:  "task-1",
			LeaseID: "lease-1",
			At:      t0.Add(time.Minute),
			RetryAt: t0.Add(2 * time.Minute),
		},
		&state.ExecutionStarted{
			TaskID:  "task-1",
			LeaseID: "lease-2",
			At:      t0.Add(3 * time.Minute),
		},
		&state.TaskCommitted{
			TaskID:  "task-1",
			LeaseID: "lease-2",
			Result:  []byte{0, 1, 2, 0xff},
			At:      t0.Add(4 * time.Minute),
		},
		&state.TaskCompleted{
			TaskID:  "task-1",
			LeaseID: "lease-2",
			Result:  []byte("done"),
			At:      t0.Add(5 * time.Minute),
		},
		&state.TaskFailed{
			TaskID:    "task-2",
			LeaseID:   "lease-3",
			Reason:    "upstream returned 503",
			RetryAt:   t0.Add(10 * time.Minute),
			Permanent: true,
			At:        t0.Add(6 * time.Minute),
		},
		&state.TaskCancelled{
			TaskID:  "task-2",
			LeaseID: "lease-old",
			Reason:  "lease expired before the commit",
			At:      t0.Add(7 * time.Minute),
		},
		&state.TaskDead{
			TaskID: "task-3",
			Reason: "killed by operator",
			At:     t0.Add(8 * time.Minute),
		},
		&state.Fence{
			Epoch:  7,
			NodeID: "node-b",
			At:     t0.Add(9 * time.Minute),
		},
		&state.TasksPurged{
			Before: t0.Add(-7 * 24 * time.Hour),
			At:     t0.Add(10 * time.Minute),
		},
	}
}

// knownTypes is every record type state defines. TestEveryStateTypeHasCodec
// fails when state gains a type that is missing here.
var knownTypes = []state.RecordType{
	state.TypeTaskCreated,
	state.TypeLeaseGranted,
	state.TypeLeaseExtended,
	state.TypeLeaseExpired,
	state.TypeExecutionStarted,
	state.TypeTaskCommitted,
	state.TypeTaskCompleted,
	state.TypeTaskFailed,
	state.TypeTaskCancelled,
	state.TypeTaskDead,
	state.TypeFence,
	state.TypeTasksPurged,
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, want := range examples() {
		t.Run(want.Type().String(), func(t *testing.T) {
			t.Parallel()
			typ, payload, err := Encode(nil, want)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if typ != want.Type() {
				t.Fatalf("Encode type = %v, want %v", typ, want.Type())
			}
			got, err := Decode(typ, payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

func TestRoundTripZero(t *testing.T) {
	t.Parallel()
	for _, ex := range examples() {
		zero := reflect.New(reflect.TypeOf(ex).Elem()).Interface().(state.Record)
		typ, payload, err := Encode(nil, zero)
		if err != nil {
			t.Fatalf("Encode(zero %v): %v", ex.Type(), err)
		}
		if len(payload) != 0 {
			t.Errorf("zero %v encodes to %d bytes, want 0", typ, len(payload))
		}
		got, err := Decode(typ, payload)
		if err != nil {
			t.Fatalf("Decode(zero %v): %v", typ, err)
		}
		if !reflect.DeepEqual(got, zero) {
			t.Errorf("zero %v: got %#v", typ, got)
		}
	}
}

// TestExamplesSetEveryField makes the round trip meaningful: a field added to
// a state record must be set in examples, and then it only survives the
// round trip once the proto message and both mapping functions carry it.
func TestExamplesSetEveryField(t *testing.T) {
	t.Parallel()
	for _, ex := range examples() {
		v := reflect.ValueOf(ex).Elem()
		for _, path := range zeroFields(v, v.Type().Name()) {
			t.Errorf("examples: %s is not set", path)
		}
	}
}

func zeroFields(v reflect.Value, path string) []string {
	if v.Kind() == reflect.Struct {
		var zero []string
		for i := range v.NumField() {
			zero = append(zero, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return zero
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// TestEncodeSetsEveryProtoField catches the other direction: a proto field
// that no mapping writes.
func TestEncodeSetsEveryProtoField(t *testing.T) {
	t.Parallel()
	for _, ex := range examples() {
		m := newMessage(t, ex.Type())
		_, payload, err := Encode(nil, ex)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(payload, m); err != nil {
			t.Fatal(err)
		}
		for _, path := range unsetProtoFields(m.ProtoReflect()) {
			t.Errorf("%v: proto field %s is never written", ex.Type(), path)
		}
	}
}

func unsetProtoFields(m protoreflect.Message) []string {
	var unset []string
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case !m.Has(fd):
			unset = append(unset, string(fd.FullName()))
		case fd.Kind() == protoreflect.MessageKind:
			unset = append(unset, unsetProtoFields(m.Get(fd).Message())...)
		}
	}
	return unset
}

// newMessage returns the empty proto message of record type typ.
func newMessage(t *testing.T, typ state.RecordType) proto.Message {
	t.Helper()
	for _, m := range []proto.Message{
		state.TypeTaskCreated:      &recordpb.TaskCreated{},
		state.TypeLeaseGranted:     &recordpb.LeaseGranted{},
		state.TypeLeaseExtended:    &recordpb.LeaseExtended{},
		state.TypeLeaseExpired:     &recordpb.LeaseExpired{},
		state.TypeExecutionStarted: &recordpb.ExecutionStarted{},
		state.TypeTaskCommitted:    &recordpb.TaskCommitted{},
		state.TypeTaskCompleted:    &recordpb.TaskCompleted{},
		state.TypeTaskFailed:       &recordpb.TaskFailed{},
		state.TypeTaskCancelled:    &recordpb.TaskCancelled{},
		state.TypeTaskDead:         &recordpb.TaskDead{},
		state.TypeFence:            &recordpb.Fence{},
		state.TypeTasksPurged:      &recordpb.TasksPurged{},
	}[typ:] {
		return m
	}
	t.Fatalf("no message for %v", typ)
	return nil
}

// TestEveryStateTypeHasCodec fails when state defines a record type that
// this package cannot encode or decode, or that the tests do not cover.
func TestEveryStateTypeHasCodec(t *testing.T) {
	t.Parallel()
	covered := map[state.RecordType]bool{}
	for _, ex := range examples() {
		covered[ex.Type()] = true
	}
	known := map[state.RecordType]bool{}
	for _, typ := range knownTypes {
		known[typ] = true
	}
	for i := 1; i <= math.MaxUint16; i++ {
		typ := state.RecordType(i)
		// state names exactly the types it defines.
		defined := !strings.HasPrefix(typ.String(), "RecordType(")
		_, err := Decode(typ, nil)
		decodable := !errors.Is(err, ErrUnknownType)
		switch {
		case defined && !known[typ]:
			t.Errorf("state defines record type %d (%v): add it to knownTypes, examples, the proto and the codec", i, typ)
		case !defined && known[typ]:
			t.Errorf("record type %d is in knownTypes but state does not define it", i)
		case defined != decodable:
			t.Errorf("record type %d (%v): defined by state = %v, decodable = %v", i, typ, defined, decodable)
		case defined && !covered[typ]:
			t.Errorf("record type %d (%v) has no example", i, typ)
		}
	}
	if len(covered) != len(knownTypes) {
		t.Errorf("examples cover %d types, knownTypes has %d", len(covered), len(knownTypes))
	}
}

func TestDecodeUnknownType(t *testing.T) {
	t.Parallel()
	for _, typ := range []state.RecordType{0, 13, 42, math.MaxUint16} {
		rec, err := Decode(typ, []byte{})
		if rec != nil || !errors.Is(err, ErrUnknownType) {
			t.Fatalf("Decode(%d) = %v, %v; want ErrUnknownType", typ, rec, err)
		}
	}
	_, err := Decode(42, nil)
	if want := "record: unknown record type 42"; err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	// Payloads for TaskCreated (field 1 task_id, 3 queue, 4 payload, 5
	// execution_window_nanos, 6 retry_policy, 7 request_id, 8 not_before,
	// 9 priority).
	for _, payload := range [][]byte{
		{0xff},                         // truncated tag
		{0x80, 0x80, 0x80, 0x80},       // truncated tag
		{0x00},                         // field number 0
		{0x0a, 0x05, 'a'},              // task_id longer than the payload
		{0x22, 0x80, 0x80, 0x04},       // payload length far past the end
		{0x0a, 0x02, 0xff, 0xfe},       // task_id is not UTF-8
		{0x3a, 0x01, 0xc0},             // request_id: truncated UTF-8
		{0x1a, 0x03, 0xed, 0xa0, 0x80}, // queue: UTF-16 surrogate
		{0x41, 0x01, 0x02},             // not_before: truncated sfixed64
		{0x48, 0xff},                   // priority: truncated varint
		{0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // varint overflow
		{0x32, 0x02, 0x08, 0x80}, // retry_policy: truncated varint inside
		{0x0b},                   // unterminated group
		{0x0c},                   // end of a group never started
	} {
		rec, err := Decode(state.TypeTaskCreated, payload)
		if rec != nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "TaskCreated") {
			t.Errorf("Decode(%x) = %v, %v; want ErrMalformed naming TaskCreated", payload, rec, err)
		}
	}
}

// TestDecodeDoesNotRetainPayload reuses the buffer after Decode, as the WAL
// reader does.
func TestDecodeDoesNotRetainPayload(t *testing.T) {
	t.Parallel()
	for _, want := range examples() {
		_, payload, err := Encode(nil, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(want.Type(), payload)
		if err != nil {
			t.Fatal(err)
		}
		for i := range payload {
			payload[i] = 0xAA
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%v changed with the buffer:\n got %#v\nwant %#v", want.Type(), got, want)
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	t.Parallel()
	prefix := []byte("frame-header")
	buf := append(make([]byte, 0, 256), prefix...)
	var want []byte
	for _, r := range examples() {
		var err error
		_, buf, err = Encode(buf, r)
		if err != nil {
			t.Fatal(err)
		}
		_, one, _ := Encode(nil, r)
		want = append(want, one...)
	}
	if !bytes.HasPrefix(buf, prefix) || !bytes.Equal(buf[len(prefix):], want) {
		t.Fatalf("Encode did not append: %x", buf)
	}
}

type foreignRecord struct{}

func (foreignRecord) Type() state.RecordType { return 42 }
func (foreignRecord) Task() string           { return "" }

func TestEncodeErrors(t *testing.T) {
	t.Parallel()
	buf := []byte("keep")
	for _, tc := range []struct {
		name string
		rec  state.Record
		want string
	}{
		{"nil", nil, "record: encode nil record"},
		{"nil pointer", (*state.TaskDead)(nil), "record: encode nil *state.TaskDead"},
		{"foreign type", foreignRecord{}, "record: unknown record type 42 (record.foreignRecord)"},
		{"invalid UTF-8", &state.TaskDead{TaskID: "\xff"}, "record: encode TaskDead: "},
	} {
		typ, out, err := Encode(buf, tc.rec)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want prefix %q", tc.name, err, tc.want)
		}
		if typ != 0 || string(out) != "keep" {
			t.Errorf("%s: returned %v, %q; want 0 and the buffer unchanged", tc.name, typ, out)
		}
	}
}

func TestFormatVersionIsNewest(t *testing.T) {
	t.Parallel()
	values := recordpb.FormatVersion(0).Descriptor().Values()
	newest := values.Get(values.Len() - 1).Number()
	if FormatVersion != uint32(newest) {
		t.Fatalf("FormatVersion = %d, newest in record.proto is %d", FormatVersion, newest)
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range examples() {
		_, payload, err := Encode(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(r.Type()), payload)
		// The same payload under every other type: field numbers overlap.
		for _, typ := range knownTypes {
			if typ != r.Type() {
				f.Add(uint16(typ), payload)
			}
		}
	}
	f.Add(uint16(0), []byte{})
	f.Add(uint16(42), []byte{0x0a, 0x01, 'x'})
	f.Add(uint16(state.TypeTaskCreated), []byte{0x32, 0x09, 0x21, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f}) // NaN multiplier

	f.Fuzz(func(t *testing.T, typ uint16, payload []byte) {
		rec, err := Decode(state.RecordType(typ), payload)
		if err != nil {
			if !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error wraps neither sentinel: %v", err)
			}
			return
		}
		if rec.Type() != state.RecordType(typ) {
			t.Fatalf("Decode(%d) returned a %v", typ, rec.Type())
		}
		typ2, enc, err := Encode(nil, rec)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", rec, err)
		}
		if typ2 != rec.Type() {
			t.Fatalf("re-encode type = %v, want %v", typ2, rec.Type())
		}
		rec2, err := Decode(typ2, enc)
		if err != nil {
			t.Fatalf("decode of re-encoding: %v", err)
		}
		if !sameRecord(rec, rec2) {
			t.Fatalf("second round trip differs:\n got %#v\nwant %#v", rec2, rec)
		}
		if _, enc2, _ := Encode(nil, rec2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%x\n%x", enc, enc2)
		}
	})
}

// sameRecord is reflect.DeepEqual, except that a NaN multiplier (which a
// corrupt but well-formed record may hold) equals a NaN with the same bits.
func sameRecord(a, b state.Record) bool {
	ta, okA := a.(*state.TaskCreated)
	tb, okB := b.(*state.TaskCreated)
	if okA && okB && math.IsNaN(ta.Retry.Multiplier) {
		if math.Float64bits(ta.Retry.Multiplier) != math.Float64bits(tb.Retry.Multiplier) {
			return false
		}
		ca, cb := *ta, *tb
		ca.Retry.Multiplier, cb.Retry.Multiplier = 0, 0
		return reflect.DeepEqual(&ca, &cb)
	}
	return reflect.DeepEqual(a, b)
}

func benchmarkRecord() *state.TaskCreated {
	r := examples()[0].(*state.TaskCreated)
	r.Payload = bytes.Repeat([]byte{'p'}, 256)
	return r
}

func BenchmarkEncode(b *testing.B) {
	r := benchmarkRecord()
	_, buf, _ := Encode(nil, r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if _, buf, err = Encode(buf[:0], r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	_, payload, err := Encode(nil, benchmarkRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(state.TypeTaskCreated, payload); err != nil {
			b.Fatal(err)
		}
	}
}
