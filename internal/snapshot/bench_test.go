package snapshot

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

var benchTasks = flag.Int("decode-tasks", 1_000_000, "tasks in the state BenchmarkDecode1M encodes and decodes")

// soakState builds a state of n tasks shaped like the retention soak's (see
// soak_test.go): 26-character ids, a request id, a 50-byte payload, one
// lease each, and a 4-byte result. Most tasks are completed, as in the
// soak; one in 16 is waiting and one in 16 is leased, so that the queue and
// lease indexes are rebuilt too.
func soakState(tb testing.TB, n int) *state.State {
	tb.Helper()
	s := state.New()
	payload := []byte(`{"to":"someone@example.com","template":"welcome"}`)
	retry := state.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: 10 * time.Minute, Multiplier: 2}
	at := state.Time(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	lsn := uint64(0)
	apply := func(r state.Record) {
		lsn++
		if err := s.Apply(lsn, r); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range n {
		at += state.Time(10 * time.Millisecond)
		id := fmt.Sprintf("01kd%022d", i)
		apply(&state.TaskCreated{
			TaskID: id, Namespace: "default", Queue: "emails", Payload: payload,
			ExecutionWindow: 30 * time.Second, Retry: retry,
			RequestID: fmt.Sprint("req-", i), CreatedAt: at,
		})
		if i%16 == 0 {
			continue // waiting
		}
		lease := fmt.Sprintf("01ke%022d", i)
		apply(&state.LeaseGranted{TaskID: id, LeaseID: lease, WorkerID: "w", Attempt: 1, LeaseExpiry: at + state.Time(30*time.Second), GrantedAt: at})
		if i%16 == 1 {
			continue // leased
		}
		apply(&state.TaskCompleted{TaskID: id, LeaseID: lease, Result: []byte("sent"), At: at})
	}
	return s
}

// BenchmarkDecode1M times Decode of a snapshot of -decode-tasks tasks
// (1,000,000 by default), the snapshot load of a restart. Profile it with
//
//	go test -run '^$' -bench Decode1M -benchtime 5x -cpuprofile cpu.out ./internal/snapshot
func BenchmarkDecode1M(b *testing.B) {
	s := soakState(b, *benchTasks)
	var buf bytes.Buffer
	if _, err := Encode(&buf, s.Image()); err != nil {
		b.Fatal(err)
	}
	s = nil
	enc := buf.Bytes()
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, sum, err := Decode(bytes.NewReader(enc), int64(len(enc)))
		if err != nil {
			b.Fatal(err)
		}
		if sum.Tasks != *benchTasks || st.Len() != *benchTasks {
			b.Fatalf("decoded %d tasks (%d in the state), want %d", sum.Tasks, st.Len(), *benchTasks)
		}
	}
}

// BenchmarkImage1M times State.Image, the copy a snapshot makes while it
// holds every request back.
func BenchmarkImage1M(b *testing.B) {
	s := soakState(b, *benchTasks)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if img := s.Image(); len(img.Tasks) != *benchTasks {
			b.Fatal(len(img.Tasks))
		}
	}
}

// BenchmarkEncode1M times Encode of an Image of -decode-tasks tasks, the
// CPU a snapshot spends outside the state's lock.
func BenchmarkEncode1M(b *testing.B) {
	img := soakState(b, *benchTasks).Image()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sum, err := Encode(io.Discard, img)
		if err != nil {
			b.Fatal(err)
		}
		if sum.Tasks != *benchTasks {
			b.Fatalf("encoded %d tasks, want %d", sum.Tasks, *benchTasks)
		}
	}
}
