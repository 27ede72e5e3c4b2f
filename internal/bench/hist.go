package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// A histogram counts durations in logarithmic buckets, for runs too long
// to keep every duration (the open loop's): recording is lock-free and
// allocation-free, and its memory does not grow with the run.
//
// Durations under histSub nanoseconds have a bucket each; above, every
// power of two is split into histSub buckets, so a bucket's width is at
// most 1/histSub (1.6%) of its values. A percentile is reported as the
// upper end of the bucket holding the nearest-rank value (never below the
// true value, at most 1.6% above it), clamped to the largest duration
// recorded, which is kept exactly, as are the count and the sum.
type histogram struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	sum    atomic.Int64 // nanoseconds
	max    atomic.Int64 // nanoseconds
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	// histMaxShift bounds the buckets at 2^(histMaxShift+histSubBits+1)
	// ns, about 73 minutes; longer durations count in the last bucket (and
	// exactly in max).
	histMaxShift = 35
	histBuckets  = histSub + (histMaxShift+1)*histSub
)

// histBucket is the bucket of d nanoseconds (negative counts as 0).
func histBucket(d int64) int {
	if d < histSub {
		return int(max(d, 0))
	}
	shift := bits.Len64(uint64(d)) - histSubBits - 1
	if shift > histMaxShift {
		return histBuckets - 1
	}
	return histSub + shift*histSub + int(d>>shift) - histSub
}

// histUpper is the largest duration, in nanoseconds, of bucket b.
func histUpper(b int) int64 {
	if b < histSub {
		return int64(b)
	}
	shift := (b - histSub) / histSub
	m := int64(b-histSub)%histSub + histSub
	return (m+1)<<shift - 1
}

// add records d.
func (h *histogram) add(d time.Duration) {
	v := int64(max(d, 0))
	h.counts[histBucket(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// merge adds o's counts to h. Call it once o's recording is done.
func (h *histogram) merge(o *histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	h.sum.Add(o.sum.Load())
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// summary returns the percentiles of what was recorded, in the units of
// Latency; call it once the recording is done.
func (h *histogram) summary() Latency {
	n := h.n.Load()
	if n == 0 {
		return Latency{}
	}
	mx := h.max.Load()
	pct := func(p float64) float64 {
		rank := max(int64(math.Ceil(p/100*float64(n))), 1)
		var seen int64
		for b := range h.counts {
			if seen += h.counts[b].Load(); seen >= rank {
				return ms(time.Duration(min(histUpper(b), mx)))
			}
		}
		return ms(time.Duration(mx))
	}
	return Latency{
		Count: int(n),
		P50:   pct(50),
		P90:   pct(90),
		P99:   pct(99),
		Max:   ms(time.Duration(mx)),
		Mean:  ms(time.Duration(h.sum.Load() / n)),
	}
}
