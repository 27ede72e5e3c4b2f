package coordinator

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// TestMemoryBudget: a node's memory budget (64 KiB here) refuses submits
// once what its partition holds would pass it — a *FullError with the
// figures and the retry hint, nothing created — while a retried submit is
// still answered, workers still lease, complete (adding their results)
// and fail, and schedules cannot be created. Completing frees nothing;
// the retention purge, on the fake clock, does, and submits are admitted
// again. What the budget counts is the state's HeldBytes throughout, and
// after a restart, which replays the log to the same figure.
func TestMemoryBudget(t *testing.T) {
	const limit, retention = 64 << 10, time.Hour
	e := newEnv(t, 1)
	e.close()
	e.memory = NewMemoryBudget(limit, 90*time.Second)
	e.open()
	payload := bytes.Repeat([]byte("p"), 1<<10)
	counted := func(when string) {
		t.Helper()
		if got, want := e.memory.HeldBytes(), e.c.st.HeldBytes(); got != want || got <= 0 {
			t.Fatalf("%s: the budget counts %d bytes, the partition's state holds %d", when, got, want)
		}
	}
	submit := func(id string) (*state.Task, error) {
		res, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Payload: payload, RequestID: id})
		return res.Task, err
	}

	var admitted []string
	var full *FullError
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatalf("1000 submits of 1 KiB were all admitted under a budget of %d bytes", limit)
		}
		tk, err := submit(fmt.Sprintf("r%d", i))
		if errors.As(err, &full) {
			break
		}
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		admitted = append(admitted, tk.ID)
	}
	counted("full")
	if !errors.Is(full, ErrFull) || full.LimitBytes != limit || full.RetryAfter != 90*time.Second ||
		full.HeldBytes+full.NeedBytes <= limit || full.HeldBytes > limit || full.HeldBytes != e.memory.HeldBytes() {
		t.Fatalf("refusal %+v: want ErrFull, held within and held+need past the limit %d, retry after 90s", full, limit)
	}
	if n := e.c.st.Len(); n != len(admitted) {
		t.Fatalf("the refused submit created a task: %d tasks, %d admitted", n, len(admitted))
	}
	t.Logf("%d submits of 1 KiB admitted under %d bytes; refused: %v", len(admitted), limit, full)

	// A retry of an admitted submit is answered; a batch is refused whole.
	if tk, err := submit("r0"); err != nil || tk.ID != admitted[0] {
		t.Fatalf("retry of an admitted submit: %v, %v; want its task %s", tk, err, admitted[0])
	}
	if _, err := e.c.SubmitBatch(ctx, []SubmitRequest{{Queue: "q", RequestID: "r0", Payload: payload}, {Queue: "q", Payload: payload}}); !errors.Is(err, ErrFull) {
		t.Fatalf("a batch with one new task while full: %v, want ErrFull", err)
	}
	if _, _, err := e.c.CreateSchedule(ctx, ScheduleRequest{Queue: "q", Name: "s", Cron: "@every 1m", Payload: payload}); !errors.Is(err, ErrFull) {
		t.Fatalf("CreateSchedule while full: %v, want ErrFull", err)
	}

	// Workers drain: every task is leased and completed (with a result),
	// or failed for good.
	for i := range admitted {
		l := e.lease("w", "q")
		var err error
		if i%2 == 0 {
			err = e.c.Complete(ctx, l.TaskID, l.LeaseID, []byte("result"))
		} else {
			_, err = e.c.Fail(ctx, l.TaskID, l.LeaseID, "boom", true)
		}
		if err != nil {
			t.Fatalf("draining task %d while full: %v", i, err)
		}
	}
	counted("drained")
	if _, err := submit("after-drain"); !errors.Is(err, ErrFull) {
		t.Fatalf("submit after the queue drained but before retention: %v, want ErrFull (finished tasks hold their memory until purged)", err)
	}
	e.restart()
	counted("restarted")

	// The retention purge frees it.
	e.clock.Advance(retention + time.Minute)
	res, err := e.c.Purge(ctx, retention)
	if err != nil || res.Purged != len(admitted) {
		t.Fatalf("purge: %+v, %v; want %d tasks purged", res, err, len(admitted))
	}
	if e.memory.HeldBytes() != 0 || e.c.st.HeldBytes() != 0 {
		t.Fatalf("after purging every task the budget counts %d bytes, the state holds %d; want 0", e.memory.HeldBytes(), e.c.st.HeldBytes())
	}
	if _, err := submit("after-purge"); err != nil {
		t.Fatalf("submit after the purge: %v", err)
	}
	counted("after the purge")
	e.close()
	if got := e.memory.HeldBytes(); got != 0 {
		t.Fatalf("a closed coordinator left %d bytes counted in the budget", got)
	}
}
