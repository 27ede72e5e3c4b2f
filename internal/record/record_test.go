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
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// filledRecords returns one record of every registered type, every field
// set by fill, in registry order.
func filledRecords(t testing.TB) []state.Record {
	out := make([]state.Record, len(registry))
	for i, row := range registry {
		v := reflect.New(row.goType.Elem())
		fill(t, v)
		out[i] = v.Interface().(state.Record)
	}
	return out
}

// TestRoundTrip: every field of every record type survives Encode and
// Decode. A field that a conversion forgets (or swaps with another) comes
// back different, and the failure names it.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, want := range filledRecords(t) {
		name := TypeOf(want).String()
		typ, payload, err := Encode(nil, want)
		if err != nil {
			t.Errorf("encode %s: %v", name, err)
			continue
		}
		if typ != TypeOf(want) {
			t.Errorf("encode %s: type %v", name, typ)
		}
		got, err := Decode(typ, payload)
		if err != nil {
			t.Errorf("decode %s: %v", name, err)
			continue
		}
		if reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s decodes to a %T", name, got)
			continue
		}
		for _, d := range diffFields(reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem(), reflect.TypeOf(want).Elem().Name()) {
			t.Errorf("round trip of %s loses a field (is it in both conversions of its row in registry.go, and in record.proto?): %s", name, d)
		}
	}
}

func TestRoundTripZero(t *testing.T) {
	t.Parallel()
	for _, row := range registry {
		zero := reflect.New(row.goType.Elem()).Interface().(state.Record)
		typ, payload, err := Encode(nil, zero)
		if err != nil {
			t.Fatalf("Encode(zero %s): %v", row.name, err)
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

// TestEncodeSetsEveryProtoField catches the other direction: a proto field
// that no conversion writes.
func TestEncodeSetsEveryProtoField(t *testing.T) {
	t.Parallel()
	for _, r := range filledRecords(t) {
		row := rowOf(r)
		_, payload, err := Encode(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		m := row.newMsg()
		if err := proto.Unmarshal(payload, m); err != nil {
			t.Fatal(err)
		}
		for _, path := range unsetProtoFields(m.ProtoReflect()) {
			t.Errorf("%s: proto field %s is never written: set it in the toPB conversion of the row in registry.go", row.name, path)
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
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			for j := range m.Get(fd).List().Len() {
				unset = append(unset, unsetProtoFields(m.Get(fd).List().Get(j).Message())...)
			}
		case fd.Kind() == protoreflect.MessageKind:
			unset = append(unset, unsetProtoFields(m.Get(fd).Message())...)
		}
	}
	return unset
}

func TestDecodeUnknownType(t *testing.T) {
	t.Parallel()
	for _, typ := range []Type{0, Type(len(byType)), math.MaxUint16} {
		rec, err := Decode(typ, []byte{})
		if rec != nil || !errors.Is(err, ErrUnknownType) {
			t.Fatalf("Decode(%d) = %v, %v; want ErrUnknownType", typ, rec, err)
		}
	}
	_, err := Decode(math.MaxUint16, nil)
	if want := "record: unknown record type 65535"; err == nil || err.Error() != want {
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
		rec, err := Decode(TypeTaskCreated, payload)
		if rec != nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "TaskCreated") {
			t.Errorf("Decode(%x) = %v, %v; want ErrMalformed naming TaskCreated", payload, rec, err)
		}
	}
}

// TestDecodeDoesNotRetainPayload reuses the buffer after Decode, as the WAL
// reader does.
func TestDecodeDoesNotRetainPayload(t *testing.T) {
	t.Parallel()
	for _, r := range filledRecords(t) {
		typ, payload, err := Encode(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Decode(typ, bytes.Clone(payload))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		for i := range payload {
			payload[i] = 0xAA
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%v changed with the buffer:\n got %#v\nwant %#v", typ, got, want)
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	t.Parallel()
	prefix := []byte("frame-header")
	buf := append(make([]byte, 0, 256), prefix...)
	var want []byte
	for _, r := range filledRecords(t) {
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

// TestEncoderEncodesAsEncode: an Encoder, which reuses one message per
// type, encodes each record of long generated histories, and the filled
// and zero records of every type in turn, to the bytes Encode gives; a
// field left over from the record before would show. Its errors are
// Encode's.
func TestEncoderEncodesAsEncode(t *testing.T) {
	t.Parallel()
	var e Encoder
	check := func(r state.Record) {
		t.Helper()
		typ, got, err := e.Encode([]byte("x"), r)
		wantTyp, want, wantErr := Encode([]byte("x"), r)
		if typ != wantTyp || !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Fatalf("Encoder on %T: %v %x %v; Encode: %v %x %v", r, typ, got, err, wantTyp, want, wantErr)
		}
	}
	for seed := range uint64(20) {
		for _, r := range statetest.New(seed).Run(state.New(), 300, t.Fatalf) {
			check(r)
		}
	}
	for _, r := range filledRecords(t) {
		check(r)
		check(reflect.New(reflect.TypeOf(r).Elem()).Interface().(state.Record))
		check(r)
	}
	check(nil)
	check((*state.TaskCreated)(nil))
	check(foreignRecord{})
}

// foreignRecord is a state.Record (through the embedded interface) with no
// row in the registry.
type foreignRecord struct{ state.Record }

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
		{"foreign type", foreignRecord{}, "record: unknown record type: record.foreignRecord has no row in the registry"},
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
	if _, err := Message(foreignRecord{}); !errors.Is(err, ErrUnknownType) {
		t.Errorf("Message(foreign) = %v, want ErrUnknownType", err)
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
	for _, r := range filledRecords(f) {
		typ, payload, err := Encode(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		// The payload under every type: field numbers overlap.
		for _, row := range registry {
			f.Add(uint16(row.typ), payload)
		}
		f.Add(uint16(typ), []byte{})
	}
	f.Add(uint16(0), []byte{})
	f.Add(uint16(len(byType)), []byte{0x0a, 0x01, 'x'})
	f.Add(uint16(TypeTaskCreated), []byte{0x32, 0x09, 0x21, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f}) // NaN multiplier

	f.Fuzz(func(t *testing.T, typ uint16, payload []byte) {
		rec, err := Decode(Type(typ), payload)
		if err != nil {
			if !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error wraps neither sentinel: %v", err)
			}
			return
		}
		if TypeOf(rec) != Type(typ) {
			t.Fatalf("Decode(%d) returned a %T", typ, rec)
		}
		typ2, enc, err := Encode(nil, rec)
		if err != nil {
			t.Fatalf("re-encode %#v: %v", rec, err)
		}
		if typ2 != Type(typ) {
			t.Fatalf("re-encode type = %v, want %v", typ2, Type(typ))
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
	t0 := state.TimeOf(time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC))
	return &state.TaskCreated{
		TaskID:          "task-1",
		Namespace:       "billing",
		Queue:           "invoices",
		Payload:         bytes.Repeat([]byte{'p'}, 256),
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
	}
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
		if _, err := Decode(TypeTaskCreated, payload); err != nil {
			b.Fatal(err)
		}
	}
}
