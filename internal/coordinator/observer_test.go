package coordinator

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// countingObserver counts the records applied by type and the refusals by
// action.
type countingObserver struct {
	mu      sync.Mutex
	applied map[string]int
	refused map[state.Action]int
}

func (o *countingObserver) Applied(r state.Record, t *state.Task) {
	o.mu.Lock()
	defer o.mu.Unlock()
	name := fmt.Sprintf("%T", r)
	if t == nil {
		name += " (no task)"
	}
	o.applied[name]++
}

func (o *countingObserver) Refused(t *state.Task, a state.Action) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused[a]++
}

func (o *countingObserver) counts() (map[string]int, map[state.Action]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.applied), maps.Clone(o.refused)
}

// TestObserver: the observer sees every record applied while serving,
// once, with its task; every call refused to a former lease, repeats
// included (though only the first of each action writes a TaskCancelled);
// no call of a lease id the task never had; and nothing of a replay.
func TestObserver(t *testing.T) {
	e := &env{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch), sync: wal.SyncNone, seed: 15, rand: newSeededRand(15), checkEveryRecord: true}
	o := &countingObserver{applied: map[string]int{}, refused: map[state.Action]int{}}
	e.observer = o
	e.open()
	t.Cleanup(e.close)

	task := e.submit("q", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	e.submit("q")
	old := e.lease("w", "q")
	e.clock.Advance(time.Second)
	if err := e.c.Start(ctx, task.ID, old.LeaseID); err == nil {
		t.Fatal("start by a lease past due was accepted")
	}
	for range 2 {
		if _, err := e.c.Commit(ctx, task.ID, old.LeaseID, []byte("r")); err == nil {
			t.Fatal("commit by an expired lease was accepted")
		}
	}
	if _, err := e.c.Commit(ctx, task.ID, "never-granted", nil); err == nil {
		t.Fatal("commit by a lease the task never had was accepted")
	}
	e.clock.Advance(2 * time.Second) // past the retry backoff
	cur := e.lease("w", "q")
	if err := e.c.Complete(ctx, task.ID, cur.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	applied, refused := o.counts()
	wantApplied := map[string]int{
		"*state.TaskCreated":   2,
		"*state.LeaseGranted":  2,
		"*state.LeaseExpired":  1, // found past due by the start
		"*state.TaskCancelled": 2, // the start, the first commit
		"*state.TaskCompleted": 1,
	}
	if !maps.Equal(applied, wantApplied) {
		t.Errorf("applied %v, want %v", applied, wantApplied)
	}
	wantRefused := map[state.Action]int{state.ActionStart: 1, state.ActionCommit: 2}
	if !maps.Equal(refused, wantRefused) {
		t.Errorf("refused %v, want %v", refused, wantRefused)
	}

	e.restart()
	if a, r := o.counts(); !maps.Equal(a, applied) || !maps.Equal(r, refused) {
		t.Errorf("a restart's replay reached the observer: applied %v, refused %v", a, r)
	}
}
