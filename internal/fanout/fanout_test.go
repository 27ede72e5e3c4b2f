package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
)

// peer is another node: only its address is used.
type peer struct {
	route.Peer
	addr string
}

func (p *peer) Addr() string { return p.addr }

// part is a partition whose Do refuses with refuse, or waits for slow (or
// the end of its context), or for late whatever its context says, and
// then runs local, or forward with owner when another node serves it.
// Peer answers inMap, the owner in this node's map.
type part struct {
	id     uint64
	inMap  route.Peer
	owner  route.Peer
	refuse error
	slow   chan struct{}
	late   time.Duration
}

func (p *part) ID() uint64 { return p.id }

func (p *part) Peer(context.Context) route.Peer { return p.inMap }

func (p *part) Do(ctx context.Context, _ bool, local func(*coordinator.Coordinator) error, forward func(route.Peer) error) error {
	if p.refuse != nil {
		return p.refuse
	}
	if p.slow != nil {
		select {
		case <-p.slow:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(p.late)
	if p.owner != nil {
		return forward(p.owner)
	}
	return local(nil)
}

// TestGroup: items go to their partition's part in batch order, the parts
// in the order of their first items; an item without a partition is left
// out, and an error ends the grouping.
func TestGroup(t *testing.T) {
	a, b, c := &part{id: 1}, &part{id: 2}, &part{id: 3}
	at := []route.Partition{b, a, nil, b, c, a}
	ps, err := fanout.Group(len(at), func(i int) (route.Partition, error) { return at[i], nil })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprint(p.P.ID(), p.Items))
	}
	if want := []string{"2 [0 3]", "1 [1 5]", "3 [4]"}; !slices.Equal(got, want) {
		t.Errorf("parts %v, want %v", got, want)
	}
	bad := errors.New("item 2 has no queue")
	if _, err := fanout.Group(4, func(i int) (route.Partition, error) {
		if i == 2 {
			return nil, bad
		}
		return a, nil
	}); !errors.Is(err, bad) {
		t.Errorf("Group with a failing item: %v, want its error", err)
	}
}

// TestRunBounded: at most parallel parts run at once, and every part's
// answer comes back at its index.
func TestRunBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, most atomic.Int64
		rs := fanout.Run(t.Context(), 3, 20, func(_ context.Context, i int) (int, error) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Duration(20-i) * time.Millisecond) // finish out of order
			running.Add(-1)
			return i * i, nil
		})
		if m := most.Load(); m != 3 {
			t.Errorf("at most %d parts ran at once, want 3", m)
		}
		for i, r := range rs {
			if r.Err != nil || r.Value != i*i {
				t.Errorf("answer %d: %v, %v; want %d", i, r.Value, r.Err, i*i)
			}
		}
	})
}

// TestRunSlowPart: a slow part holds its own slot only: the others run
// and answer meanwhile, and Run answers all once the slow one has.
func TestRunSlowPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var done sync.Map
		var rs []fanout.Result[string]
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			rs = fanout.Run(t.Context(), 2, 4, func(_ context.Context, i int) (string, error) {
				if i == 0 {
					<-release
				}
				done.Store(i, true)
				return fmt.Sprint("part ", i), nil
			})
		}()
		synctest.Wait()
		for i := 1; i < 4; i++ {
			if _, ok := done.Load(i); !ok {
				t.Errorf("part %d did not run while part 0 was slow", i)
			}
		}
		select {
		case <-returned:
			t.Fatal("Run returned before its slow part answered")
		default:
		}
		close(release)
		<-returned
		for i, r := range rs {
			if r.Err != nil || r.Value != fmt.Sprint("part ", i) {
				t.Errorf("answer %d: %q, %v", i, r.Value, r.Err)
			}
		}
	})
}

// TestRunDeadline: when the caller's deadline passes, Run returns then:
// the part that answered keeps its answer, the one still running and the
// one never started answer the deadline, and what the late part answers
// afterwards is dropped.
func TestRunDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var started atomic.Int64
		start := time.Now()
		rs := fanout.Run(ctx, 2, 3, func(_ context.Context, i int) (string, error) {
			started.Add(1)
			if i == 0 {
				return "prompt", nil
			}
			time.Sleep(5 * time.Second) // ignores ctx, answers late
			return "late", nil
		})
		if took := time.Since(start); took != time.Second {
			t.Errorf("Run returned after %v, want at the deadline (1s)", took)
		}
		check := func(when string) {
			t.Helper()
			if rs[0].Value != "prompt" || rs[0].Err != nil {
				t.Errorf("%s: part 0: %q, %v; want its answer", when, rs[0].Value, rs[0].Err)
			}
			for i := 1; i < 3; i++ {
				if !errors.Is(rs[i].Err, context.DeadlineExceeded) || rs[i].Value != "" {
					t.Errorf("%s: part %d: %q, %v; want the deadline and no answer", when, i, rs[i].Value, rs[i].Err)
				}
			}
		}
		check("at the deadline")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		check("after the late answers")
		if n := started.Load(); n != 3 {
			t.Errorf("%d parts started, want 3 (part 2 takes part 0's slot)", n)
		}
	})
}

// TestRunOneInline: a call of one part runs it in the caller's goroutine:
// its answer is taken even when it comes after the deadline.
func TestRunOneInline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		rs := fanout.Run(ctx, 4, 1, func(context.Context, int) (string, error) {
			time.Sleep(2 * time.Second)
			return "done", nil
		})
		if rs[0].Value != "done" || rs[0].Err != nil {
			t.Errorf("one part: %q, %v; want its own answer", rs[0].Value, rs[0].Err)
		}
	})
}

// TestEach: every partition of a scope is asked, here or through its
// owner with a request that names that partition alone; a partition that
// refuses answers its error and the others still answer.
func TestEach(t *testing.T) {
	refused := errors.New("partition 2 refused")
	a := &peer{addr: "A"}
	scope := []route.Partition{&part{id: 1}, &part{id: 2, refuse: refused}, &part{id: 3, owner: a}}
	rs := fanout.Each(t.Context(), 2, scope, true,
		func(i int, _ *coordinator.Coordinator) (string, error) { return fmt.Sprint("here ", i), nil },
		func(i int, p route.Peer) (string, error) {
			req := fanout.Request(&struct{}{}, scope[i])
			return fmt.Sprintf("%s %d for %s", p.Addr(), i, req.Header().Get(route.PartitionHeader)), nil
		})
	if rs[0].Value != "here 0" || !errors.Is(rs[1].Err, refused) || rs[2].Value != "A 2 for 3" {
		t.Errorf("answers %+v, want here 0, the refusal, A 2 for 3", rs)
	}
	if err := fanout.FirstErr(rs); !errors.Is(err, refused) {
		t.Errorf("FirstErr = %v, want the refusal", err)
	}
}

// TestEachRefusedSlowLate: of the partitions of a scope, one refuses, one
// is slow but answers before the caller's deadline, one answers only
// after it, and one through another node at once. Each returns at the
// deadline with the refusal, the slow answer, the deadline for the late
// one (its later answer dropped) and the prompt answer, each at its
// partition's index.
func TestEachRefusedSlowLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("partition 1 refused")
		slow := make(chan struct{})
		scope := []route.Partition{
			&part{id: 1, refuse: refused},
			&part{id: 2, slow: slow},
			&part{id: 3, late: 5 * time.Second},
			&part{id: 4, owner: &peer{addr: "B"}},
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		time.AfterFunc(500*time.Millisecond, func() { close(slow) })
		start := time.Now()
		rs := fanout.Each(ctx, 4, scope, true,
			func(i int, _ *coordinator.Coordinator) (string, error) { return fmt.Sprint("here ", i), nil },
			func(i int, p route.Peer) (string, error) { return fmt.Sprint(p.Addr(), " ", i), nil })
		if took := time.Since(start); took != time.Second {
			t.Errorf("Each returned after %v, want at the deadline (1s)", took)
		}
		check := func(when string) {
			t.Helper()
			if !errors.Is(rs[0].Err, refused) || rs[1].Value != "here 1" || rs[1].Err != nil ||
				!errors.Is(rs[2].Err, context.DeadlineExceeded) || rs[2].Value != "" || rs[3].Value != "B 3" || rs[3].Err != nil {
				t.Errorf("%s: answers %+v, want the refusal, here 1, the deadline, B 3", when, rs)
			}
		}
		check("at the deadline")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		check("after the late answer")
	})
}

// TestPick: the items at idx; the batch itself when idx is all of it.
func TestPick(t *testing.T) {
	all := []string{"a", "b", "c"}
	if got := fanout.Pick(all, []int{0, 1, 2}); &got[0] != &all[0] {
		t.Error("Pick of every item in order copied the batch")
	}
	if got := fanout.Pick(all, []int{2, 0}); !slices.Equal(got, []string{"c", "a"}) {
		t.Errorf("Pick = %v", got)
	}
	if got := fanout.Pick(all, []int{0, 0, 1}); !slices.Equal(got, []string{"a", "a", "b"}) {
		t.Errorf("Pick of a repeated item = %v", got)
	}
}

// unavailable is how another node refuses a call it cannot serve now.
var unavailable = connect.NewError(connect.CodeUnavailable, errors.New("not served here"))

// TestRunNoParts: a call without parts answers nothing.
func TestRunNoParts(t *testing.T) {
	if rs := fanout.Run(t.Context(), 4, 0, func(context.Context, int) (int, error) { panic("called") }); len(rs) != 0 {
		t.Errorf("Run of no parts answered %v", rs)
	}
}
