package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogramBuckets checks that every duration falls in a bucket whose
// range holds it and is at most 1/64 of its values wide.
func TestHistogramBuckets(t *testing.T) {
	check := func(v int64) {
		b := histBucket(v)
		lo := int64(0)
		if b > 0 {
			lo = histUpper(b-1) + 1
		}
		if v < lo || v > histUpper(b) {
			t.Fatalf("%dns in bucket %d of %d..%d", v, b, lo, histUpper(b))
		}
		if w := histUpper(b) - lo; float64(w) > float64(lo)/histSub {
			t.Fatalf("bucket %d (%d..%d) is wider than 1/%d of its values", b, lo, histUpper(b), histSub)
		}
	}
	for v := range int64(5000) {
		check(v)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(rng.Int64N(int64(time.Hour)))
	}
	// Past the last bucket everything counts in it.
	if b := histBucket(int64(100 * time.Hour)); b != histBuckets-1 {
		t.Errorf("100h in bucket %d, want the last, %d", b, histBuckets-1)
	}
	if histBucket(-5) != 0 {
		t.Errorf("a negative duration is not in the first bucket")
	}
}

// TestHistogramPercentiles compares the histogram's percentiles with the
// exact ones of the same durations.
func TestHistogramPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h histogram
	ds := make([]time.Duration, 50_000)
	for i := range ds {
		ds[i] = time.Duration(rng.ExpFloat64() * float64(3*time.Millisecond))
		h.add(ds[i])
	}
	exact, got := summarize(slices.Clone(ds)), h.summary()
	if got.Count != exact.Count || got.Max != exact.Max || got.Mean != exact.Mean {
		t.Errorf("count, max, mean %d %v %v; want %d %v %v", got.Count, got.Max, got.Mean, exact.Count, exact.Max, exact.Mean)
	}
	for _, p := range [][2]float64{{got.P50, exact.P50}, {got.P90, exact.P90}, {got.P99, exact.P99}} {
		if !near(p[0], p[1]) {
			t.Errorf("percentile %v, exact %v: more than 1/%d off", p[0], p[1], histSub)
		}
	}
	// Small durations are exact.
	var small histogram
	for _, d := range []time.Duration{3, 1, 2, 40} {
		small.add(d * time.Nanosecond)
	}
	if s := small.summary(); s.Count != 4 || s.Max != 0 {
		t.Errorf("small: %+v", s)
	}
	if (&histogram{}).summary() != (Latency{}) {
		t.Errorf("an empty histogram has figures")
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		all.add(d)
		if i%3 == 0 {
			a.add(d)
		} else {
			b.add(d)
		}
	}
	var m histogram
	m.merge(&a)
	m.merge(&b)
	if m.summary() != all.summary() {
		t.Errorf("merged %+v, want %+v", m.summary(), all.summary())
	}
}
