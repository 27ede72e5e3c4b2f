package pbwire_test

import (
	"bytes"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/pbwire"
	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
)

// TestRetryPolicyMatchesProto: RetryPolicy writes, as field 6 of a
// TaskCreated, what proto.Marshal writes for the message with that policy
// (and nothing for the zero policy, which record.proto leaves unset), at
// the edges of each field; which also covers Varint and Double.
func TestRetryPolicyMatchesProto(t *testing.T) {
	t.Parallel()
	for _, p := range []state.RetryPolicy{
		{},
		{MaxAttempts: 1},
		{MaxAttempts: math.MaxUint32, InitialBackoff: -1, MaxBackoff: math.MaxInt64, Multiplier: 2},
		{InitialBackoff: time.Duration(math.MinInt64), Multiplier: math.Copysign(0, -1), MaxBackoff: 1},
		{Multiplier: math.NaN()},
		{Multiplier: math.Inf(-1)},
	} {
		m := &recordpb.TaskCreated{}
		if p != (state.RetryPolicy{}) {
			m.RetryPolicy = &recordpb.RetryPolicy{MaxAttempts: p.MaxAttempts, InitialBackoffNanos: int64(p.InitialBackoff), MaxBackoffNanos: int64(p.MaxBackoff), Multiplier: p.Multiplier}
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := pbwire.RetryPolicy([]byte{}, 6, p); !bytes.Equal(got, want) {
			t.Errorf("%+v: got %x, want %x", p, got, want)
		}
	}
}

// TestZeroValuesAreLeftOut: each appender writes nothing for its zero
// value, as proto3 does, and a field for any other.
func TestZeroValuesAreLeftOut(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ zero, other []byte }{
		"String": {pbwire.String(nil, 1, ""), pbwire.String(nil, 1, "x")},
		"Bytes":  {pbwire.Bytes(nil, 1, []byte{}), pbwire.Bytes(nil, 1, []byte{0})},
		"Varint": {pbwire.Varint(nil, 1, 0), pbwire.Varint(nil, 1, 1)},
		"Fixed":  {pbwire.Fixed(nil, 1, 0), pbwire.Fixed(nil, 1, -1)},
		"Double": {pbwire.Double(nil, 1, 0), pbwire.Double(nil, 1, math.Copysign(0, -1))},
	} {
		if len(tc.zero) != 0 || len(tc.other) == 0 {
			t.Errorf("%s: zero value wrote %x, another %x", name, tc.zero, tc.other)
		}
	}
	if pbwire.ValidStrings("a", "é", "") != true || pbwire.ValidStrings("a", "\xff") != false {
		t.Error("ValidStrings")
	}
}
