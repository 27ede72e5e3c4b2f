package metrics

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/state"
)

// Other is the namespace and queue label value of every queue past
// Config.MaxQueues.
const Other = "_other"

// queueSeries is one (namespace, queue) label pair with its event counters,
// cached so that an event does not look them up in the vectors.
type queueSeries struct {
	namespace, queue string
	events           [numEvents]prometheus.Counter
}

// queueLabels assigns label pairs to queues: the first max distinct
// queues seen get their own, every later one shares other's. Lookups of
// a queue seen before, or of any queue once the own labels ran out, take
// no lock.
type queueLabels struct {
	max       int
	own       cache[state.QueueKey, *queueSeries]
	full      atomic.Bool  // own holds max queues; other is set
	other     *queueSeries // made with the first queue folded (under own.mu)
	newSeries func(namespace, queue string) *queueSeries
}

func newQueueLabels(max int, newSeries func(namespace, queue string) *queueSeries) *queueLabels {
	return &queueLabels{max: max, newSeries: newSeries}
}

// series returns the label pair (and counters) of the queue.
func (q *queueLabels) series(namespace, queue string) *queueSeries {
	k := state.QueueKey{Namespace: namespace, Queue: queue}
	if s, ok := q.own.load(k); ok {
		return s
	}
	if q.full.Load() {
		return q.other
	}
	q.own.mu.Lock()
	defer q.own.mu.Unlock()
	if s, ok := q.own.load(k); ok {
		return s
	}
	if q.own.lenLocked() >= q.max {
		if q.other == nil {
			q.other = q.newSeries(Other, Other)
		}
		q.full.Store(true)
		return q.other
	}
	s := q.newSeries(namespace, queue)
	q.own.storeLocked(k, s)
	return s
}

// QueueSample is what the per-queue gauges report of one queue (or of its
// part in one partition: samples of the same queue are summed).
type QueueSample struct {
	Namespace, Queue string
	// Tasks counts the queue's tasks by state name (state.TaskState's
	// String: WAITING, LEASED, ...). Every known state is reported, 0 if
	// missing here.
	Tasks map[string]int
	// OldestWaitingAge is how long the oldest WAITING task that may run
	// now has waited (0 if none).
	OldestWaitingAge time.Duration
	// Leases counts the queue's current leases.
	Leases int
	// Paused reports whether the queue is paused.
	Paused bool
	// MaxConcurrency and Rate (leases per second) are the queue's flow
	// control here: its share of each limit in this partition (0: none).
	MaxConcurrency int
	Rate           float64
	// Keyed says the queue has keys or key limits (docs/design/keys.md):
	// Keys counts its keys with an unfinished task, KeysHeld those a key
	// limit holds back now and KeyHolds each time one was held back, by
	// limit (state.KeyHold's String: concurrency, rate, order). There is
	// no label per key.
	Keyed    bool
	Keys     int
	KeysHeld map[string]int
	KeyHolds map[string]uint64
}

// keyHolds are the reason label values of the key gauges and counters.
var keyHolds = func() []string {
	var out []string
	for h := state.HoldNone + 1; h < state.NumKeyHolds; h++ {
		out = append(out, h.String())
	}
	return out
}()

// taskStates are the state label values always reported.
var taskStates = func() []string {
	var out []string
	for s := state.Waiting; s < state.NumStates; s++ {
		out = append(out, s.String())
	}
	return out
}()

// queueCollector reports the per-queue gauges from a source read at each
// scrape, folding queues past the limit into _other: there tasks, leases
// and limits are summed, the oldest waiting age is the largest and paused
// counts the paused queues.
type queueCollector struct {
	queues *queueLabels
	source func() []QueueSample
}

var (
	tasksDesc = queueDesc("tenure_tasks",
		"Tasks this node holds, by queue and state (in cluster mode, of the partitions it serves: sum over the nodes).", "state")
	oldestDesc = queueDesc("tenure_queue_oldest_waiting_age_seconds",
		"How long the oldest task of the queue that may run now has waited for a lease (largest of the queues in _other).")
	leasesDesc = queueDesc("tenure_queue_active_leases",
		"Current leases of the queue's tasks.")
	pausedDesc = queueDesc("tenure_queue_paused",
		"1 if the queue is paused, else 0 (for _other: how many of its queues are paused).")
	maxConcurrencyDesc = queueDesc("tenure_queue_max_concurrency",
		"The queue's max concurrency in the partitions this node serves: their shares, which sum over the nodes to the limit (0: none).")
	rateDesc = queueDesc("tenure_queue_rate_limit",
		"The queue's rate limit in leases per second in the partitions this node serves: their shares, which sum over the nodes to the limit (0: none).")
	keysDesc = queueDesc("tenure_queue_keys",
		"Keys of the queue with an unfinished task (in cluster mode, in the partitions this node serves: sum over the nodes). Only for a queue with keys or key limits.")
	keysHeldDesc = queueDesc("tenure_queue_keys_held",
		"Keys of the queue with waiting tasks that a key limit holds back now, by limit: concurrency, rate or order.", "reason")
	keyHoldsDesc = queueDesc("tenure_queue_key_holds_total",
		"Times a key of the queue with waiting tasks was held back by a key limit, by limit: concurrency, rate or order (counted since the node began to serve the partition).", "reason")
)

// queueDesc describes a metric of a queue: labelled by its namespace and
// name, and by more.
func queueDesc(name, help string, more ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append([]string{"namespace", "queue"}, more...), nil)
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- oldestDesc
	ch <- leasesDesc
	ch <- pausedDesc
	ch <- maxConcurrencyDesc
	ch <- rateDesc
	ch <- keysDesc
	ch <- keysHeldDesc
	ch <- keyHoldsDesc
}

// queueTotals sums samples: the partitions of one queue, then the queues
// of one label pair.
type queueTotals struct {
	tasks   map[string]int
	oldest  time.Duration
	leases  int
	paused  int
	maxConc int
	rate    float64
	// keyed: some queue summed has keys; keys, held and holds sum.
	keyed bool
	keys  int
	held  map[string]int
	holds map[string]uint64
}

// addKeys adds the key figures of a sample or a queue.
func (t *queueTotals) addKeys(keyed bool, keys int, held map[string]int, holds map[string]uint64) {
	if !keyed {
		return
	}
	if !t.keyed {
		t.keyed, t.held, t.holds = true, map[string]int{}, map[string]uint64{}
	}
	t.keys += keys
	for r, n := range held {
		t.held[r] += n
	}
	for r, n := range holds {
		t.holds[r] += n
	}
}

// add adds the figures of a sample or a queue: tasks, leases, paused
// queues and limits sum, the oldest age is the largest.
func (t *queueTotals) add(tasks map[string]int, oldest time.Duration, leases, paused, maxConc int, rate float64) {
	for name, n := range tasks {
		t.tasks[name] += n
	}
	t.oldest = max(t.oldest, oldest)
	t.leases += leases
	t.paused += paused
	t.maxConc += maxConc
	t.rate += rate
}

// totals returns the totals of k in m, adding them (and k to order) if new.
func totals(m map[state.QueueKey]*queueTotals, order *[]state.QueueKey, k state.QueueKey) *queueTotals {
	t := m[k]
	if t == nil {
		t = &queueTotals{tasks: make(map[string]int, len(taskStates))}
		m[k] = t
		*order = append(*order, k)
	}
	return t
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	var queues []state.QueueKey
	byQueue := make(map[state.QueueKey]*queueTotals)
	for _, smp := range c.source() {
		t := totals(byQueue, &queues, state.QueueKey{Namespace: smp.Namespace, Queue: smp.Queue})
		t.add(smp.Tasks, smp.OldestWaitingAge, smp.Leases, 0, smp.MaxConcurrency, smp.Rate)
		t.addKeys(smp.Keyed, smp.Keys, smp.KeysHeld, smp.KeyHolds)
		if smp.Paused {
			t.paused = 1
		}
	}
	// By label values, not by series: a queue really named _other in
	// namespace _other shares its labels with the folded ones.
	var pairs []state.QueueKey
	byLabels := make(map[state.QueueKey]*queueTotals)
	for _, k := range queues {
		s := c.queues.series(k.Namespace, k.Queue)
		q := byQueue[k]
		lt := totals(byLabels, &pairs, state.QueueKey{Namespace: s.namespace, Queue: s.queue})
		lt.add(q.tasks, q.oldest, q.leases, q.paused, q.maxConc, q.rate)
		lt.addKeys(q.keyed, q.keys, q.held, q.holds)
	}
	for _, k := range pairs {
		t := byLabels[k]
		ns, q := k.Namespace, k.Queue
		for _, name := range taskStates {
			ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(t.tasks[name]), ns, q, name)
		}
		var extra []string
		for name := range t.tasks {
			if !slices.Contains(taskStates, name) {
				extra = append(extra, name)
			}
		}
		slices.Sort(extra)
		for _, name := range extra {
			ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(t.tasks[name]), ns, q, name)
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, t.oldest.Seconds(), ns, q)
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(t.leases), ns, q)
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, float64(t.paused), ns, q)
		ch <- prometheus.MustNewConstMetric(maxConcurrencyDesc, prometheus.GaugeValue, float64(t.maxConc), ns, q)
		ch <- prometheus.MustNewConstMetric(rateDesc, prometheus.GaugeValue, t.rate, ns, q)
		if t.keyed {
			ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(t.keys), ns, q)
			for _, r := range keyHolds {
				ch <- prometheus.MustNewConstMetric(keysHeldDesc, prometheus.GaugeValue, float64(t.held[r]), ns, q, r)
				ch <- prometheus.MustNewConstMetric(keyHoldsDesc, prometheus.CounterValue, float64(t.holds[r]), ns, q, r)
			}
		}
	}
}

// scrapeTimeout bounds how long a scrape waits for a coordinator's queue
// statistics (the read waits until what it saw is durable).
const scrapeTimeout = 5 * time.Second

// watchQueues feeds the per-queue gauges from the queue statistics of the
// coordinators cs returns at each scrape (kept as records apply: no scan of
// tasks), unless Config.Queues feeds them.
func (m *Metrics) watchQueues(cs func() []*coordinator.Coordinator) {
	if m.queuesSet {
		return
	}
	m.queuesSet = true
	m.reg.MustRegister(&queueCollector{queues: m.queues, source: func() []QueueSample {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		defer cancel()
		var out []QueueSample
		for _, c := range cs() {
			qs, err := c.Queues(ctx, "", "")
			if err != nil {
				continue // a partition that stopped serving: another node reports it
			}
			for i := range qs {
				out = append(out, sampleOf(&qs[i]))
			}
		}
		return out
	}})
}

// sampleOf is the sample of one partition's statistics of a queue.
func sampleOf(q *state.QueueStats) QueueSample {
	s := QueueSample{Namespace: q.Key.Namespace, Queue: q.Key.Queue, Tasks: make(map[string]int, len(q.Tasks)),
		Leases: q.Leases, Paused: q.Paused != nil}
	for st := state.Waiting; st < state.NumStates; st++ {
		s.Tasks[st.String()] = q.Tasks[st]
	}
	if q.OldestDue != 0 {
		s.OldestWaitingAge = q.Now.Std().Sub(q.OldestDue.Std())
	}
	if l := q.Limits; l != nil {
		s.MaxConcurrency, s.Rate = int(l.MaxConcurrency), float64(l.RateMilli)/1000
	}
	if k := q.Keys; k != nil {
		s.Keyed, s.Keys = true, k.Keys
		s.KeysHeld, s.KeyHolds = make(map[string]int, len(keyHolds)), make(map[string]uint64, len(keyHolds))
		for h := state.HoldNone + 1; h < state.NumKeyHolds; h++ {
			s.KeysHeld[h.String()], s.KeyHolds[h.String()] = k.Held[h], k.Holds[h]
		}
	}
	return s
}
