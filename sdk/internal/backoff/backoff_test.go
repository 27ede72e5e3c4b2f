package backoff

import (
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	const ms = time.Millisecond
	p := Policy{Initial: 100 * ms, Max: 5 * time.Second}
	lowest := func(int64) int64 { return 0 }
	highest := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		name    string
		p       Policy
		attempt int
		rnd     Rand
		want    time.Duration
	}{
		{"first retry, least jitter", p, 0, lowest, 50 * ms},
		{"first retry, most jitter", p, 0, highest, 100 * ms},
		{"doubles per retry", p, 1, lowest, 100 * ms},
		{"doubles again", p, 2, highest, 400 * ms},
		{"capped", p, 6, highest, 5 * time.Second}, // 100ms·64 = 6.4s > 5s
		{"capped, least jitter", p, 6, lowest, 2500 * ms},
		{"just below the cap", p, 5, highest, 3200 * ms},
		{"huge attempt does not overflow", p, 1000, highest, 5 * time.Second},
		{"shift past the width of a duration", p, 64, lowest, 2500 * ms},
		{"negative attempt counts as the first", p, -3, highest, 100 * ms},
		{"max below initial waits max", Policy{Initial: time.Second, Max: 10 * ms}, 0, highest, 10 * ms},
		{"zero policy waits nothing", Policy{}, 4, highest, 0},
		{"odd nanoseconds keep the whole range", Policy{Initial: 3, Max: 3}, 0, highest, 3},
		{"odd nanoseconds, least jitter", Policy{Initial: 3, Max: 3}, 0, lowest, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Wait(tc.attempt, tc.rnd); got != tc.want {
				t.Errorf("%+v.Wait(%d) = %v, want %v", tc.p, tc.attempt, got, tc.want)
			}
		})
	}
}

// TestWaitAsksForTheJitterRange: the random source is asked for a value
// below half the exponential wait plus one, so the wait can reach the
// whole exponential wait and no more.
func TestWaitAsksForTheJitterRange(t *testing.T) {
	var asked []int64
	rnd := func(n int64) int64 { asked = append(asked, n); return 0 }
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt := range 5 {
		p.Wait(attempt, rnd)
	}
	want := []int64{50e6 + 1, 100e6 + 1, 200e6 + 1, 400e6 + 1, 500e6 + 1}
	if len(asked) != len(want) {
		t.Fatalf("random source asked %d times, want %d", len(asked), len(want))
	}
	for i := range want {
		if asked[i] != want[i] {
			t.Errorf("attempt %d: random source asked for [0, %d), want [0, %d)", i, asked[i], want[i])
		}
	}
}
