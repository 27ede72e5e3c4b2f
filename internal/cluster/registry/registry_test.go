package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{HeartbeatInterval: time.Millisecond}, "HeartbeatInterval"},
		{Config{HeartbeatInterval: 5 * time.Second, Silence: 5 * time.Second}, "Silence"},
		{Config{MaxNodes: -1}, "MaxNodes"},
	} {
		_, err := New(nil, tc.cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// newRegistry is a Registry on a new, migrated database.
func newRegistry(t *testing.T, cfg Config) *Registry {
	t.Helper()
	_, db := clustertest.DB(t)
	r, err := New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ageHeartbeat moves a node's last heartbeat into the past, as silence
// would, without waiting.
func ageHeartbeat(t *testing.T, r *Registry, id string, by time.Duration) {
	t.Helper()
	_, err := r.db.Exec("UPDATE nodes SET last_heartbeat = TIMESTAMPADD(MICROSECOND, -?, NOW(6)) WHERE node_id = ?", by.Microseconds(), id)
	if err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeatSweepRejoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRegistry(t, Config{Silence: 10 * time.Second})
	for _, id := range []string{"n3", "n1", "n2"} {
		if err := r.Heartbeat(ctx, id, id+":7070"); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := r.Active(ctx); err != nil || !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
		t.Fatalf("Active = %v, %v", ids, err)
	}
	// Nobody is silent yet.
	if swept, err := r.Sweep(ctx); err != nil || len(swept) != 0 {
		t.Fatalf("Sweep = %v, %v", swept, err)
	}
	// n2 falls silent for longer than Silence, n3 for less.
	ageHeartbeat(t, r, "n2", 11*time.Second)
	ageHeartbeat(t, r, "n3", 9*time.Second)
	if swept, err := r.Sweep(ctx); err != nil || !slices.Equal(swept, []string{"n2"}) {
		t.Fatalf("Sweep = %v, %v; want [n2]", swept, err)
	}
	if swept, err := r.Sweep(ctx); err != nil || len(swept) != 0 {
		t.Fatalf("second Sweep = %v, %v; want nothing", swept, err)
	}
	nodes, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 || nodes[1].ID != "n2" || nodes[1].Active || nodes[1].Silent < 11*time.Second || nodes[1].AdvertiseAddr != "n2:7070" {
		t.Fatalf("List = %+v", nodes)
	}
	// A heartbeat brings n2 back; Leave takes n1 out.
	if err := r.Heartbeat(ctx, "n2", "n2:7071"); err != nil {
		t.Fatal(err)
	}
	if err := r.Leave(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if ids, err := r.Active(ctx); err != nil || !slices.Equal(ids, []string{"n2", "n3"}) {
		t.Fatalf("Active = %v, %v", ids, err)
	}
	if err := r.Heartbeat(ctx, strings.Repeat("x", 256), ""); err == nil {
		t.Fatal("a 256-byte node id was accepted")
	}
}

func TestListLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRegistry(t, Config{MaxNodes: 2})
	for _, id := range []string{"a", "b", "c"} {
		if err := r.Heartbeat(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.List(ctx); err == nil || !strings.Contains(err.Error(), "MaxNodes") {
		t.Fatalf("List over the limit = %v", err)
	}
}

func TestRunHeartbeatsThenLeaves(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	r := newRegistry(t, Config{Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, "n1", "127.0.0.1:7070") }()
	first := lastHeartbeat(t, r, "n1")
	clk.WaitForTimers(1) // the first heartbeat is written
	clk.Advance(DefaultHeartbeatInterval)
	clk.WaitForTimers(1)
	if got := lastHeartbeat(t, r, "n1"); !got.After(first) {
		t.Fatalf("heartbeat did not advance: %v then %v", first, got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if ids, err := r.Active(context.Background()); err != nil || len(ids) != 0 {
		t.Fatalf("after Run: active %v, %v", ids, err)
	}
}

// lastHeartbeat waits for the node's row and returns its heartbeat time.
func lastHeartbeat(t *testing.T, r *Registry, id string) time.Time {
	t.Helper()
	for range 500 {
		var ts time.Time
		err := r.db.QueryRow("SELECT last_heartbeat FROM nodes WHERE node_id = ?", id).Scan(&ts)
		if err == nil {
			return ts
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("node %s never registered", id)
	return time.Time{}
}
