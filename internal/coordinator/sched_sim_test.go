package coordinator

// Deterministic simulation of schedules: one coordinator on the
// fault-injecting disk of package faultfs and a fake clock, three
// schedules (every second, every minute, daily at 02:30 in
// America/New_York, which has daylight-saving changes), over 400
// simulated days. The clock moves in steps from a second to two days; the
// coordinator decides the due ticks after each (FireDue, as its Run loop
// would). Faults at random: kill -9 (the page cache survives), power loss
// between passes (only fsynced data survives, or that plus a prefix of the
// rest), power cut in the middle of a pass, a failed fsync or write (the
// partition stops and is reopened), and the server down for up to three
// days.
//
// At the end the whole durable log is read back and every schedule's
// decisions are checked against its expression, independently of the
// state: they tile the ticks from the first after its creation to the last
// before the end, each tick in exactly one decision (so none fired twice
// and none lost); a tick fired only within its catch-up window of the
// decision's time; a range skipped only when its last tick was older than
// the window, and then up to the first tick inside it; every fired tick's
// task created in the same record with the tick's request id. And the
// replayed log equals the live state.
//
//	go test ./internal/coordinator -run 'TestScheduleSimulation$' -schedsim.seeds 50 -v
//	go test ./internal/coordinator -run 'TestScheduleSimulation$' -schedsim.seed 17 -v

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/state"
)

var (
	defaultSchedSimSeeds = 6
	schedSimSeeds        = flag.Int("schedsim.seeds", 0, "seeds TestScheduleSimulation runs (default 6, 2 under -race, 1 under -short)")
	schedSimSeed         = flag.Uint64("schedsim.seed", 0, "run only this seed")
	schedSimDays         = flag.Int("schedsim.days", 400, "simulated days per seed")
)

// simSchedules are the schedules of every run, with their catch-up
// windows; all fire whatever the previous task does (ALLOW), so that a
// skip can only be the catch-up window's.
var simSchedules = []ScheduleRequest{
	{Queue: "sim", Name: "every-second", Cron: "* * * * * *", CatchUp: 5 * time.Second, Overlap: state.OverlapAllow},
	{Queue: "sim", Name: "every-minute", Cron: "* * * * *", CatchUp: 3 * time.Minute, Overlap: state.OverlapAllow},
	{Queue: "sim", Name: "daily-new-york", Cron: "30 2 * * *", TimeZone: "America/New_York", CatchUp: 6 * time.Hour, Overlap: state.OverlapAllow},
}

func TestScheduleSimulation(t *testing.T) {
	from, seeds := seedRange(*schedSimSeed, *schedSimSeeds, defaultSchedSimSeeds, 1)
	if _, err := time.LoadLocation("America/New_York"); err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	total := runSeeds(t, from, seeds, "-run 'TestScheduleSimulation$' -schedsim.seed", func(seed uint64) (map[string]int, error) {
		return runSchedSim(seed, *schedSimDays)
	})
	t.Logf("%d seeds of %d days: %v", seeds, *schedSimDays, total)
}

type schedSim struct {
	*simDisk
}

func runSchedSim(seed uint64, days int) (map[string]int, error) {
	d, err := newSimDisk(seed, 0x5c4ed, Config{}, nil)
	if err != nil {
		return nil, err
	}
	s := &schedSim{d}
	defer s.shutdown()
	created := map[string]state.Time{}
	for _, req := range simSchedules {
		v, _, err := s.c.CreateSchedule(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", req.Name, err)
		}
		created[req.Name] = v.Next
	}
	end := epoch.Add(time.Duration(days) * 24 * time.Hour)
	for s.clk.Now().Before(end) {
		if err := s.step(); err != nil {
			return s.stats, err
		}
	}
	// A last clean pass: everything due is decided.
	s.disk.ClearFaults()
	s.disk.SetFull(false)
	if s.c == nil || s.c.Err() != nil {
		if err := s.restart("crash"); err != nil {
			return s.stats, err
		}
	}
	if err := s.pass(); err != nil {
		return s.stats, fmt.Errorf("the last pass: %w", err)
	}
	live := s.c.Export()
	s.shutdown()
	return s.stats, s.check(created, state.TimeOf(s.clk.Now()), live)
}

// pass decides every due tick, as the Run loop does after a wake-up.
func (s *schedSim) pass() error {
	for {
		n, err := s.c.FireDue(ctx)
		s.stats["records"] += n
		if err != nil || n < MaxDecisionsPerPass {
			return err
		}
	}
}

// step moves the clock, perhaps injects a fault, and runs a pass.
func (s *schedSim) step() error {
	var d time.Duration
	switch r := s.rng.IntN(100); {
	case r < 50:
		d = time.Duration(1+s.rng.IntN(60)) * time.Second
	case r < 90:
		d = time.Duration(1+s.rng.IntN(60)) * time.Minute
	default:
		d = time.Duration(1+s.rng.IntN(48)) * time.Hour
	}
	s.clk.Advance(d + time.Duration(s.rng.IntN(1000))*time.Millisecond)
	cut := false
	switch r := s.rng.IntN(200); {
	case r < 2:
		return s.kill()
	case r < 4:
		return s.powerLoss()
	case r < 6:
		s.stats["fault-down"]++
		s.shutdown()
		s.clk.Advance(time.Duration(1+s.rng.IntN(72*60)) * time.Minute)
		return s.restart("crash")
	case r < 8:
		s.failNext(faultfs.OpSync)
	case r < 9:
		s.failNext(faultfs.OpWrite)
	case r < 11:
		s.cutPower()
		cut = true
	}
	err := s.pass()
	switch {
	case cut:
		// The power goes during the pass or, if it made fewer disk
		// operations, right after it.
		return s.restart("power")
	case err != nil:
		return s.stopped(fmt.Errorf("pass: %w", err))
	}
	s.disk.ClearFaults()
	s.tidy()
	return nil
}

// tidy kills and purges the schedules' tasks now and then, so that a run
// of hundreds of days holds a bounded state: a tick's decision is in its
// record, not in its task.
func (s *schedSim) tidy() {
	if s.c.Stats().Tasks < 20_000 {
		return
	}
	for _, a := range []BulkAction{BulkKill, BulkPurge} {
		if _, err := s.c.Bulk(ctx, BulkRequest{Action: a, Filter: BulkFilter{Queue: "sim"}}); err != nil {
			s.stats["tidy-failed"]++
			return
		}
	}
	s.stats["tidy"]++
}

// check reads the whole durable log and checks every schedule's decisions
// against its expression.
func (s *schedSim) check(created map[string]state.Time, end state.Time, live state.Export) error {
	byName := map[string][]state.Record{}
	st, err := s.replayDisk(nil, func(lsn uint64, r state.Record, st *state.State) error {
		switch r := r.(type) {
		case *state.ScheduleFired:
			byName[r.Name] = append(byName[r.Name], r)
			if t := st.Task(r.TaskID); t == nil || t.RequestID != state.FireRequestID(state.ScheduleKey{Namespace: r.Namespace, Queue: r.Queue, Name: r.Name}, r.Tick) {
				return fmt.Errorf("lsn %d: the task of the fire of %s at %s is not created with its tick's request id", lsn, r.Name, r.Tick)
			}
		case *state.ScheduleSkipped:
			byName[r.Name] = append(byName[r.Name], r)
		case *state.ScheduleHeld, *state.ScheduleUpdated, *state.SchedulePaused, *state.ScheduleResumed, *state.ScheduleDeleted:
			return fmt.Errorf("lsn %d: unexpected %T", lsn, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if got := st.Export(); !reflect.DeepEqual(got, live) {
		return errors.New("replaying the log does not give the live state")
	}
	for _, req := range simSchedules {
		if err := checkDecisions(req, created[req.Name], end, byName[req.Name], s.stats); err != nil {
			return fmt.Errorf("schedule %s: %w", req.Name, err)
		}
	}
	return nil
}

// checkDecisions checks that decisions, in log order, tile the ticks of
// req from first on, past end, by the catch-up rule.
func checkDecisions(req ScheduleRequest, first, end state.Time, decisions []state.Record, stats map[string]int) error {
	cr, err := ParseCron(req.Cron, req.TimeZone)
	if err != nil {
		return err
	}
	window := state.Time(req.CatchUp)
	next := first // the next tick no decision covers yet
	for i, d := range decisions {
		switch d := d.(type) {
		case *state.ScheduleFired:
			switch {
			case d.Tick != next:
				return fmt.Errorf("decision %d fires tick %s, but the next undecided tick is %s (a tick fired twice or skipped silently)", i, d.Tick, next)
			case d.Next != cr.Next(d.Tick):
				return fmt.Errorf("decision %d moves the cursor to %s, not to the tick after %s", i, d.Next, d.Tick)
			case d.At < d.Tick || d.At-d.Tick > window:
				return fmt.Errorf("decision %d fires tick %s at %s, outside its catch-up window of %v", i, d.Tick, d.At, req.CatchUp)
			case d.Outcome != state.Fired:
				return fmt.Errorf("decision %d has outcome %s", i, d.Outcome)
			}
			stats["fired-"+req.Name]++
			next = d.Next
		case *state.ScheduleSkipped:
			switch {
			case d.From != next:
				return fmt.Errorf("decision %d skips from %s, but the next undecided tick is %s", i, d.From, next)
			case d.Reason != state.SkipCatchUp:
				return fmt.Errorf("decision %d skips for %q", i, d.Reason)
			case d.Next != cr.Next(d.At-window-1):
				// Every tick before d.Next is older than the window, and
				// d.Next itself is inside it.
				return fmt.Errorf("decision %d at %s skips up to %s, not up to the first tick inside the window (%s)", i, d.At, d.Next, cr.Next(d.At-window-1))
			case d.Next <= d.From:
				return fmt.Errorf("decision %d skips an empty range", i)
			}
			stats["skipped-ranges-"+req.Name]++
			next = d.Next
		}
	}
	if next <= end {
		return fmt.Errorf("tick %s, before the end %s, was never decided", next, end)
	}
	return nil
}
