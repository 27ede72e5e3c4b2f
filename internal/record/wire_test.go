package record

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// TestWireMatchesProto: for the types appendWire writes itself, its bytes,
// and the Encoder's, are proto.Marshal's (through Encode) for records at
// the edges of every field (zero, negative, extreme, -0 and NaN
// multipliers, empty and nil bytes) and for many random ones; and
// appendWire does take each of them.
func TestWireMatchesProto(t *testing.T) {
	t.Parallel()
	var e Encoder
	check := func(r state.Record) {
		t.Helper()
		wire, ok := appendWire(nil, r)
		if !ok {
			t.Fatalf("appendWire did not take %#v", r)
		}
		wantTyp, want, wantErr := Encode(nil, r)
		if wantErr != nil || !bytes.Equal(wire, want) {
			t.Fatalf("%#v:\nappendWire %x\nproto      %x %v", r, wire, want, wantErr)
		}
		if typ, got, err := e.Encode(nil, r); err != nil || typ != wantTyp || !bytes.Equal(got, want) {
			t.Fatalf("%#v: Encoder gave %v %x %v, Encode %v %x", r, typ, got, err, wantTyp, want)
		}
	}
	edges := []state.Time{0, 1, -1, math.MaxInt64, math.MinInt64}
	multipliers := []float64{0, math.Copysign(0, -1), 1, 1.5, -2, math.Inf(1), math.NaN()}
	for i, at := range edges {
		check(&state.LeaseGranted{TaskID: "t", Attempt: uint32(i) * math.MaxUint32 / 4, LeaseExpiry: at, GrantedAt: -at})
		check(&state.TaskCompleted{LeaseID: "l", Result: []byte{}, At: at})
		check(&state.TaskCompleted{TaskID: "é", Result: []byte{0}, At: -at, By: "ü"})
		for _, m := range multipliers {
			check(&state.TaskCreated{
				TaskID:          "t",
				Payload:         []byte{},
				ExecutionWindow: time.Duration(-at),
				Retry:           state.RetryPolicy{MaxAttempts: uint32(i), InitialBackoff: time.Duration(at), MaxBackoff: -1, Multiplier: m},
				NotBefore:       at,
				Priority:        []int32{0, 1, -1, math.MaxInt32, math.MinInt32}[i],
				CreatedAt:       -at,
				Deadline:        at,
			})
		}
	}
	check(&state.TaskCreated{}) // every field zero
	check(&state.TaskCreated{Retry: state.RetryPolicy{Multiplier: math.Copysign(0, -1)}})
	check(&state.LeaseGranted{})
	check(&state.TaskCompleted{})

	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		return strings.Repeat("aé", rng.IntN(40))
	}
	bs := func() []byte {
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tm := func() state.Time { return state.Time(rng.Int64() - rng.Int64()) }
	for range 2000 {
		check(&state.TaskCreated{
			TaskID: str(), Namespace: str(), Queue: str(), Payload: bs(),
			ExecutionWindow: time.Duration(tm()),
			Retry:           state.RetryPolicy{MaxAttempts: rng.Uint32(), InitialBackoff: time.Duration(tm()), MaxBackoff: time.Duration(tm()), Multiplier: rng.NormFloat64()},
			RequestID:       str(), NotBefore: tm(), Priority: int32(rng.Uint32()), CreatedAt: tm(), By: str(), Deadline: tm(),
		})
		check(&state.LeaseGranted{TaskID: str(), LeaseID: str(), WorkerID: str(), Attempt: rng.Uint32(), LeaseExpiry: tm(), GrantedAt: tm(), By: str()})
		check(&state.TaskCompleted{TaskID: str(), LeaseID: str(), Result: bs(), At: tm(), By: str()})
	}
}

// TestWireLeavesInvalidUTF8ToProto: a record of a type appendWire writes,
// with a string that is not valid UTF-8 in any of its string fields, is
// not written by appendWire, and the Encoder refuses it as Encode does,
// with nothing appended.
func TestWireLeavesInvalidUTF8ToProto(t *testing.T) {
	t.Parallel()
	const bad = "ok\xff"
	recs := []state.Record{
		&state.TaskCreated{TaskID: bad}, &state.TaskCreated{Namespace: bad}, &state.TaskCreated{Queue: bad},
		&state.TaskCreated{RequestID: bad}, &state.TaskCreated{By: bad},
		&state.LeaseGranted{TaskID: bad}, &state.LeaseGranted{LeaseID: bad}, &state.LeaseGranted{WorkerID: bad}, &state.LeaseGranted{By: bad},
		&state.TaskCompleted{TaskID: bad}, &state.TaskCompleted{LeaseID: bad}, &state.TaskCompleted{By: bad},
		(*state.TaskCreated)(nil), (*state.LeaseGranted)(nil), (*state.TaskCompleted)(nil),
	}
	var e Encoder
	for _, r := range recs {
		if out, ok := appendWire([]byte("keep"), r); ok || string(out) != "keep" {
			t.Errorf("appendWire(%#v) = %q, %v; want it left to proto", r, out, ok)
		}
		typ, out, err := e.Encode([]byte("keep"), r)
		if err == nil || typ != 0 || string(out) != "keep" {
			t.Errorf("Encoder.Encode(%#v) = %v, %q, %v; want an error and the buffer unchanged", r, typ, out, err)
		}
	}
}

// BenchmarkEncoder encodes the three records of one task's life (as the
// bench's tasks have them) with an Encoder: the WAL's cost per task.
func BenchmarkEncoder(b *testing.B) {
	recs := []state.Record{
		benchmarkRecord(),
		&state.LeaseGranted{TaskID: "01kb4m2n5p6q7r8s9t0v1w2x3y", LeaseID: "01kb4m2n5p6q7r8s9t0v1w2x3z", WorkerID: "bench-worker-3", Attempt: 1, LeaseExpiry: 2e18, GrantedAt: 2e18 - 5},
		&state.TaskCompleted{TaskID: "01kb4m2n5p6q7r8s9t0v1w2x3y", LeaseID: "01kb4m2n5p6q7r8s9t0v1w2x3z", At: 2e18 + 1},
	}
	var e Encoder
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, r := range recs {
			var err error
			if _, buf, err = e.Encode(buf, r); err != nil {
				b.Fatal(err)
			}
		}
	}
}
