package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
)

// batchEnv is a batch over six partitions: h1 and h2 served here, a1 and a2
// by node A (a2 moved to node D, which A's map does not know yet), c by
// node C, x refusing every call.
type batchEnv struct {
	a, c, d *peer
	parts   map[string]*part
	order   []string // a batch's items: the name of each one's partition

	mu    sync.Mutex
	calls []string // "<node> <items>" of each forwarded call
}

func newBatchEnv(items ...string) *batchEnv {
	e := &batchEnv{a: &peer{addr: "A"}, c: &peer{addr: "C"}, d: &peer{addr: "D"}, order: items}
	e.parts = map[string]*part{
		"h1": {id: 1}, "h2": {id: 2},
		"a1": {id: 3, inMap: e.a, owner: e.a}, "a2": {id: 4, inMap: e.a, owner: e.d},
		"c": {id: 5, inMap: e.c, owner: e.c},
		"x": {id: 6, refuse: errors.New("partition x refused")},
	}
	return e
}

func (e *batchEnv) group(t *testing.T) []fanout.Part {
	t.Helper()
	ps, err := fanout.Group(len(e.order), func(i int) (route.Partition, error) { return e.parts[e.order[i]], nil })
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// batch answers each item with who served it; refuse is the answer of
// node A (nil: it serves).
func (e *batchEnv) batch(refuse error, resend bool) fanout.Batch[[]string] {
	return fanout.Batch[[]string]{
		Local: func(_ *coordinator.Coordinator, items []int) ([]string, error) {
			return e.answer("here", items), nil
		},
		Forward: func(p route.Peer, items []int) ([]string, error) {
			e.mu.Lock()
			e.calls = append(e.calls, fmt.Sprint(p.Addr(), " ", items))
			e.mu.Unlock()
			if p.Addr() == "A" && refuse != nil {
				return nil, refuse
			}
			return e.answer(p.Addr(), items), nil
		},
		Resend:   func([]int) bool { return resend },
		Parallel: 2,
	}
}

func (e *batchEnv) answer(by string, items []int) []string {
	out := make([]string, len(items))
	for j, i := range items {
		out[j] = by + ":" + e.order[i]
	}
	return out
}

// flat writes each answer as "<items> <value or error>".
func flat(as []fanout.Answer[[]string]) []string {
	var out []string
	for _, a := range as {
		if a.Err != nil {
			out = append(out, fmt.Sprint(a.Items, " ", a.Err))
			continue
		}
		out = append(out, fmt.Sprint(a.Items, " ", strings.Join(a.Value, ",")))
	}
	return out
}

// TestBatchOneCallPerNode: the parts this node serves run here, each alone;
// the parts node A's map says it serves go to it in one call, its items in
// batch order, whatever the number of its partitions; a part alone with
// another node runs through its partition (which forwards it). A partition
// that refuses answers its refusal for its items, and the rest answer.
func TestBatchOneCallPerNode(t *testing.T) {
	e := newBatchEnv("a1", "h1", "c", "a2", "x", "h2", "a1", "h1")
	got := flat(e.batch(nil, true).Run(t.Context(), e.group(t)))
	want := []string{ // in the order of their first items
		"[0 3 6] A:a1,A:a2,A:a1",
		"[1 7] here:h1,here:h1",
		"[2] C:c",
		"[4] partition x refused",
		"[5] here:h2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("answers\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	slices.Sort(e.calls)
	if want := []string{"A [0 3 6]", "C [2]"}; !slices.Equal(e.calls, want) {
		t.Errorf("calls %v, want %v", e.calls, want)
	}
}

// TestBatchGroupRefused: a node that refuses its group as unavailable has
// each of the group's parts sent again on its own, which follows a
// partition that moved (a2, to D), when Resend allows; otherwise, or when
// it refuses otherwise, its refusal is the answer for every item of the
// group.
func TestBatchGroupRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse error
		resend bool
		want   []string
		calls  []string
	}{
		{"unavailable", unavailable, true,
			[]string{"[0 3] " + unavailable.Error(), "[2] D:a2", "[1] here:h1"},
			[]string{"A [0 2 3]", "A [0 3]", "D [2]"}},
		{"not to be sent again", unavailable, false,
			[]string{"[0 2 3] " + unavailable.Error(), "[1] here:h1"},
			[]string{"A [0 2 3]"}},
		{"refused otherwise", errors.New("permission denied"), true,
			[]string{"[0 2 3] permission denied", "[1] here:h1"},
			[]string{"A [0 2 3]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBatchEnv("a1", "h1", "a2", "a1")
			got := flat(e.batch(tc.refuse, tc.resend).Run(t.Context(), e.group(t)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("answers %q, want %q", got, tc.want)
			}
			slices.Sort(e.calls)
			if !slices.Equal(e.calls, tc.calls) {
				t.Errorf("calls %v, want %v", e.calls, tc.calls)
			}
		})
	}
}

// TestBatchSlowAndLate: a slow partition delays only its own items; one
// still slow at the caller's deadline answers the deadline for its items,
// and the others keep their answers.
func TestBatchSlowAndLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBatchEnv("h1", "h2", "c")
		e.parts["h2"].slow = make(chan struct{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		got := flat(e.batch(nil, true).Run(ctx, e.group(t)))
		if took := time.Since(start); took != time.Second {
			t.Errorf("Run returned after %v, want at the deadline", took)
		}
		want := []string{"[0] here:h1", "[1] " + context.DeadlineExceeded.Error(), "[2] C:c"}
		if !slices.Equal(got, want) {
			t.Errorf("answers %q, want %q", got, want)
		}
	})
}
