package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/sdk/client"
)

// behindAfter is how late a task's submit call may start, after the task
// was due, and still count as on schedule: a tick plus the timer and
// scheduling slack of a busy machine.
const behindAfter = 10 * time.Millisecond

// scrapeTimeout bounds one read of a remote server's /metrics.
const scrapeTimeout = 2 * time.Second

// timetable is an open-loop run's schedule: task i is due i/rate seconds
// after start, for i < total.
type timetable struct {
	start time.Time
	rate  float64
	total int
}

// offset is how long after the start task i is due.
func (t timetable) offset(i int) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / t.rate)
}

// at is when task i is due.
func (t timetable) at(i int) time.Time { return t.start.Add(t.offset(i)) }

// dueAfter is the number of tasks due at most d after the start, ignoring
// total: the smallest n with offset(n) > d.
func (t timetable) dueAfter(d time.Duration) int {
	if d < 0 {
		return 0
	}
	n := int(float64(d)*t.rate/float64(time.Second)) + 1
	for n > 0 && t.offset(n-1) > d {
		n--
	}
	for t.offset(n) <= d {
		n++
	}
	return n
}

// dueWithin is the number of tasks due less than d after the start: the
// tasks of a run of duration d.
func (t timetable) dueWithin(d time.Duration) int { return t.dueAfter(d - 1) }

// dueBy is the number of tasks due at or before now.
func (t timetable) dueBy(now time.Time) int { return min(t.dueAfter(now.Sub(t.start)), t.total) }

// span is the tasks lo..hi-1, submitted in one call.
type span struct{ lo, hi int }

// feed sends the timetable's tasks on out as they fall due, in spans of at
// most batch. It checks the timetable when the next task is due, or a tick
// after its last check if that is later, and sends every task due by then.
// It skips nothing and never waits for a late task's time: while out
// blocks (every submitter busy), the tasks that fall due go out in the
// next spans, late, which the submitters count. It returns the number of
// tasks sent: all of them, or fewer if ctx ended or keepOn, asked before
// each span, said to stop.
func (t timetable) feed(ctx context.Context, clk clock.Clock, tick time.Duration, batch int, keepOn func() bool, out chan<- span) int {
	next := 0
	for next < t.total {
		now := clk.Now()
		if due := t.dueBy(now); due > next {
			if !keepOn() {
				return next
			}
			hi := min(next+batch, due)
			select {
			case out <- span{next, hi}:
			case <-ctx.Done():
				return next
			}
			next = hi
			continue
		}
		if clock.Sleep(ctx, clk, max(t.at(next).Sub(now), tick)) != nil {
			return next
		}
	}
	return next
}

// windowCount is the number of windows of length w in a run of d.
func windowCount(d, w time.Duration) int { return int((d + w - 1) / w) }

// openLoop is what an open-loop run records: its timetable and, for each
// window, the durations and counts of the calls that started (submits) or
// were acknowledged (completions) in it, and the samples at its ends.
type openLoop struct {
	tt         timetable
	duration   time.Duration
	window     time.Duration
	maxBacklog int64
	// stoppedAt is when the timetable was stopped for the backlog (zero:
	// it ran to its end); then the windows after the run's end are cut.
	stoppedAt time.Time
	windows   []windowRecord
	// samples[0] is taken at the start, samples[k+1] at the end of window
	// k (the last one when the run ends).
	samples []sample
}

// windowRecord is what one window recorded.
type windowRecord struct {
	// latency is, per task completed in the window, the time from when it
	// was due to its acknowledged completion; submitLag, per task
	// submitted, from when it was due to the start of its submit call.
	latency, submitLag, submitCall histogram
	submitted, behind, completed   atomic.Int64
}

// newOpenLoop returns the record of cfg's open-loop run (its timetable
// starts when the run does).
func newOpenLoop(cfg Config) *openLoop {
	n := windowCount(cfg.Duration, cfg.Window)
	return &openLoop{
		tt:         timetable{rate: cfg.Rate, total: cfg.Tasks},
		duration:   cfg.Duration,
		window:     cfg.Window,
		maxBacklog: max(int64(cfg.MaxBacklog.Seconds()*cfg.Rate), 1),
		windows:    make([]windowRecord, n),
		samples:    make([]sample, n+1),
	}
}

// windowOf is the window that time t falls in: the last one for any time
// after it began, so that it holds the drain.
func (o *openLoop) windowOf(t time.Time) *windowRecord {
	k := int(t.Sub(o.tt.start) / o.window)
	return &o.windows[min(max(k, 0), len(o.windows)-1)]
}

// submitted records the call that submitted sp: it started at start and
// took d.
func (o *openLoop) submitted(sp span, start time.Time, d time.Duration) {
	w := o.windowOf(start)
	behind := 0
	for i := sp.lo; i < sp.hi; i++ {
		lag := start.Sub(o.tt.at(i))
		w.submitLag.add(lag)
		if lag > behindAfter {
			behind++
		}
	}
	w.submitCall.add(d)
	w.submitted.Add(int64(sp.hi - sp.lo))
	w.behind.Add(int64(behind))
}

// completed records the tasks lts, whose completion was acknowledged at
// ack. It fails on a task that does not carry a number of the timetable.
func (o *openLoop) completed(lts []client.LeasedTask, ack time.Time) error {
	w := o.windowOf(ack)
	for i := range lts {
		n, ok := taskNumber(lts[i].Payload)
		if !ok || n >= uint64(o.tt.total) {
			return fmt.Errorf("task %s does not carry a task number of this run in its payload", lts[i].ID)
		}
		w.latency.add(ack.Sub(o.tt.at(int(n))))
	}
	w.completed.Add(int64(len(lts)))
	return nil
}

// markTask writes task number i into the first bytes of payload p, which
// has at least minOpenLoopPayload bytes.
func markTask(p []byte, i int) { binary.LittleEndian.PutUint64(p, uint64(i)) }

// taskNumber reads the number markTask wrote.
func taskNumber(p []byte) (uint64, bool) {
	if len(p) < minOpenLoopPayload {
		return 0, false
	}
	return binary.LittleEndian.Uint64(p), true
}

// sample is the process's (and where known the server's) memory and disk
// at one moment of an open-loop run.
type sample struct {
	at       time.Time
	rss      uint64
	heapLive uint64
	// wal and snapshots are the embedded node's bytes on disk; wal and
	// serverRSS a remote server's, from its /metrics. Nil where unknown.
	wal, snapshots, serverRSS *uint64
	cpu                       cpuSample
}

// takeSample reads the figures of a sample: it does not collect garbage,
// so the heap is the live heap as of the last collection.
func (r *runner) takeSample(ctx context.Context) sample {
	s := sample{at: now(), cpu: cpuNow(), heapLive: heapLive()}
	s.rss, _ = procStatus("VmRSS")
	switch {
	case r.tg.node != nil:
		wal := uint64(r.tg.node.WALDisk().Bytes)
		s.wal = &wal
		// No directory yet: no snapshot yet.
		if snaps, err := dirBytes(filepath.Join(r.tg.dataDir, node.SnapshotDir)); err == nil || errors.Is(err, fs.ErrNotExist) {
			s.snapshots = &snaps
		}
	case r.cfg.Addr != "":
		s.serverRSS, s.wal = r.scrape(ctx)
	}
	return s
}

// heapLive is the Go heap marked live by the last garbage collection.
func heapLive() uint64 {
	m := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return m[0].Value.Uint64()
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile (an old snapshot)
		}
		n += uint64(info.Size())
		return nil
	})
	return n, err
}

// scrape reads the resident memory and the WAL's bytes on disk from the
// first node's GET /metrics; each is nil if the server does not say (or
// cannot be reached).
func (r *runner) scrape(ctx context.Context) (rss, wal *uint64) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.tg.urls[0]+"/metrics", nil)
	if err != nil {
		return nil, nil
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	resp, err := r.scrapeClient.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

// parseMetrics finds process_resident_memory_bytes and tenure_wal_bytes in
// a Prometheus text exposition.
func parseMetrics(sc *bufio.Scanner) (rss, wal *uint64) {
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst **uint64
		switch name {
		case "process_resident_memory_bytes":
			dst = &rss
		case "tenure_wal_bytes":
			dst = &wal
		default:
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && v >= 0 {
			u := uint64(v)
			*dst = &u
		}
	}
	return rss, wal
}

// openLoopRun runs cfg's open-loop workload: it submits on the timetable
// for the run's duration while the workers work, samples every window's
// end, and returns when every task submitted is completed (or the run
// failed).
func (r *runner) openLoopRun(ctx context.Context, start time.Time, m *measurement) {
	o := r.ol
	o.tt.start = start
	o.samples[0] = r.takeSample(ctx)
	ended := make(chan struct{})
	var samplers sync.WaitGroup
	samplers.Go(func() {
		for k := 1; k < len(o.windows); k++ {
			t := clock.Real.NewTimer(start.Add(time.Duration(k) * o.window).Sub(now()))
			select {
			case <-t.C():
			case <-ended:
				t.Stop()
				return
			}
			o.samples[k] = r.takeSample(ctx)
		}
	})
	r.concurrent(ctx, start, m) // r.submit keeps the timetable
	close(ended)
	samplers.Wait()
	// Keep the windows the run reached (all, unless it stopped early), and
	// take a sample the sampler was too late for now.
	end := now()
	reached := min(max(windowCount(end.Sub(start), o.window), 1), len(o.windows))
	o.windows, o.samples = o.windows[:reached], o.samples[:reached+1]
	for k := 1; k < reached; k++ {
		if o.samples[k].at.IsZero() {
			o.samples[k] = r.takeSample(ctx)
		}
	}
	o.samples[reached] = r.takeSample(ctx)
}

// submitOpen submits the timetable's tasks as they fall due, from
// cfg.Submitters goroutines sharing one client, and returns once the
// run's duration is over and every submit call returned. If the backlog
// (submitted, not completed) grows past its limit, it stops submitting,
// records when, and returns at once.
func (r *runner) submitOpen(ctx context.Context) {
	c, err := r.newClient(nil)
	if err != nil {
		r.fail(err)
		return
	}
	o := r.ol
	spans := make(chan span)
	var wg sync.WaitGroup
	for range r.cfg.Submitters {
		wg.Go(func() {
			b := r.newBatcher()
			for sp := range spans {
				start, d, ok := b.submit(ctx, c, sp.lo, sp.hi)
				if !ok {
					return
				}
				o.submitted(sp, start, d)
			}
		})
	}
	keepOn := func() bool { return r.submitted.Load()-r.completed.Load() <= o.maxBacklog }
	sent := o.tt.feed(ctx, clock.Real, r.cfg.Tick, r.cfg.Batch, keepOn, spans)
	close(spans)
	wg.Wait()
	if sent < o.tt.total && ctx.Err() == nil {
		o.stoppedAt = now()
		r.lowerGoal(int64(sent))
		return
	}
	sleep(ctx, o.tt.start.Add(o.duration).Sub(now()))
}
