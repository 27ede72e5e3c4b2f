package bench

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func TestTimetableDue(t *testing.T) {
	for _, rate := range []float64{0.5, 3, 7.5, 200, 25_000, 1_000_000} {
		tt := timetable{start: t0, rate: rate}
		for _, d := range []time.Duration{0, 1, time.Millisecond, 333 * time.Millisecond, time.Second, 10 * time.Minute} {
			n := tt.dueAfter(d)
			// The tasks due by d are exactly those with offset <= d.
			if n < 1 || tt.offset(n-1) > d || tt.offset(n) <= d {
				t.Errorf("rate %g: dueAfter(%v) = %d; offsets %v, %v", rate, d, n, tt.offset(n-1), tt.offset(n))
			}
		}
		if got := tt.dueAfter(-time.Nanosecond); got != 0 {
			t.Errorf("rate %g: %d tasks due before the start", rate, got)
		}
	}
	for _, tc := range []struct {
		rate float64
		d    time.Duration
		want int
	}{
		{200, 3 * time.Second, 600},            // 0, 5ms, …, 2.995s
		{25_000, 10 * time.Minute, 15_000_000}, // the 50% run of BENCHMARKS.md
		{3, time.Second, 3},                    // 0, 1/3, 2/3
		{0.5, 3 * time.Second, 2},              // 0, 2s
		{45_000, 10 * time.Minute, 27_000_000}, // the 90% run
		{7.5, 2 * time.Second, 15},             // 0 … 14/7.5 = 1.867s
		{1_000_000, time.Second, 1_000_000},    // one per microsecond
		{0.1, time.Second, 1},                  // only task 0
		{1, 1500 * time.Millisecond, 2},        // 0, 1s
		{1000, time.Millisecond, 1},            // 0 only: 1ms is the next run's
		{1000, time.Millisecond + 1, 2},        // 0 and 1ms
		{1000, 2*time.Millisecond + 1, 3},
		{1e6, time.Microsecond, 1},
		{1e6, time.Microsecond + 1, 2},
		{0.5, 2*time.Second + 1, 2},
		{0.5, 2 * time.Second, 1},
		{40_000, 25 * time.Microsecond, 1}, // 0 only
		{40_000, 25*time.Microsecond + 1, 2},
		{40_000, time.Minute, 2_400_000},
		{12_345.6, time.Second, 12_346}, // 0 … 12345/12345.6 s
	} {
		if got := (timetable{rate: tc.rate}).dueWithin(tc.d); got != tc.want {
			t.Errorf("rate %g for %v: %d tasks, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

// feedRun starts feed on a fake clock and returns the channel of its spans
// and of its result.
func feedRun(tt timetable, clk clock.Clock, tick time.Duration, batch int, keepOn func() bool) (<-chan span, <-chan int) {
	out := make(chan span)
	sent := make(chan int, 1)
	go func() {
		sent <- tt.feed(context.Background(), clk, tick, batch, keepOn, out)
		close(out)
	}()
	return out, sent
}

func recv(t *testing.T, out <-chan span, want span) {
	t.Helper()
	if got := <-out; got != want {
		t.Fatalf("span %v, want %v", got, want)
	}
}

func always() bool { return true }

// TestFeedFollowsTimetable moves a fake clock and checks which tasks go
// out at each check: the due ones, batched, none early, none skipped.
func TestFeedFollowsTimetable(t *testing.T) {
	clk := clock.NewFake(t0)
	// One task per millisecond, checked at least every 5ms, at most 3 per
	// call.
	tt := timetable{start: t0, rate: 1000, total: 12}
	out, sent := feedRun(tt, clk, 5*time.Millisecond, 3, always)
	recv(t, out, span{0, 1}) // due at the start

	// The next task is due in 1ms, but the next check is a tick away.
	clk.WaitForTimers(1)
	clk.Advance(4 * time.Millisecond)
	if clk.Timers() != 1 {
		t.Fatalf("the feed woke before its tick")
	}
	clk.Advance(time.Millisecond)
	recv(t, out, span{1, 4}) // tasks 1..5 are due at 5ms: in calls of 3
	recv(t, out, span{4, 6})

	// Every submitter busy: the feed waits to hand over its next span
	// while the time moves on; then the late tasks go out at once.
	clk.WaitForTimers(1)
	clk.Advance(5 * time.Millisecond) // 10ms: tasks 6..10 due
	clk.Advance(20 * time.Millisecond)
	recv(t, out, span{6, 9}) // computed at 10ms
	recv(t, out, span{9, 12})
	if got := <-sent; got != 12 {
		t.Errorf("feed sent %d tasks, want 12", got)
	}
	if _, open := <-out; open {
		t.Errorf("spans after the last task")
	}
}

// TestFeedSlowRate checks that at a rate below one task per tick each task
// goes out when it is due, not a tick later.
func TestFeedSlowRate(t *testing.T) {
	clk := clock.NewFake(t0)
	tt := timetable{start: t0, rate: 4, total: 3} // 0, 250ms, 500ms
	out, _ := feedRun(tt, clk, time.Millisecond, 100, always)
	recv(t, out, span{0, 1})
	clk.WaitForTimers(1)
	clk.Advance(249 * time.Millisecond)
	clk.Advance(time.Millisecond)
	recv(t, out, span{1, 2})
	clk.WaitForTimers(1)
	clk.Advance(250 * time.Millisecond)
	recv(t, out, span{2, 3})
}

// TestFeedStops checks that the feed stops when keepOn says so, and
// reports how many tasks it sent.
func TestFeedStops(t *testing.T) {
	clk := clock.NewFake(t0)
	tt := timetable{start: t0, rate: 1000, total: 100}
	calls := 0
	out, sent := feedRun(tt, clk, time.Millisecond, 2, func() bool { calls++; return calls <= 2 })
	recv(t, out, span{0, 1})
	clk.WaitForTimers(1)
	clk.Advance(3 * time.Millisecond)
	recv(t, out, span{1, 3})
	if got := <-sent; got != 3 {
		t.Errorf("feed sent %d tasks, want 3", got)
	}
}

// TestOpenLoopRecord checks that submissions count in the window their
// call started in, with their lag from when they were due; completions in
// the window of their acknowledgement (the last one holding the drain),
// with their latency from when they were due.
func TestOpenLoopRecord(t *testing.T) {
	o := newOpenLoop(Config{Duration: 3 * time.Second, Window: time.Second, Rate: 10, Tasks: 30, MaxBacklog: time.Second})
	o.tt.start = t0
	if len(o.windows) != 3 || len(o.samples) != 4 || o.maxBacklog != 10 {
		t.Fatalf("%d windows, %d samples, backlog %d; want 3, 4, 10", len(o.windows), len(o.samples), o.maxBacklog)
	}
	// Tasks 0..4 are due at 0..400ms; their call starts at 405ms: tasks
	// 0..3 are more than 10ms late.
	o.submitted(span{0, 5}, t0.Add(405*time.Millisecond), 2*time.Millisecond)
	// Tasks 10..11 (due at 1s, 1.1s) go out at 1.1s: task 10 is late.
	o.submitted(span{10, 12}, t0.Add(1100*time.Millisecond), 3*time.Millisecond)
	lts := func(ns ...int) []client.LeasedTask {
		var l []client.LeasedTask
		for _, n := range ns {
			p := make([]byte, 16)
			markTask(p, n)
			l = append(l, client.LeasedTask{ID: "t", Payload: p})
		}
		return l
	}
	if err := o.completed(lts(0, 4), t0.Add(900*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := o.completed(lts(10), t0.Add(5*time.Second)); err != nil { // the drain
		t.Fatal(err)
	}
	w0, w1, w2 := &o.windows[0], &o.windows[1], &o.windows[2]
	if w0.submitted.Load() != 5 || w0.behind.Load() != 4 || w1.submitted.Load() != 2 || w1.behind.Load() != 1 {
		t.Errorf("submitted %d (%d behind), %d (%d behind); want 5 (4), 2 (1)", w0.submitted.Load(), w0.behind.Load(), w1.submitted.Load(), w1.behind.Load())
	}
	if l := w0.submitLag.summary(); l.Count != 5 || l.Max != 405 || l.Mean != 205 {
		t.Errorf("window 0 lag %+v; want 5 tasks, max 405ms, mean 205ms", l)
	}
	if l := w0.latency.summary(); l.Count != 2 || l.Max != 900 || !near(l.P50, 500) {
		t.Errorf("window 0 latency %+v; want 900ms and 500ms", l)
	}
	if w2.completed.Load() != 1 || w2.latency.summary().Max != 4000 {
		t.Errorf("drain: window 2 completed %d, latency %+v; want 1 task of 4000ms", w2.completed.Load(), w2.latency.summary())
	}
	if err := o.completed([]client.LeasedTask{{ID: "x", Payload: []byte("short")}}, t0); err == nil || !strings.Contains(err.Error(), "task x") {
		t.Errorf("a task without a number: %v", err)
	}
	if err := o.completed(lts(30), t0); err == nil {
		t.Errorf("a task number past the timetable was accepted")
	}
}

// TestOpenLoopResult checks the aggregation into windows, from synthetic
// records and samples.
func TestOpenLoopResult(t *testing.T) {
	o := newOpenLoop(Config{Duration: 2 * time.Minute, Window: time.Minute, Rate: 100, Tasks: 12_000, MaxBacklog: 30 * time.Second})
	o.tt.start = t0
	for i := range 6000 {
		o.windows[0].latency.add(time.Duration(i%100+1) * time.Millisecond)
	}
	o.windows[0].completed.Store(6000)
	o.windows[0].submitted.Store(6000)
	o.windows[1].completed.Store(6000)
	o.windows[1].latency.add(2 * time.Second)
	o.windows[1].behind.Store(7)
	o.windows[1].submitCall.add(3 * time.Millisecond)
	u := func(v uint64) *uint64 { return &v }
	o.samples[0] = sample{at: t0, rss: 10 << 20, heapLive: 5 << 20, wal: u(0), snapshots: u(0), cpu: cpuSample{total: time.Second}}
	o.samples[1] = sample{at: t0.Add(time.Minute), rss: 20 << 20, heapLive: 6 << 20, wal: u(64 << 20), snapshots: u(1 << 20), cpu: cpuSample{total: 4 * time.Second}}
	o.samples[2] = sample{at: t0.Add(2*time.Minute + 500*time.Millisecond), rss: 21 << 20, heapLive: 6 << 20, wal: u(64 << 20), snapshots: u(2 << 20), cpu: cpuSample{total: 13 * time.Second}}

	res := o.result(time.Millisecond, memoryScopeProcess)
	if res.Due != 12_000 || res.BehindSchedule != 7 || res.DrainSeconds != 0.5 || res.StoppedAtSeconds != nil || res.TickMs != 1 || res.WindowSeconds != 60 {
		t.Errorf("result %+v", res)
	}
	if res.Latency.Count != 6001 || res.Latency.Max != 2000 {
		t.Errorf("whole-run latency %+v; want 6001 tasks, max 2000ms", res.Latency)
	}
	if res.SubmitCall.Count != 1 || res.SubmitCall.Max != 3 {
		t.Errorf("whole-run submit calls %+v; want one of 3ms", res.SubmitCall)
	}
	if len(res.Windows) != 2 {
		t.Fatalf("%d windows, want 2", len(res.Windows))
	}
	w0, w1 := res.Windows[0], res.Windows[1]
	if w0.StartSeconds != 0 || w0.EndSeconds != 60 || w0.Completed != 6000 || w0.CompletedPerSec != 100 || w0.CPUSeconds != 3 || w0.CPUPer100kTasks != 50 {
		t.Errorf("window 0 %+v", w0)
	}
	if !near(w0.Latency.P50, 50) || !near(w0.Latency.P99, 99) || w0.Latency.Max != 100 {
		t.Errorf("window 0 latency %+v; want p50 50, p99 99, max 100 ms", w0.Latency)
	}
	// The last window ends with the run, its drain included.
	if w1.StartSeconds != 60 || w1.EndSeconds != 120.5 || w1.CompletedPerSec != 99 || w1.CPUSeconds != 9 || w1.CPUPer100kTasks != 150 {
		t.Errorf("window 1 %+v", w1)
	}
	if w0.End.RSSBytes != 20<<20 || *w0.End.WALBytes != 64<<20 || *w1.End.SnapshotBytes != 2<<20 || w1.End.AtSeconds != 120.5 || w1.End.ServerRSSBytes != nil {
		t.Errorf("samples %+v, %+v", w0.End, w1.End)
	}
	if res.Start.RSSBytes != 10<<20 || res.Start.AtSeconds != 0 {
		t.Errorf("start sample %+v", res.Start)
	}

	o.stoppedAt = t0.Add(2 * time.Minute)
	if res := o.result(time.Millisecond, memoryScopeProcess); res.StoppedAtSeconds == nil || *res.StoppedAtSeconds != 120 || res.DrainSeconds != 0.5 {
		t.Errorf("stopped run: stopped at %v, drain %v; want 120s, 0.5s", res.StoppedAtSeconds, res.DrainSeconds)
	}
}

// near reports whether a histogram's percentile got is the value want or
// at most a bucket's width (1/64) above it, as the histogram promises.
func near(got, want float64) bool { return got >= want && got <= want*(1+1.0/histSub)+0.001 }

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.234567168e+08
tenure_wal_bytes_other 5
tenure_wal_bytes 6.7108864e+07
`
	rss, wal := parseMetrics(bufio.NewScanner(strings.NewReader(text)))
	if rss == nil || *rss != 123456716 || wal == nil || *wal != 64<<20 {
		t.Errorf("rss %v, wal %v", rss, wal)
	}
	rss, wal = parseMetrics(bufio.NewScanner(strings.NewReader("go_goroutines 5\n")))
	if rss != nil || wal != nil {
		t.Errorf("figures from a server that has none: %v, %v", rss, wal)
	}
}
