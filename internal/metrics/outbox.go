package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// OutboxReport is what a relay of a transactional outbox reports of its
// outbox (docs/design/outbox.md): package outbox's Stats, without this
// package depending on it.
type OutboxReport struct {
	// Name is the outbox's name in the log.
	Name string
	// Rows and FailedRows are the rows of the outbox and of its failed
	// table, OldestAge the age of the oldest row, when last measured.
	Rows, FailedRows int64
	OldestAge        time.Duration
	// Relayed counts the rows the relay submitted and deleted, MovedAside
	// those it moved to the failed table, since it started.
	Relayed, MovedAside uint64
}

var (
	outboxRowsDesc = prometheus.NewDesc("tenure_outbox_rows",
		"Rows waiting in a transactional outbox's table, as its relay last counted them.", []string{"outbox"}, nil)
	outboxAgeDesc = prometheus.NewDesc("tenure_outbox_oldest_row_age_seconds",
		"Age of the oldest row of a transactional outbox's table (0: none), as its relay last measured it.", []string{"outbox"}, nil)
	outboxFailedRowsDesc = prometheus.NewDesc("tenure_outbox_failed_rows",
		"Rows in a transactional outbox's failed table: rows the server refused, kept with the reason.", []string{"outbox"}, nil)
	outboxRelayedDesc = prometheus.NewDesc("tenure_outbox_relayed_total",
		"Rows of a transactional outbox the relay submitted and deleted (the drain rate is its rate()).", []string{"outbox"}, nil)
	outboxMovedDesc = prometheus.NewDesc("tenure_outbox_moved_aside_total",
		"Rows of a transactional outbox the relay moved to the failed table.", []string{"outbox"}, nil)
)

// outboxCollector reads the reports of the relays a process runs at each
// scrape.
type outboxCollector struct{ source func() []OutboxReport }

// NewOutboxCollector returns the collector of the outbox metrics of
// source, for a registry of a relay that runs alone (tenure outbox
// relay); a server registers it with WatchOutboxes.
func NewOutboxCollector(source func() []OutboxReport) prometheus.Collector {
	return outboxCollector{source}
}

// WatchOutboxes registers the metrics of the relays the server runs
// (tenure server --outbox-postgres, --outbox-mysql).
func (m *Metrics) WatchOutboxes(source func() []OutboxReport) {
	m.reg.MustRegister(NewOutboxCollector(source))
}

func (outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{outboxRowsDesc, outboxAgeDesc, outboxFailedRowsDesc, outboxRelayedDesc, outboxMovedDesc} {
		ch <- d
	}
}

func (c outboxCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.source() {
		ch <- prometheus.MustNewConstMetric(outboxRowsDesc, prometheus.GaugeValue, float64(r.Rows), r.Name)
		ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, r.OldestAge.Seconds(), r.Name)
		ch <- prometheus.MustNewConstMetric(outboxFailedRowsDesc, prometheus.GaugeValue, float64(r.FailedRows), r.Name)
		ch <- prometheus.MustNewConstMetric(outboxRelayedDesc, prometheus.CounterValue, float64(r.Relayed), r.Name)
		ch <- prometheus.MustNewConstMetric(outboxMovedDesc, prometheus.CounterValue, float64(r.MovedAside), r.Name)
	}
}
