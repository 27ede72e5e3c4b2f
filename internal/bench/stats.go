package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Latency summarises recorded durations with exact percentiles. Times are
// in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// summarize sorts ds in place and returns its percentiles. The p-th
// percentile is the smallest recorded value with at least p% of the values
// at or below it (nearest rank), so it is always a value that occurred.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		Count: len(ds),
		P50:   ms(percentile(ds, 50)),
		P90:   ms(percentile(ds, 90)),
		P99:   ms(percentile(ds, 99)),
		Max:   ms(ds[len(ds)-1]),
		Mean:  ms(sum / time.Duration(len(ds))),
	}
}

// percentile returns the nearest-rank p-th percentile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// durations records durations and summarises them: a recorder (exact) or
// a histogram (bounded memory).
type durations interface {
	add(time.Duration)
	summary() Latency
}

// recorder collects durations from many goroutines into a slice allocated
// up front, so recording neither locks nor allocates (and does not disturb
// the memory figures). Values past its capacity are dropped and counted.
type recorder struct {
	ds      []time.Duration
	n       atomic.Int64
	dropped atomic.Int64
}

func newRecorder(capacity int) *recorder {
	return &recorder{ds: make([]time.Duration, capacity)}
}

func (r *recorder) add(d time.Duration) {
	i := r.n.Add(1) - 1
	if i >= int64(len(r.ds)) {
		r.dropped.Add(1)
		return
	}
	r.ds[i] = d
}

// summary returns the percentiles of what was recorded; call it once the
// recording goroutines are done.
func (r *recorder) summary() Latency {
	n := min(r.n.Load(), int64(len(r.ds)))
	return summarize(r.ds[:n])
}

// memSample is the process's memory after a full collection.
type memSample struct {
	rss  uint64 // resident set size (VmRSS)
	heap uint64 // live Go heap
}

// settledMemory collects garbage, returns free pages to the OS and then
// reads the resident size, so that two samples differ by live data rather
// than by the collector's timing.
func settledMemory() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, _ := procStatus("VmRSS")
	return memSample{rss: rss, heap: ms.HeapAlloc}
}

// procStatus reads one "kB" field of /proc/self/status in bytes (Linux
// only; elsewhere it reports false).
func procStatus(field string) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(name) != field {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cpuSample is the process's CPU time so far, and the whole machine's.
type cpuSample struct {
	total     time.Duration // user + system, all threads
	user, sys time.Duration // the two parts of total (getrusage RUSAGE_SELF)
	gc        time.Duration // the runtime's estimate of GC work (mark assists included)
	// machineBusy and machineAll are /proc/stat's busy and total jiffies
	// over all CPUs (0 where it cannot be read).
	machineBusy, machineAll uint64
}

func cpuNow() cpuSample {
	var s cpuSample
	s.machineBusy, s.machineAll = machineJiffies()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.user, s.sys = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
		s.total = s.user + s.sys
	}
	m := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(m)
	if m[0].Value.Kind() == metrics.KindFloat64 {
		s.gc = time.Duration(m[0].Value.Float64() * float64(time.Second))
	}
	return s
}

// minus returns the CPU used from earlier to s.
func (s cpuSample) minus(earlier cpuSample) cpuSample {
	return cpuSample{
		total:       s.total - earlier.total,
		user:        s.user - earlier.user,
		sys:         s.sys - earlier.sys,
		gc:          s.gc - earlier.gc,
		machineBusy: s.machineBusy - earlier.machineBusy,
		machineAll:  s.machineAll - earlier.machineAll,
	}
}

// machineJiffies reads the aggregate "cpu" line of /proc/stat and returns
// the busy jiffies (all but idle and iowait) and the total.
func machineJiffies() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice,
	// which user already includes].
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, 0
		}
		all += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, all
}

// rate is n per second of d, 0 for an empty interval.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(n) / d.Seconds())
}

func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1e3) / 1e3 }

// per100k is d spread over tasks tasks, as seconds per 100,000 tasks,
// rounded to the microsecond (0 for no tasks).
func per100k(d time.Duration, tasks int) float64 {
	if tasks <= 0 {
		return 0
	}
	return math.Round(d.Seconds()*1e5/float64(tasks)*1e6) / 1e6
}

// humanBytes formats a byte count for the text summary.
func humanBytes(b uint64) string {
	switch {
	case b >= 10<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 10<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
