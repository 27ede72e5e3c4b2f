package metrics

import (
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
)

// Wrote implements wal.Observer: one group-commit write.
func (m *Metrics) Wrote(records int, took time.Duration) {
	m.walAppend.Observe(took.Seconds())
	m.batchRecords.Observe(float64(records))
}

// Synced implements wal.Observer: one fsync of segment data.
func (m *Metrics) Synced(took time.Duration) {
	m.walFsync.Observe(took.Seconds())
}

// Committed implements mysqllog.Observer: one transaction of a
// partition's log.
func (m *Metrics) Committed(records int, took time.Duration) {
	m.dbCommit.Observe(took.Seconds())
	m.batchRecords.Observe(float64(records))
}

// Opened implements host.Observer: a partition serves; its snapshot age
// counts from its first opening until its first snapshot (a reopen after
// a storage failure keeps the age it had).
func (m *Metrics) Opened(h *host.Host, took time.Duration) {
	m.replayDuration.Set(took.Seconds())
	m.snapMu.Lock()
	if _, ok := m.lastSnapshot[h]; !ok {
		m.lastSnapshot[h] = m.clock.Now()
	}
	m.snapMu.Unlock()
}

// Snapshotted implements host.Observer.
func (m *Metrics) Snapshotted(h *host.Host, took time.Duration, at time.Time) {
	m.snapshotDuration.Observe(took.Seconds())
	m.snapMu.Lock()
	m.lastSnapshot[h] = at
	m.snapMu.Unlock()
}

// Purged implements host.Observer: one pass of the retention purge.
func (m *Metrics) Purged(_ *host.Host, res coordinator.PurgeResult) {
	m.purgeDuration.Observe(res.Took.Seconds())
	m.tasksPurged.Add(float64(res.Purged))
}

// Closed implements host.Observer: the partition leaves the snapshot age.
func (m *Metrics) Closed(h *host.Host) {
	m.snapMu.Lock()
	delete(m.lastSnapshot, h)
	m.snapMu.Unlock()
}

// snapshotAge is the age of the oldest last snapshot among the partitions
// served, in seconds (0 if none is served).
func (m *Metrics) snapshotAge() float64 {
	now := m.clock.Now()
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	var age time.Duration
	for _, at := range m.lastSnapshot {
		age = max(age, now.Sub(at))
	}
	return age.Seconds()
}
