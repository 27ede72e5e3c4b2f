package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestJoinProtocol: a node joins only a cluster whose active nodes speak
// a protocol version it speaks, and is otherwise refused with ErrProtocol
// naming both sides' versions, registering nothing; a node that joined
// before nodes stated their versions speaks 1, and a node gone silent or
// inactive does not count.
func TestJoinProtocol(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRegistry(t, Config{Silence: 10 * time.Second})
	join := func(id string, v Versions) error { return r.Join(ctx, id, id+":7070", v) }
	if err := join("a", Versions{2, 3}); err != nil {
		t.Fatalf("first node: %v", err)
	}
	if err := join("b", Versions{2, 2}); err != nil {
		t.Fatalf("a node of version 2 into a cluster of 2 to 3: %v", err)
	}
	for _, tc := range []struct {
		id      string
		v       Versions
		mention []string
	}{
		{"old", Versions{1, 1}, []string{`node "old" speaks protocol versions 1`, "(a, b) meet at 2", "speaks 2"}},
		{"new", Versions{3, 4}, []string{`node "new" speaks protocol versions 3 to 4`, "(a, b) meet at 2"}},
	} {
		err := join(tc.id, tc.v)
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("node %s of versions %v joined a cluster at 2: %v", tc.id, tc.v, err)
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("refusal %q does not say %q", err, m)
			}
		}
		if ids, _ := r.Active(ctx); slices.Contains(ids, tc.id) {
			t.Errorf("refused node %s registered: %v", tc.id, ids)
		}
	}
	// A restart states its versions again: its own row does not count.
	if err := join("a", Versions{3, 3}); err == nil {
		t.Fatal("a restarted at 3 alone joined beside b at 2")
	}
	if err := join("b", Versions{1, 2}); err != nil {
		t.Fatalf("b restarted at 1 to 2: %v", err)
	}

	// A node registered by a release that did not state versions speaks 1.
	if err := r.Heartbeat(ctx, "unstated", "unstated:7070"); err != nil {
		t.Fatal(err)
	}
	if err := join("c", Versions{2, 2}); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "unstated speaks 1") {
		t.Fatalf("a node of version 2 beside one of 1: %v, want refused naming unstated's version", err)
	}
	// Gone silent, or left: it does not count.
	ageHeartbeat(t, r, "unstated", time.Minute)
	if err := join("c", Versions{2, 2}); err != nil {
		t.Fatalf("with the node of version 1 silent: %v", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := r.Leave(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := join("d", Versions{5, 5}); err != nil {
		t.Fatalf("into a cluster whose nodes all left: %v", err)
	}
	if err := r.Join(ctx, "e", "e:7070", Versions{2, 1}); err == nil || errors.Is(err, ErrProtocol) {
		t.Errorf("Join with Min over Max: %v, want a usage error", err)
	}
}

// TestConcurrentJoins: nodes that join at once — each locking the others'
// rows and inserting its own, which InnoDB may answer with a deadlock or
// a lock-wait timeout for one of them — all join, while a sweep runs
// beside them.
func TestConcurrentJoins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRegistry(t, Config{Silence: 10 * time.Second})
	const rounds, nodes = 5, 12
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, nodes+1)
		start := make(chan struct{})
		for i := range nodes {
			id := fmt.Sprintf("n%d-%d", round, i)
			wg.Go(func() {
				<-start
				errs <- r.Join(ctx, id, id+":7070", Versions{1, 2})
			})
		}
		wg.Go(func() {
			<-start
			_, err := r.Sweep(ctx)
			errs <- err
		})
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
		ids, err := r.Active(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (round + 1) * nodes; len(ids) != want {
			t.Fatalf("round %d: %d active nodes, want %d: %v", round, len(ids), want, ids)
		}
	}
}
