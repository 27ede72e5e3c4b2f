package coordinator

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/state"
)

func yes(v bool) *bool { return &v }

// TestResolveKeysRefusesBadInput: every bad change of the key limits is a
// FieldError naming the field at fault, among them key_ordered with a key
// max concurrency above 1, whichever of the two the change gives.
func TestResolveKeysRefusesBadInput(t *testing.T) {
	rate := state.KeyLimits{RateMilli: 5000, Burst: 5}
	tests := []struct {
		name    string
		ch      LimitChange
		current state.KeyLimits
		field   string
	}{
		{"zero concurrency", LimitChange{KeyMaxConcurrency: u32(0)}, state.KeyLimits{}, "key_max_concurrency"},
		{"concurrency too large", LimitChange{KeyMaxConcurrency: u32(state.MaxConcurrencyLimit + 1)}, state.KeyLimits{}, "key_max_concurrency"},
		{"set and clear concurrency", LimitChange{KeyMaxConcurrency: u32(2), ClearKeyMaxConcurrency: true}, state.KeyLimits{}, "clear_key_max_concurrency"},
		{"zero rate", LimitChange{KeyRate: f64(0)}, state.KeyLimits{}, "key_rate"},
		{"negative rate", LimitChange{KeyRate: f64(-3)}, state.KeyLimits{}, "key_rate"},
		{"NaN rate", LimitChange{KeyRate: f64(math.NaN())}, state.KeyLimits{}, "key_rate"},
		{"rate too large", LimitChange{KeyRate: f64(2e6)}, state.KeyLimits{}, "key_rate"},
		{"rate below a milli-lease", LimitChange{KeyRate: f64(0.0001)}, state.KeyLimits{}, "key_rate"},
		{"set and clear rate", LimitChange{KeyRate: f64(1), ClearKeyRate: true}, state.KeyLimits{}, "clear_key_rate"},
		{"burst and clear rate", LimitChange{KeyBurst: u32(1), ClearKeyRate: true}, rate, "key_burst"},
		{"burst without a rate", LimitChange{KeyBurst: u32(2)}, state.KeyLimits{}, "key_burst"},
		{"zero burst", LimitChange{KeyRate: f64(1), KeyBurst: u32(0)}, state.KeyLimits{}, "key_burst"},
		{"burst too large", LimitChange{KeyRate: f64(1), KeyBurst: u32(state.MaxBurst + 1)}, state.KeyLimits{}, "key_burst"},
		{"ordered with concurrency 2", LimitChange{KeyOrdered: yes(true), KeyMaxConcurrency: u32(2)}, state.KeyLimits{}, "key_ordered"},
		{"ordered on a concurrency of 3", LimitChange{KeyOrdered: yes(true)}, state.KeyLimits{MaxConcurrency: 3}, "key_ordered"},
		{"concurrency 2 on an ordered queue", LimitChange{KeyMaxConcurrency: u32(2)}, state.KeyLimits{Ordered: true}, "key_ordered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.ch.ResolveKeys(tt.current)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("ResolveKeys: %v; want a FieldError naming %q", err, tt.field)
			}
		})
	}
}

// TestResolveKeys: key limits not named are kept; a key rate without a
// burst gets the key rate rounded up, or keeps the key burst; a change of
// the keys alone is a change (Resolve keeps the queue's limits).
func TestResolveKeys(t *testing.T) {
	tests := []struct {
		name    string
		ch      LimitChange
		current state.KeyLimits
		want    state.KeyLimits
	}{
		{"concurrency", LimitChange{KeyMaxConcurrency: u32(2)}, state.KeyLimits{Fair: true}, state.KeyLimits{MaxConcurrency: 2, Fair: true}},
		{"default burst", LimitChange{KeyRate: f64(2.5)}, state.KeyLimits{}, state.KeyLimits{RateMilli: 2500, Burst: 3}},
		{"burst kept", LimitChange{KeyRate: f64(10)}, state.KeyLimits{RateMilli: 500, Burst: 2}, state.KeyLimits{RateMilli: 10_000, Burst: 2}},
		{"ordered, one at a time", LimitChange{KeyOrdered: yes(true)}, state.KeyLimits{MaxConcurrency: 1}, state.KeyLimits{MaxConcurrency: 1, Ordered: true}},
		{"fair off", LimitChange{Fair: yes(false)}, state.KeyLimits{Fair: true, Ordered: true}, state.KeyLimits{Ordered: true}},
		{"clear", LimitChange{ClearKeyRate: true, ClearKeyMaxConcurrency: true}, state.KeyLimits{MaxConcurrency: 4, RateMilli: 9, Burst: 1}, state.KeyLimits{}},
	}
	for _, tt := range tests {
		got, err := tt.ch.ResolveKeys(tt.current)
		if err != nil || got != tt.want {
			t.Errorf("%s: ResolveKeys = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
		q := state.Limits{MaxConcurrency: 5}
		if l, err := tt.ch.Resolve(q, 1); err != nil || l != q {
			t.Errorf("%s: Resolve of a change of the keys alone = %+v, %v; want the queue's limits kept", tt.name, l, err)
		}
	}
}

// TestSubmitKey: a submit's key is recorded and read back; a key too long,
// not UTF-8 or with a space is refused naming the field, and a retry of a
// request id with another key is refused.
func TestSubmitKey(t *testing.T) {
	e := newEnv(t, 51)
	res, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Key: "customer-42", RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Key != "customer-42" {
		t.Fatalf("the submitted task's key is %q", res.Key)
	}
	for _, tt := range []struct{ name, key, want string }{
		{"too long", strings.Repeat("k", state.MaxKeyBytes+1), "129 bytes is over the limit of 128"},
		{"not UTF-8", "a\xffb", "UTF-8"},
		{"a space", "acme corp", "spaces"},
	} {
		_, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Key: tt.key})
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "key" || !strings.Contains(fe.Problem, tt.want) {
			t.Errorf("%s: Submit = %v; want a FieldError naming key (%q)", tt.name, err, tt.want)
		}
	}
	_, err = e.c.Submit(ctx, SubmitRequest{Queue: "q", Key: "customer-7", RequestID: "r1"})
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(fe.Problem, `key "customer-42", not "customer-7"`) {
		t.Fatalf("a retry with another key: %v", err)
	}
	if again, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Key: "customer-42", RequestID: "r1"}); err != nil || !again.Duplicate {
		t.Fatalf("a true retry: %+v, %v", again, err)
	}
}

// TestLeaseKeyLimits: the lease path offers no more of a key than its
// limits leave, an ordered key's tasks one at a time in creation order,
// and the end of a lease of a key wakes a long-poll.
func TestLeaseKeyLimits(t *testing.T) {
	e := newEnv(t, 52)
	var ids []string
	for range 3 {
		ids = append(ids, e.submit("q", func(r *SubmitRequest) { r.Key = "acme" }).ID)
	}
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Keys: state.KeyLimits{Ordered: true}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10})
	if err != nil || len(ls) != 1 || ls[0].TaskID != ids[0] || ls[0].Key != "acme" {
		t.Fatalf("Lease = %+v, %v; want the first task of the ordered key alone", ls, err)
	}
	got := e.longPoll("q")
	select {
	case ls := <-got:
		t.Fatalf("a poll on an ordered key with a lease got %+v", ls)
	default:
	}
	if err := e.c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if next := <-got; len(next) != 1 || next[0].TaskID != ids[1] {
		t.Fatalf("the long-poll got %+v once the first task completed; want %s", next, ids[1])
	}
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Keys: state.KeyLimits{MaxConcurrency: 2}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10}); err != nil || len(ls) != 1 || ls[0].TaskID != ids[2] {
		t.Fatalf("Lease with a key max concurrency of 2 and one lease held = %+v, %v; want %s alone", ls, err, ids[2])
	}
	var fe *FieldError
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Keys: state.KeyLimits{Ordered: true, MaxConcurrency: 2}, Partitions: 1}); !errors.As(err, &fe) || fe.Field != "key_ordered" {
		t.Fatalf("SetLimits of an ordered key with a max concurrency of 2: %v", err)
	}
	e.restart()
}

// TestResolveWeights: key weights are set, kept, removed with weight 1 or
// all at once, returned ordered by key; a bad one is refused naming it.
func TestResolveWeights(t *testing.T) {
	cur := []state.KeyWeight{{Key: "acme", Weight: 3}, {Key: "beta", Weight: 2}}
	got, err := LimitChange{KeyWeights: []state.KeyWeight{{Key: "zeta", Weight: 7}, {Key: "beta", Weight: 1}}}.ResolveWeights(cur)
	if want := []state.KeyWeight{{Key: "acme", Weight: 3}, {Key: "zeta", Weight: 7}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ResolveWeights = %v, %v; want %v", got, err, want)
	}
	if got, err := (LimitChange{ClearKeyWeights: true}).ResolveWeights(cur); err != nil || got != nil {
		t.Fatalf("clearing the weights: %v, %v", got, err)
	}
	many := make([]state.KeyWeight, state.MaxKeyWeights+1)
	for i := range many {
		many[i] = state.KeyWeight{Key: fmt.Sprint("k", i), Weight: 2}
	}
	for _, tt := range []struct {
		name  string
		ws    []state.KeyWeight
		field string
	}{
		{"weight 0", []state.KeyWeight{{Key: "a", Weight: 0}}, "key_weights[0].weight"},
		{"weight above 1000", []state.KeyWeight{{Key: "a", Weight: 1001}}, "key_weights[0].weight"},
		{"no key", []state.KeyWeight{{Key: "", Weight: 2}}, "key_weights[0].key"},
		{"a key with a space", []state.KeyWeight{{Key: "a b", Weight: 2}}, "key_weights[0].key"},
		{"a key twice", []state.KeyWeight{{Key: "a", Weight: 2}, {Key: "a", Weight: 3}}, "key_weights[1].key"},
		{"too many", many, "key_weights"},
	} {
		_, err := LimitChange{KeyWeights: tt.ws}.ResolveWeights(nil)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: %v; want a FieldError naming %s", tt.name, err, tt.field)
		}
	}
}
