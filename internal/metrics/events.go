package metrics

import (
	"github.com/tenurehq/tenure/internal/state"
)

// The per-queue event counters, in the order of eventNames.
const (
	evSubmitted = iota
	evLeased
	evCommitted
	evCompleted
	evFailed
	evLeaseExpired
	evKilled
	evRefusedStale
	evDeadlineExceeded
	evScheduleFired
	evScheduleSkipped
	evSnoozed
	numEvents
)

var eventNames = [numEvents]struct{ name, help string }{
	evSubmitted:        {"tenure_tasks_submitted_total", "Tasks created (TaskCreated records); a deduplicated submit creates none."},
	evLeased:           {"tenure_tasks_leased_total", "Leases granted (LeaseGranted records): attempts started, finalisation leases included."},
	evCommitted:        {"tenure_tasks_committed_total", "Results committed by Commit (TaskCommitted records); a Complete without a Commit counts only as completed."},
	evCompleted:        {"tenure_tasks_completed_total", "Tasks completed (TaskCompleted records)."},
	evFailed:           {"tenure_tasks_failed_total", "Attempts a worker failed (TaskFailed records), whether the task is retried or FAILED."},
	evLeaseExpired:     {"tenure_leases_expired_total", "Leases revoked because they ran out (LeaseExpired records)."},
	evKilled:           {"tenure_tasks_killed_total", "Tasks killed by an operator (TaskDead records)."},
	evRefusedStale:     {"tenure_refused_stale_attempts_total", "Calls (start, heartbeat, commit, complete, fail, snooze) refused because their lease, once the task's, lost its authority: duplicate executions prevented."},
	evDeadlineExceeded: {"tenure_tasks_deadline_exceeded_total", "Tasks failed because their deadline passed before a commit (TaskDeadlineExceeded records)."},
	evScheduleFired:    {"tenure_schedule_fires_total", "Ticks of schedules fired, each submitting a task (ScheduleFired records, backfills included); each also counts in tenure_tasks_submitted_total."},
	evScheduleSkipped:  {"tenure_schedule_skips_total", "Decisions of schedules to skip ticks (ScheduleSkipped records: each covers a range of ticks, for the catch-up window or the overlap policy)."},
	evSnoozed:          {"tenure_tasks_snoozed_total", "Attempts a worker snoozed (TaskSnoozed records): the task waits to run again without using up an attempt."},
}

// newQueueSeries makes the counters of one label pair.
func (m *Metrics) newQueueSeries(namespace, queue string) *queueSeries {
	s := &queueSeries{namespace: namespace, queue: queue}
	for e := range numEvents {
		s.events[e] = m.events[e].WithLabelValues(namespace, queue)
	}
	return s
}

// eventOf returns the counter a record applied counts in. Records that
// count in none (extensions, starts, cancellations, purges, fences, and
// types added later) are ignored.
func eventOf(r state.Record) (int, bool) {
	switch r.(type) {
	case *state.TaskCreated:
		return evSubmitted, true
	case *state.LeaseGranted:
		return evLeased, true
	case *state.TaskCommitted:
		return evCommitted, true
	case *state.TaskCompleted:
		return evCompleted, true
	case *state.TaskFailed:
		return evFailed, true
	case *state.LeaseExpired:
		return evLeaseExpired, true
	case *state.TaskDead:
		return evKilled, true
	case *state.TaskDeadlineExceeded:
		return evDeadlineExceeded, true
	case *state.TaskSnoozed:
		return evSnoozed, true
	}
	return 0, false
}

// Applied implements coordinator.Observer: one record applied while
// serving counts once, in its queue's counter; a Fence is an epoch change,
// a TasksDelivered counts its tasks, a DependencyResolved a remote edge.
func (m *Metrics) Applied(r state.Record, t *state.Task) {
	switch r := r.(type) {
	case *state.Fence:
		m.epochChanges.Inc()
		return
	case *state.TasksDelivered:
		m.tasksDelivered.Add(float64(len(r.TaskIDs)))
		return
	case *state.DependencyResolved:
		m.remoteResolved.Inc()
		return
	case *state.ScheduleFired:
		s := m.queues.series(r.Namespace, r.Queue)
		s.events[evScheduleFired].Inc()
		s.events[evSubmitted].Inc()
		return
	case *state.ScheduleSkipped:
		m.queues.series(r.Namespace, r.Queue).events[evScheduleSkipped].Inc()
		return
	}
	e, ok := eventOf(r)
	if !ok || t == nil {
		return
	}
	m.queues.series(t.Namespace, t.Queue).events[e].Inc()
}

// Refused implements coordinator.Observer: a call by a stale lease
// refused.
func (m *Metrics) Refused(t *state.Task, _ state.Action) {
	m.queues.series(t.Namespace, t.Queue).events[evRefusedStale].Inc()
}
