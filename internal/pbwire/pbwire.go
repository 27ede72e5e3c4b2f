package pbwire

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tenurehq/tenure/internal/state"
)

// String appends a string field, unless it is empty.
func String(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// Bytes appends a bytes field (or an encoded message), unless it is empty.
func Bytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// Varint appends a varint field (uint32, uint64, int64 as uint64(v),
// sint32 as EncodeZigZag(v), bool as 1), unless it is zero.
func Varint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// Fixed appends a fixed64 or sfixed64 field, unless it is zero.
func Fixed(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, uint64(v))
}

// Double appends a double field, unless it is +0 (proto3 writes -0).
func Double(b []byte, num protowire.Number, v float64) []byte {
	if v == 0 && !math.Signbit(v) {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// RetryPolicy appends p as field num, a RetryPolicy message of
// record.proto or snapshot.proto (the two have the same fields), unless p
// is the zero policy, which both formats leave out.
func RetryPolicy(b []byte, num protowire.Number, p state.RetryPolicy) []byte {
	if p == (state.RetryPolicy{}) {
		return b
	}
	var buf [40]byte
	m := Varint(buf[:0], 1, uint64(p.MaxAttempts))
	m = Varint(m, 2, uint64(p.InitialBackoff))
	m = Varint(m, 3, uint64(p.MaxBackoff))
	m = Double(m, 4, p.Multiplier)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// ValidStrings reports whether every string is valid UTF-8, as proto3
// requires of a string field.
func ValidStrings(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
