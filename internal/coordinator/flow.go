package coordinator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/internal/state"
)

// Flow control of a queue (docs/design/state-machine.md, "Flow control"): what a
// caller asks (LimitChange) is resolved against the queue's current
// limits into queue-wide limits, split over the queue's partitions
// (SplitLimits), and recorded in each partition as its share (SetLimits,
// one QueueLimited record).

// LimitChange is a change to a queue's flow control as a caller asks it:
// each limit set (non-nil), cleared, or, with neither, kept as it is.
type LimitChange struct {
	// MaxConcurrency is the most leases of the queue live at once.
	MaxConcurrency *uint32
	// Rate is the leases per second of the token bucket, Burst its size.
	Rate  *float64
	Burst *uint32
	// ClearMaxConcurrency removes the max concurrency; ClearRate the rate
	// and its burst.
	ClearMaxConcurrency bool
	ClearRate           bool

	// The limits of the queue's keys (docs/design/keys.md), whole in
	// every partition: KeyMaxConcurrency, KeyRate and KeyBurst as the
	// queue's, per key; KeyOrdered and Fair set or unset (nil: kept).
	KeyMaxConcurrency      *uint32
	KeyRate                *float64
	KeyBurst               *uint32
	ClearKeyMaxConcurrency bool
	ClearKeyRate           bool
	KeyOrdered             *bool
	Fair                   *bool
	// KeyWeights sets the fair weight of each key it names (1 removes
	// a key's weight); ClearKeyWeights removes every weight first.
	KeyWeights      []state.KeyWeight
	ClearKeyWeights bool
}

// keysGiven reports whether the change names a limit of the keys.
func (ch LimitChange) keysGiven() bool {
	return ch.KeyMaxConcurrency != nil || ch.KeyRate != nil || ch.KeyBurst != nil || ch.ClearKeyMaxConcurrency ||
		ch.ClearKeyRate || ch.KeyOrdered != nil || ch.Fair != nil || len(ch.KeyWeights) > 0 || ch.ClearKeyWeights
}

// ResolveWeights returns the fair weights of the queue's keys that the
// change makes of current (ordered by key, none of weight 1), or a
// *FieldError naming key_weights.
func (ch LimitChange) ResolveWeights(current []state.KeyWeight) ([]state.KeyWeight, error) {
	ws := map[string]uint32{}
	if !ch.ClearKeyWeights {
		for _, w := range current {
			ws[w.Key] = w.Weight
		}
	}
	seen := map[string]bool{}
	for i, w := range ch.KeyWeights {
		field := fmt.Sprintf("key_weights[%d]", i)
		if err := checkKey(field+".key", w.Key); err != nil {
			return current, err
		}
		switch {
		case w.Key == "":
			return current, fieldErr(field+".key", "required: the key the weight is for")
		case seen[w.Key]:
			return current, fieldErr(field+".key", "%q is given twice", w.Key)
		case w.Weight < 1 || w.Weight > state.MaxKeyWeight:
			return current, fieldErr(field+".weight", "%d is outside 1..%d (1, the default, removes the key's weight)", w.Weight, state.MaxKeyWeight)
		}
		seen[w.Key] = true
		if w.Weight == 1 {
			delete(ws, w.Key)
		} else {
			ws[w.Key] = w.Weight
		}
	}
	if len(ws) > state.MaxKeyWeights {
		return current, fieldErr("key_weights", "%d keys would have a weight, over the limit of %d per queue", len(ws), state.MaxKeyWeights)
	}
	out := make([]state.KeyWeight, 0, len(ws))
	for k, w := range ws {
		out = append(out, state.KeyWeight{Key: k, Weight: w})
	}
	slices.SortFunc(out, func(a, b state.KeyWeight) int { return strings.Compare(a.Key, b.Key) })
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// DefaultBurst is the burst of a rate set on a queue without one and
// without a burst: the leases of one second (the rate rounded up), at
// least one per partition.
func DefaultBurst(rateMilli uint64, partitions int) uint32 {
	b := max(uint64(partitions), (rateMilli+999)/1000)
	return uint32(min(b, state.MaxBurst))
}

// RatePerSecond converts a rate in milli-leases per second.
func RatePerSecond(rateMilli uint64) float64 { return float64(rateMilli) / 1000 }

// Resolve returns the queue-wide limits that the change makes of current
// on a queue of partitions partitions, or a *FieldError naming the field
// at fault. A burst not given keeps the queue's burst if it has a rate,
// and is DefaultBurst otherwise.
func (ch LimitChange) Resolve(current state.Limits, partitions int) (state.Limits, error) {
	switch {
	case ch.MaxConcurrency == nil && ch.Rate == nil && ch.Burst == nil && !ch.ClearMaxConcurrency && !ch.ClearRate && !ch.keysGiven():
		return current, fieldErr("max_concurrency", "no limit given: set or clear max_concurrency, rate or burst, or a limit of the keys (key_max_concurrency, key_rate, key_burst, key_ordered, fair)")
	case ch.MaxConcurrency != nil && ch.ClearMaxConcurrency:
		return current, fieldErr("clear_max_concurrency", "max_concurrency is both set and cleared: give one of them")
	case ch.Rate != nil && ch.ClearRate:
		return current, fieldErr("clear_rate", "rate is both set and cleared: give one of them")
	case ch.Burst != nil && ch.ClearRate:
		return current, fieldErr("burst", "a burst is given with clear_rate, which removes the rate and its burst: give one of them")
	}
	l := current
	switch {
	case ch.ClearMaxConcurrency:
		l.MaxConcurrency = 0
	case ch.MaxConcurrency != nil:
		if *ch.MaxConcurrency == 0 {
			return current, fieldErr("max_concurrency", "0 would lease nothing: to remove the limit clear it (clear_max_concurrency; CLI: --max-concurrency none), to stop leasing pause the queue")
		}
		l.MaxConcurrency = *ch.MaxConcurrency
	}
	switch {
	case ch.ClearRate:
		l.RateMilli, l.Burst = 0, 0
	case ch.Rate != nil:
		milli, err := rateMilli("rate", "clear_rate; CLI: --rate none", *ch.Rate, partitions)
		if err != nil {
			return current, err
		}
		if l.RateMilli == 0 && ch.Burst == nil {
			l.Burst = DefaultBurst(milli, partitions)
		}
		l.RateMilli = milli
	}
	if ch.Burst != nil {
		if *ch.Burst == 0 {
			return current, fieldErr("burst", "must be at least 1: the leases a full bucket grants at once")
		}
		if l.RateMilli == 0 {
			return current, fieldErr("burst", "a burst needs a rate: give rate too")
		}
		l.Burst = *ch.Burst
	}
	return l, CheckFlowLimits(l, partitions)
}

// rateMilli converts a rate of leases per second given as field into
// milli-leases per second, refusing one that is not positive, above the
// limit, or below 0.001 per second per partition.
func rateMilli(field, clear string, r float64, partitions int) (uint64, error) {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0) || r <= 0:
		return 0, fieldErr(field, "%v is not a positive number of leases per second: to remove the limit clear it (%s), to stop leasing pause the queue", r, clear)
	case r > state.MaxRateMilli/1000:
		return 0, fieldErr(field, "%g leases per second is above the limit, %d", r, state.MaxRateMilli/1000)
	}
	milli := uint64(math.Round(r * 1000))
	if milli < uint64(partitions) {
		return 0, fieldErr(field, "%g leases per second is below the smallest rate, 0.001 per second per partition: the queue has %d partitions, so at least %g",
			r, partitions, RatePerSecond(uint64(partitions)))
	}
	return milli, nil
}

// ResolveKeys returns the limits of the queue's keys that the change
// makes of current, or a *FieldError naming the field at fault. A key
// burst not given keeps the queue's key burst if it has a key rate, and is
// the key rate rounded up otherwise. The key limits are never split over
// partitions: every task of a key is in one.
func (ch LimitChange) ResolveKeys(current state.KeyLimits) (state.KeyLimits, error) {
	switch {
	case ch.KeyMaxConcurrency != nil && ch.ClearKeyMaxConcurrency:
		return current, fieldErr("clear_key_max_concurrency", "key_max_concurrency is both set and cleared: give one of them")
	case ch.KeyRate != nil && ch.ClearKeyRate:
		return current, fieldErr("clear_key_rate", "key_rate is both set and cleared: give one of them")
	case ch.KeyBurst != nil && ch.ClearKeyRate:
		return current, fieldErr("key_burst", "a key burst is given with clear_key_rate, which removes the key rate and its burst: give one of them")
	}
	k := current
	switch {
	case ch.ClearKeyMaxConcurrency:
		k.MaxConcurrency = 0
	case ch.KeyMaxConcurrency != nil:
		switch v := *ch.KeyMaxConcurrency; {
		case v == 0:
			return current, fieldErr("key_max_concurrency", "0 would lease nothing of a key: to remove the limit clear it (clear_key_max_concurrency; CLI: --key-max-concurrency none)")
		case v > state.MaxConcurrencyLimit:
			return current, fieldErr("key_max_concurrency", "%d is above the limit, %d", v, state.MaxConcurrencyLimit)
		}
		k.MaxConcurrency = *ch.KeyMaxConcurrency
	}
	switch {
	case ch.ClearKeyRate:
		k.RateMilli, k.Burst = 0, 0
	case ch.KeyRate != nil:
		milli, err := rateMilli("key_rate", "clear_key_rate; CLI: --key-rate none", *ch.KeyRate, 1)
		if err != nil {
			return current, err
		}
		if k.RateMilli == 0 && ch.KeyBurst == nil {
			k.Burst = DefaultBurst(milli, 1)
		}
		k.RateMilli = milli
	}
	if ch.KeyBurst != nil {
		switch v := *ch.KeyBurst; {
		case v == 0:
			return current, fieldErr("key_burst", "must be at least 1: the leases of one key a full bucket grants at once")
		case v > state.MaxBurst:
			return current, fieldErr("key_burst", "%d is above the limit, %d", v, state.MaxBurst)
		case k.RateMilli == 0:
			return current, fieldErr("key_burst", "a key burst needs a key rate: give key_rate too")
		}
		k.Burst = *ch.KeyBurst
	}
	if ch.KeyOrdered != nil {
		k.Ordered = *ch.KeyOrdered
	}
	if ch.Fair != nil {
		k.Fair = *ch.Fair
	}
	if k.Ordered && k.MaxConcurrency > 1 {
		return current, fieldErr("key_ordered", "an ordered key runs one task at a time, which a key_max_concurrency of %d contradicts: give one of them (or key_max_concurrency 1)", k.MaxConcurrency)
	}
	return k, nil
}

// CheckFlowLimits checks queue-wide limits to be split over partitions
// partitions: each within its bound, a burst exactly with a rate, and
// max concurrency and burst at least one per partition (a share of 0
// would starve the partition's tasks). It names the field at fault.
func CheckFlowLimits(l state.Limits, partitions int) error {
	if partitions < 1 {
		return fieldErr("partitions", "%d: a queue has at least one partition", partitions)
	}
	perPartition := func(field string, v uint32) error {
		return fieldErr(field, "%d is below the queue's %d partitions: each partition gets a share of at least 1 (a share of 0 would starve its tasks); set at least %d, or clear the limit",
			v, partitions, partitions)
	}
	switch {
	case l.MaxConcurrency > state.MaxConcurrencyLimit:
		return fieldErr("max_concurrency", "%d is above the limit, %d", l.MaxConcurrency, state.MaxConcurrencyLimit)
	case l.MaxConcurrency > 0 && int(l.MaxConcurrency) < partitions:
		return perPartition("max_concurrency", l.MaxConcurrency)
	case l.RateMilli > state.MaxRateMilli:
		return fieldErr("rate", "%g leases per second is above the limit, %d", RatePerSecond(l.RateMilli), state.MaxRateMilli/1000)
	case l.RateMilli > 0 && l.RateMilli < uint64(partitions):
		return fieldErr("rate", "%g leases per second is below 0.001 per second per partition (%d partitions)", RatePerSecond(l.RateMilli), partitions)
	case l.Burst > state.MaxBurst:
		return fieldErr("burst", "%d is above the limit, %d", l.Burst, state.MaxBurst)
	case (l.RateMilli == 0) != (l.Burst == 0):
		return fieldErr("burst", "a rate needs a burst, and a burst a rate")
	case l.Burst > 0 && int(l.Burst) < partitions:
		return perPartition("burst", l.Burst)
	}
	return nil
}

// SplitLimits returns partition i's share (0 ≤ i < n) of queue-wide
// limits l split over n partitions: max concurrency, burst and rate (in
// milli-leases per second) each divided by n, the first (limit mod n)
// partitions one more. The shares add up to l exactly; with l checked by
// CheckFlowLimits no share of a set limit is 0.
func SplitLimits(l state.Limits, n, i int) state.Limits {
	share := func(v uint64) uint64 {
		s := v / uint64(n)
		if uint64(i) < v%uint64(n) {
			s++
		}
		return s
	}
	return state.Limits{
		MaxConcurrency: uint32(share(uint64(l.MaxConcurrency))),
		RateMilli:      share(l.RateMilli),
		Burst:          uint32(share(uint64(l.Burst))),
	}
}

// LimitsRequest records a queue's flow control in one partition.
type LimitsRequest struct {
	Namespace string // default "default"
	Queue     string
	// Limits is queue-wide, as resolved (LimitChange.Resolve); none
	// removes the queue's limits.
	Limits state.Limits
	// This partition is number Index of the queue's Partitions (0 and 1 in
	// embedded mode): it records its share (SplitLimits).
	Partitions, Index int
	// Keys is the limits of the queue's keys, as resolved
	// (LimitChange.ResolveKeys), and KeyWeights their fair weights
	// (LimitChange.ResolveWeights): recorded whole.
	Keys       state.KeyLimits
	KeyWeights []state.KeyWeight
	Actor
}

// SetLimits records the queue's limits in this partition (one
// QueueLimited record) and wakes its long-polls. It reports whether they
// changed (false: they were already these, and nothing was written).
func (c *Coordinator) SetLimits(ctx context.Context, req LimitsRequest) (changed bool, err error) {
	if err := c.checkQueueAction(&req.Namespace, req.Queue, req.Actor); err != nil {
		return false, err
	}
	if err := CheckFlowLimits(req.Limits, req.Partitions); err != nil {
		return false, err
	}
	if _, err := (LimitChange{}).ResolveKeys(req.Keys); err != nil {
		return false, err
	}
	if why := req.Keys.Check(); why != "" {
		return false, fieldErr("key_limits", "%s", why)
	}
	weights, err := (LimitChange{KeyWeights: req.KeyWeights, ClearKeyWeights: true}).ResolveWeights(nil)
	if err != nil {
		return false, err
	}
	if req.Index < 0 || req.Index >= req.Partitions {
		return false, fieldErr("partition", "index %d is outside the queue's %d partitions", req.Index, req.Partitions)
	}
	share := SplitLimits(req.Limits, req.Partitions, req.Index)
	r := &state.QueueLimited{
		Namespace: req.Namespace, Queue: req.Queue,
		MaxConcurrency: share.MaxConcurrency, RateMilli: share.RateMilli, Burst: share.Burst,
		QueueMaxConcurrency: req.Limits.MaxConcurrency, QueueRateMilli: req.Limits.RateMilli, QueueBurst: req.Limits.Burst,
		Partitions: uint32(req.Partitions), By: req.By, Reason: req.Reason,
		KeyMaxConcurrency: req.Keys.MaxConcurrency, KeyRateMilli: req.Keys.RateMilli, KeyBurst: req.Keys.Burst,
		KeyOrdered: req.Keys.Ordered, Fair: req.Keys.Fair, KeyWeights: weights,
	}
	if share.None() {
		r.QueueMaxConcurrency, r.QueueRateMilli, r.QueueBurst, r.Partitions = 0, 0, 0, 0
	}
	if err := c.lock(); err != nil {
		return false, err
	}
	k := state.QueueKey{Namespace: req.Namespace, Queue: req.Queue}
	cur, _ := c.st.Limits(k)
	if want := r.Limits(); cur.Limits == want.Limits && cur.Queue == want.Queue && cur.Partitions == want.Partitions && cur.Keys == want.Keys &&
		slices.Equal(c.st.KeyWeights(k), r.KeyWeights) {
		return false, c.writeAndWait(ctx) // as it is: answer once that is durable
	}
	r.At = c.now()
	return true, c.writeAndWait(ctx, r)
}
