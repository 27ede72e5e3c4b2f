package state_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// remoteTask is a new task of queue q that depends on deps, the ids listed
// in remote being tasks of another partition.
func remoteTask(id string, policy state.DepPolicy, deps []string, remote ...uint32) *state.TaskCreated {
	return &state.TaskCreated{TaskID: id, Namespace: "default", Queue: "q", ExecutionWindow: time.Minute,
		Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}, CreatedAt: 1, DependsOn: deps, OnDependencyFailure: policy, Remote: remote}
}

// remoteEdges lists the watched edges of s as "dependent→dependency", sorted.
func remoteEdges(s *state.State) []string {
	var out []string
	s.RemoteEdges(func(t *state.Task, dep string) bool {
		out = append(out, t.ID+"→"+dep)
		return true
	})
	slices.Sort(out)
	return out
}

// TestDependencyResolved: a remote edge keeps its dependent BLOCKED, watched,
// until a DependencyResolved resolves it, once: the same record again, or
// one of an edge that is not pending, changes nothing; its release is the
// settle of a local edge (the result kept for the lease, the policy
// applied, the dependent's own dependents settled, a retry pending again);
// a replay of the log and a state restored from a snapshot at any point
// equal the live state.
func TestDependencyResolved(t *testing.T) {
	live := state.New()
	var log []state.Record
	apply := func(rs ...state.Record) {
		t.Helper()
		for _, r := range rs {
			before := live.Export()
			if err := live.Apply(live.LastLSN()+1, r); err != nil {
				t.Fatalf("%T: %v", r, err)
			}
			if err := live.Invariants(); err != nil {
				t.Fatalf("after %T: %v", r, err)
			}
			log = append(log, r)
			if dr, ok := r.(*state.DependencyResolved); ok && dr.Result != nil && string(dr.Result) == "again" {
				after := live.Export()
				after.LastLSN = before.LastLSN
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("a DependencyResolved of an edge resolved before changed the state")
				}
			}
			// Replay equals live, and so does a snapshot's restore.
			replay := state.New()
			for i, r := range log {
				if err := replay.Apply(uint64(i+1), r); err != nil {
					t.Fatalf("replay of %T: %v", r, err)
				}
			}
			if !reflect.DeepEqual(replay.Export(), live.Export()) {
				t.Fatalf("after %T the replayed state differs from the live one", r)
			}
			if got := restore(t, live.Image()); !reflect.DeepEqual(got.Export(), live.Export()) || !slices.Equal(remoteEdges(got), remoteEdges(live)) ||
				got.HeldBytes() != live.HeldBytes() {
				t.Fatalf("after %T the state restored from its image differs from it", r)
			}
		}
	}
	get := func(id string) *state.Task { return live.Task(id) }
	local := remoteTask("l", state.DepDead, nil)
	apply(local, remoteTask("d", state.DepDead, []string{"x-p2", "l"}, 0), remoteTask("e", state.DepDead, []string{"y-p2"}, 0),
		remoteTask("f", state.DepDead, []string{"e"}), remoteTask("g", state.DepRun, []string{"z-p3"}, 0))
	if want := []string{"d→x-p2", "e→y-p2", "g→z-p3"}; !slices.Equal(remoteEdges(live), want) {
		t.Fatalf("watched %v, want %v", remoteEdges(live), want)
	}
	for _, id := range []string{"d", "e", "f", "g"} {
		if get(id).State != state.Blocked {
			t.Fatalf("%s is %s, want BLOCKED", id, get(id).State)
		}
	}
	// The local edge completes: d still waits for its remote one.
	apply(&state.LeaseGranted{TaskID: "l", LeaseID: "ll", WorkerID: "w", Attempt: 1, GrantedAt: 2, LeaseExpiry: 2 + state.Time(time.Minute)},
		&state.TaskCompleted{TaskID: "l", LeaseID: "ll", Result: []byte("rl"), At: 3})
	if get("d").State != state.Blocked {
		t.Fatalf("d is %s with its remote dependency pending", get("d").State)
	}
	apply(&state.DependencyResolved{TaskID: "d", Dependency: "x-p2", Outcome: state.EndedCompleted, Result: []byte("rx"), At: 4})
	if d := get("d"); d.State != state.Waiting || d.NotBefore != 4 || string(live.RemoteResult(d, 0)) != "rx" || live.RemoteResult(d, 1) != nil {
		t.Fatalf("d after its remote dependency completed: %s, due %v, results %q %q", d.State, d.NotBefore, live.RemoteResult(d, 0), live.RemoteResult(d, 1))
	}
	if h := get("d").LSNs(); h[len(h)-1] != live.LastLSN() {
		t.Fatalf("d's history %v does not end with the record that released it (%d)", h, live.LastLSN())
	}
	// Learned again: nothing changes (checked by apply), d's result stays.
	apply(&state.DependencyResolved{TaskID: "d", Dependency: "x-p2", Outcome: state.EndedCompleted, Result: []byte("again"), At: 5})
	if string(live.RemoteResult(get("d"), 0)) != "rx" {
		t.Fatal("a repeated DependencyResolved replaced the result")
	}
	// Gone under DEAD: e ends, and so does f, which depends on it.
	apply(&state.DependencyResolved{TaskID: "e", Dependency: "y-p2", Outcome: state.EndedGone, At: 6})
	if e := get("e"); e.State != state.Dead || e.FailureReason != "dependency_failed: dependency y-p2 no longer exists" {
		t.Fatalf("e: %s %q", e.State, e.FailureReason)
	}
	if f := get("f"); f.State != state.Dead || f.FailureReason != "dependency_failed: task e is DEAD" {
		t.Fatalf("f: %s %q", f.State, f.FailureReason)
	}
	// Failed under RUN: g runs.
	apply(&state.DependencyResolved{TaskID: "g", Dependency: "z-p3", Outcome: state.EndedFailed, At: 7})
	if get("g").State != state.Waiting {
		t.Fatalf("g under RUN after its remote dependency failed: %s", get("g").State)
	}
	if len(remoteEdges(live)) != 0 {
		t.Fatalf("still watched: %v", remoteEdges(live))
	}
	// A retry of e asks again: its remote edge is pending, watched.
	apply(&state.TaskRetried{TaskID: "e", Reason: "restored", At: 8})
	if get("e").State != state.Blocked || !slices.Equal(remoteEdges(live), []string{"e→y-p2"}) {
		t.Fatalf("e retried: %s, watched %v", get("e").State, remoteEdges(live))
	}
	apply(&state.DependencyResolved{TaskID: "e", Dependency: "y-p2", Outcome: state.EndedCompleted, At: 9})
	if get("e").State != state.Waiting {
		t.Fatalf("e after its retried remote edge completed: %s", get("e").State)
	}
	// Not one of its edges, or not a remote one: nothing changes either.
	apply(&state.DependencyResolved{TaskID: "d", Dependency: "l", Outcome: state.EndedDead, At: 10, Result: nil},
		&state.DependencyResolved{TaskID: "nobody", Dependency: "x-p2", Outcome: state.EndedDead, At: 10})
	if get("d").State != state.Waiting {
		t.Fatalf("d after records that do not apply to it: %s", get("d").State)
	}
}

// TestDependencyResolvedRefused: a record without ids or outcome, or with
// a result of a dependency that did not complete, does not apply; a
// remote dependency that is a task of the state, or indexes out of order,
// are refused at creation.
func TestDependencyResolvedRefused(t *testing.T) {
	s := state.New()
	if err := s.Apply(1, remoteTask("a", state.DepDead, nil)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []state.Record{
		&state.DependencyResolved{Dependency: "x", Outcome: state.EndedCompleted},
		&state.DependencyResolved{TaskID: "a", Dependency: "x"},
		&state.DependencyResolved{TaskID: "a", Dependency: "x", Outcome: state.EndedFailed, Result: []byte("r")},
		remoteTask("b", state.DepDead, []string{"a"}, 0),
		remoteTask("c", state.DepDead, []string{"x", "y"}, 1, 0),
		remoteTask("c", state.DepDead, []string{"x"}, 1),
	} {
		if err := s.Apply(2, r); err == nil {
			t.Errorf("%+v applied", r)
		}
	}
}

// BenchmarkRemoteJoin: a join of 10,000 dependencies of other partitions,
// each resolved by its DependencyResolved (with a result): the cost per
// record stays flat however many edges the join has (the remote edges are
// indexed by dependency).
//
//	go test ./internal/state -run '^$' -bench BenchmarkRemoteJoin
func BenchmarkRemoteJoin(b *testing.B) {
	const n = 10_000
	deps := make([]string, n)
	remote := make([]uint32, n)
	for i := range deps {
		deps[i] = fmt.Sprintf("01m8tqx82868z2pcan3c2d%04d-p2", i)
		remote[i] = uint32(i)
	}
	for b.Loop() {
		b.StopTimer()
		s := state.New()
		if err := s.Apply(1, remoteTask("join", state.DepDead, deps, remote...)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for i, d := range deps {
			if err := s.Apply(uint64(i+2), &state.DependencyResolved{TaskID: "join", Dependency: d, Outcome: state.EndedCompleted, Result: []byte("r"), At: 1}); err != nil {
				b.Fatal(err)
			}
		}
		if s.Task("join").State != state.Waiting {
			b.Fatal("the join was not released")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/edge")
}
