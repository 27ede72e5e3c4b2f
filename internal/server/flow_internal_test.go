package server

import (
	"reflect"
	"testing"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestLimitsRequestSetsExactly: the request a partition on another node
// is sent sets exactly the limits resolved, whatever the partition had:
// each limit that is set is set to its value, each that is not is
// cleared, and the weights are replaced.
func TestLimitsRequestSetsExactly(t *testing.T) {
	t.Parallel()
	before := &tenurev1.QueueLimits{MaxConcurrency: 7, Rate: 9, Burst: 9, KeyMaxConcurrency: 5, KeyRate: 4, KeyBurst: 4,
		KeyWeights: []*tenurev1.KeyWeight{{Key: "old", Weight: 3}}}
	for _, want := range []resolved{
		{},
		{limits: state.Limits{MaxConcurrency: 3}, keys: state.KeyLimits{RateMilli: 2500, Burst: 6, Ordered: true}},
		{limits: state.Limits{RateMilli: 1500, Burst: 2}, keys: state.KeyLimits{MaxConcurrency: 1, Fair: true},
			weights: []state.KeyWeight{{Key: "k", Weight: 2}}},
		{limits: state.Limits{MaxConcurrency: 4, RateMilli: 500, Burst: 1}, keys: state.KeyLimits{MaxConcurrency: 2, RateMilli: 1000, Burst: 3}},
	} {
		m := limitsRequest("ns", "q", want, coordinator.Actor{By: "ops", Reason: "why"})
		for _, current := range []*tenurev1.QueueLimits{nil, before} {
			got, err := resolve(m, current, 1)
			if err != nil {
				t.Fatalf("%+v: resolving its request %v: %v", want, m, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the request %v over %v resolves to %+v, want %+v", m, current, got, want)
			}
		}
	}
}
