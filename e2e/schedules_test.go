package e2e

// End-to-end tests of schedules with the real binary: a schedule that
// fires every second, its server killed with kill -9 and restarted
// (embedded), or the owner of its partition and the coordinator killed
// and restarted again and again (three cluster nodes on MariaDB). Each
// tick must fire once and only once: the tasks of the queue are listed at
// the end, and every tick from the first to the last must have exactly
// one task, with the tick's request id. No assertion reads the clock: the
// waits only stop a hung test.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
)

// e2eScheduleName is the schedule every test here creates.
const e2eScheduleName = "tick"

// tickOf returns the tick of a task a schedule of queue named name
// submitted, from its request id ("schedule <queue>/<name> <tick in Unix
// ns>"); false for any other task.
func tickOf(requestID, queue, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(requestID, "schedule "+queue+"/"+name+" ")
	if !ok {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns).UTC(), true
}

// checkEveryTickOnce checks the tasks of a schedule that fires every
// second: each has the request id of one tick, no tick has two tasks, and
// every tick from first to the last one fired has one. It returns the
// ticks, in order, and the task of each (times in UTC, which map keys
// need).
func checkEveryTickOnce(t *testing.T, tasks []client.Task, queue string, first time.Time) ([]time.Time, map[time.Time]client.Task) {
	t.Helper()
	first = first.UTC()
	byTick := map[time.Time]client.Task{}
	for _, tk := range tasks {
		tick, ok := tickOf(tk.RequestID, queue, e2eScheduleName)
		if !ok {
			t.Errorf("task %s has request id %q, not one of the schedule's", tk.ID, tk.RequestID)
			continue
		}
		if prev, dup := byTick[tick]; dup {
			t.Errorf("tick %v fired twice: tasks %s and %s", tick, prev.ID, tk.ID)
		}
		byTick[tick] = tk
	}
	var ticks []time.Time
	for tick := range byTick {
		ticks = append(ticks, tick)
	}
	slices.SortFunc(ticks, time.Time.Compare)
	if len(ticks) == 0 {
		t.Fatal("the schedule fired no task")
	}
	if !ticks[0].Equal(first) {
		t.Errorf("the first task is of tick %v, want the schedule's first tick %v", ticks[0], first)
	}
	var missing []string
	for tick := first; !tick.After(ticks[len(ticks)-1]); tick = tick.Add(time.Second) {
		if _, ok := byTick[tick]; !ok {
			missing = append(missing, tick.UTC().Format(time.TimeOnly))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d ticks between %v and %v never fired: %v", len(missing), first, ticks[len(ticks)-1], missing)
	}
	return ticks, byTick
}

// listQueue returns every task of namespace and queue, through c.
func listQueue(ctx context.Context, c *client.Client, namespace, queue string) ([]client.Task, error) {
	var out []client.Task
	for t, err := range c.ListTasks(ctx, client.ListTasksRequest{Namespace: namespace, Queue: queue, PageSize: 1000}) {
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	return out, nil
}

// checkRecent checks a schedule's recent decisions against its tasks: the
// last ones fired, oldest first, each with the task of its tick.
func checkRecent(t *testing.T, sc *client.Schedule, ticks []time.Time, byTick map[time.Time]client.Task) {
	t.Helper()
	want := min(len(ticks), 20)
	if len(sc.Recent) != want {
		t.Fatalf("the schedule's recent list holds %d decisions, want %d (the last of %d fires)", len(sc.Recent), want, len(ticks))
	}
	for i, f := range sc.Recent {
		tick := ticks[len(ticks)-want+i]
		if f.Outcome != client.FireOutcomeFired || !f.Tick.Equal(tick) || f.TaskID != byTick[tick].ID || f.TaskState != byTick[tick].State {
			t.Errorf("recent[%d] = %+v; want FIRED, tick %v, task %s in state %v", i, f, tick, byTick[tick].ID, byTick[tick].State)
		}
	}
}

// TestScheduleEmbeddedE2E: a schedule that fires every second on a real
// server fires each tick once, also across a kill -9 and a restart on the
// same data directory (the ticks missed while it was down fire at the
// restart, within the catch-up window); the schedule's recent decisions
// name the task of each tick.
func TestScheduleEmbeddedE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := t.Context()
	srv := startServerProc(t, dir)
	c := sdk(t, srv.url())
	res, err := c.CreateSchedule(ctx, client.ScheduleRequest{Queue: "e2e", Name: e2eScheduleName, Cron: "* * * * * *",
		Overlap: client.OverlapAllow, Payload: []byte("tick")})
	if err != nil || !res.Created {
		t.Fatalf("CreateSchedule: %v, %v", res.Created, err)
	}
	sc := &res.Schedule
	first := sc.NextFires[0]
	waitTasks := func(c *client.Client, n int) int {
		t.Helper()
		var got int
		eventually.NoError(t, fmt.Sprintf("at least %d tasks of the schedule", n), func() error {
			tasks, err := listQueue(ctx, c, "", "e2e")
			if err != nil {
				return err
			}
			if got = len(tasks); got < n {
				return fmt.Errorf("%d tasks", got)
			}
			return nil
		})
		return got
	}
	before := waitTasks(c, 3)
	srv.kill9(t)
	srv = startServerProc(t, dir)
	c = sdk(t, srv.url())
	waitTasks(c, before+3)
	if _, err := c.PauseSchedule(ctx, client.ScheduleControlRequest{Queue: "e2e", Name: e2eScheduleName, Reason: "end of test"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := listQueue(ctx, c, "", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	ticks, byTick := checkEveryTickOnce(t, tasks, "e2e", first)
	sc, err = c.GetSchedule(ctx, client.GetScheduleRequest{Namespace: "", Queue: "e2e", Name: e2eScheduleName})
	if err != nil {
		t.Fatal(err)
	}
	checkRecent(t, sc, ticks, byTick)
	for _, tk := range tasks {
		if string(tk.Payload) != "tick" {
			t.Fatalf("task %s has payload %q, not the schedule's", tk.ID, tk.Payload)
		}
	}
	t.Logf("%d ticks fired, each once, across a kill -9 after %d of them", len(ticks), before)
}

// TestClusterScheduleKills is the acceptance test of schedules in cluster
// mode: three nodes, a schedule that fires every second (overlap ALLOW, a
// catch-up window longer than any outage here), and for about a minute
// the owner of the schedule's partition and the coordinator (the election
// holder) killed with kill -9 in turn, each restarted a few seconds later.
// At the end every tick from the schedule's first to its last fired
// exactly once: none twice (each tick's task has the tick's request id,
// written in the same record as the schedule's advance), none missing
// (with a catch-up window longer than every outage, a tick missed while
// its partition moved fires when it is served again).
func TestClusterScheduleKills(t *testing.T) {
	c, _ := newClTest(t, -1)
	ctx := t.Context()
	const (
		queue   = "sched"
		catchUp = 2 * time.Minute
		kills   = 8
	)
	onAny := c.onAny()
	var sc *client.Schedule
	onAny("creating the schedule", func(cl *client.Client) error {
		res, err := cl.CreateSchedule(ctx, client.ScheduleRequest{Namespace: clNamespace, Queue: queue, Name: e2eScheduleName,
			Cron: "* * * * * *", Overlap: client.OverlapAllow, CatchUpWindow: catchUp})
		sc = &res.Schedule
		return err
	})
	first := sc.NextFires[0]
	c.waitBalanced("the queue's partitions spread over the three nodes", c.ids())

	var tasks []client.Task
	// waitMore waits until the schedule has fired n more tasks than it
	// had, and returns how many it has.
	waitMore := func(what string, n int) int {
		t.Helper()
		had := len(tasks)
		onAny(what, func(cl *client.Client) error {
			got, err := listQueue(ctx, cl, clNamespace, queue)
			if err != nil {
				return err
			}
			tasks = got
			if len(tasks) < had+n {
				return fmt.Errorf("%d tasks, waiting for %d", len(tasks), had+n)
			}
			return nil
		})
		return len(tasks)
	}
	waitMore("the schedule's first fires", 3)
	part := partitionOfTask(tasks[0].ID)

	var log []string
	for k := range kills {
		ps, err := c.parts()
		if err != nil {
			t.Fatal(err)
		}
		victim, role := ps[part].owner, "owner of the schedule's partition"
		if k%2 == 1 {
			lk, ok, err := c.lock()
			if err != nil || !ok {
				t.Fatalf("reading the coordinator lock: %v, %v", ok, err)
			}
			victim, role = lk.owner, "coordinator"
			if lk.owner == ps[part].owner {
				role = "coordinator and owner of the schedule's partition"
			}
		}
		i := c.node(victim)
		if i < 0 {
			t.Fatalf("kill %d: the %s is %q, not a node of the test", k+1, role, victim)
		}
		n := c.nodes[i]
		n.proc.kill9(t)
		fired := waitMore(fmt.Sprintf("kill %d (%s %s): the schedule firing again without it", k+1, role, victim), 2)
		c.start(n, false)
		c.waitBalanced(fmt.Sprintf("kill %d: %s back", k+1, victim), c.ids())
		log = append(log, fmt.Sprintf("kill %d: %s (%s), %d tasks then", k+1, victim, role, fired))
		waitMore(fmt.Sprintf("kill %d: the schedule firing after %s's return", k+1, victim), 4)
	}
	onAny("pausing the schedule", func(cl *client.Client) error {
		_, err := cl.PauseSchedule(ctx, client.ScheduleControlRequest{Namespace: clNamespace, Queue: queue, Name: e2eScheduleName, Reason: "end of test"})
		return err
	})
	onAny("listing the queue", func(cl *client.Client) error {
		var err error
		tasks, err = listQueue(ctx, cl, clNamespace, queue)
		return err
	})
	ticks, byTick := checkEveryTickOnce(t, tasks, queue, first)
	for _, tk := range tasks {
		if p := partitionOfTask(tk.ID); p != part {
			t.Errorf("task %s of the schedule is in partition %d, not the schedule's %d", tk.ID, p, part)
		}
	}
	onAny("reading the schedule", func(cl *client.Client) error {
		var err error
		sc, err = cl.GetSchedule(ctx, client.GetScheduleRequest{Namespace: clNamespace, Queue: queue, Name: e2eScheduleName})
		return err
	})
	checkRecent(t, sc, ticks, byTick)
	skipped := 0
	for _, f := range sc.Recent {
		if f.Outcome == client.FireOutcomeSkipped {
			skipped++
		}
	}
	// A figure, not an assertion: the ticks whose task was created more
	// than a second after the tick, caught up once their partition was
	// served again.
	late := 0
	for _, tick := range ticks {
		if byTick[tick].CreatedAt.Sub(tick) > time.Second {
			late++
		}
	}
	t.Logf("%s", strings.Join(log, "\n"))
	t.Logf("schedule in partition %d: %d ticks from %v to %v, %d kills, %d fired (each once, %d of them more than 1s late: caught up after an outage), %d skipped in its recent decisions",
		part, len(ticks), ticks[0].UTC().Format(time.TimeOnly), ticks[len(ticks)-1].UTC().Format(time.TimeOnly), kills, len(byTick), late, skipped)
}
