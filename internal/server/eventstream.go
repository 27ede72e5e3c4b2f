package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// eventWriter runs one stream: it reads batches of records, turns those the
// filter selects into events and sends them.
type eventWriter struct {
	s     *Server
	f     eventFilter
	st    *events.Stream
	out   *connect.ServerStream[tenurev1.WatchEventsResponse]
	rc    *http.ResponseController
	feeds map[uint64]*events.Feed

	pos   events.Cursor // the position after the last record passed
	items []eventItem
	bytes int
	// placed are the tasks the batch's records create, where they are,
	// by partition: the feeds learn them once per batch.
	placed map[uint64][]events.Placed
}

// eventItem is one record of the batch whose type the filter selects,
// before what it concerns is known.
type eventItem struct {
	ev *tenurev1.Event
	// deleted: the tasks a TasksDeleted names. created: the tasks a
	// record creates beside its own (TasksSubmitted's, a commit's
	// spawns), as the event holds them.
	deleted []string
	created *[]*tenurev1.TaskCreatedEvent
	// workflow is the workflow the event concerns ("" for none): the
	// record's (TasksSubmitted, WorkflowCancelled, WorkflowRetried), else
	// its task's, once placed. createdIn is the workflow of the tasks in
	// created: the record's, or for a spawn its parent's.
	workflow, createdIn string
}

// creates reports whether the event's record creates tasks beside its own
// (whose workflow, createdIn, is its task's too).
func (it *eventItem) creates() bool { return it.created != nil && len(*it.created) > 0 }

// errBatchFull stops a batch before the record that would pass its bytes.
var errBatchFull = errors.New("batch full")

func (w *eventWriter) run(ctx context.Context) error {
	clk := w.s.opts.Clock
	keepalive := min(eventKeepalive, w.s.opts.Load.WriteTimeout/4)
	w.pos = w.st.Cursor()
	if err := w.send(&tenurev1.WatchEventsResponse{Cursor: w.pos.String()}); err != nil {
		return err
	}
	lastSend, lastScan := clk.Now(), clk.Now()
	poll, passed := eventPollMin, false
	for {
		n, caughtUp, err := w.batch(ctx)
		if err != nil {
			return w.s.eventError(err)
		}
		passed = passed || n > 0
		evs, err := w.events(ctx)
		if err != nil {
			// Nothing of the batch was sent: its consumer resumes from
			// the cursor of the last answer, before it.
			return w.s.eventError(err)
		}
		if len(evs) > 0 || (caughtUp && passed) || clk.Now().Sub(lastSend) >= keepalive {
			if err := w.send(&tenurev1.WatchEventsResponse{Events: evs, Cursor: w.pos.String(), CaughtUp: caughtUp}); err != nil {
				return err
			}
			lastSend, passed = clk.Now(), false
		}
		if clk.Now().Sub(lastScan) >= eventRescan {
			lastScan = clk.Now()
			if err := w.rescan(ctx); err != nil {
				return w.s.eventError(err)
			}
		}
		if !caughtUp {
			poll = eventPollMin
			continue
		}
		wait := keepalive - clk.Now().Sub(lastSend)
		if w.st.Polled() {
			wait, poll = min(wait, poll), min(2*poll, eventPollMax)
		}
		if err := w.st.Wait(ctx, clk, max(wait, time.Millisecond)); err != nil {
			return nil // the caller went away, or the server drains
		}
	}
}

// batch reads records until the batch is full or nothing more is durable
// (caughtUp), and returns how many it passed.
func (w *eventWriter) batch(ctx context.Context) (n int, caughtUp bool, err error) {
	w.items, w.bytes = w.items[:0], 0
	take := func(partition, lsn uint64, e wal.Entry) error { return w.take(ctx, partition, lsn, e) }
	for n < eventBatchRecords {
		k, err := w.st.Read(ctx, eventBatchRecords-n, take)
		n += k
		if errors.Is(err, errBatchFull) {
			return n, false, nil
		}
		if err != nil {
			return n, false, err
		}
		if k == 0 {
			return n, true, nil
		}
	}
	return n, false, nil
}

// take passes one record: a record of a type the filter does not select
// only moves the position; one it selects is decoded and kept for events,
// which decides on the rest of the filter once the batch's tasks are
// placed.
func (w *eventWriter) take(ctx context.Context, partition, lsn uint64, e wal.Entry) error {
	if w.bytes+len(e.Payload) > eventBatchBytes && len(w.items) > 0 {
		return errBatchFull
	}
	typ := record.Type(e.Type)
	if !w.f.selects(typ) {
		w.pos.Set(partition, lsn)
		return nil
	}
	r, err := record.Decode(typ, e.Payload)
	if err != nil {
		return fmt.Errorf("partition %d, lsn %d: %w", partition, lsn, err)
	}
	it := eventItem{ev: eventOf(partition, lsn, r)}
	feed := w.feeds[partition]
	key, keyed := feed.Key()
	if ev := it.ev; ev.TaskId != "" && ev.Namespace != "" && (!keyed || w.f.workflow != "") {
		// A record that carries its task's place creates the task
		// (TaskCreated, ScheduleFired), outside any workflow. A partition
		// of one queue learns it only for a workflow filter, which would
		// look it up otherwise.
		w.placed[partition] = append(w.placed[partition], events.Placed{TaskID: ev.TaskId, Target: events.Target{Namespace: ev.Namespace, Queue: ev.Queue}})
	}
	if keyed {
		// A partition of one queue (cluster mode): every record of its
		// log is that queue's, its Fence and purges too.
		it.ev.Namespace, it.ev.Queue = key.Namespace, key.Queue
	}
	switch m := it.ev.GetRecord().(type) {
	case *tenurev1.Event_TasksDeleted:
		it.deleted = r.(*state.TasksDeleted).TaskIDs
	case *tenurev1.Event_TasksSubmitted:
		it.created = &m.TasksSubmitted.Tasks
		it.workflow, it.createdIn = m.TasksSubmitted.WorkflowId, m.TasksSubmitted.WorkflowId
	case *tenurev1.Event_TaskCommitted:
		it.created = &m.TaskCommitted.Spawn
	case *tenurev1.Event_TaskCompleted:
		it.created = &m.TaskCompleted.Spawn
	case *tenurev1.Event_WorkflowCancelled:
		it.workflow = m.WorkflowCancelled.WorkflowId
	case *tenurev1.Event_WorkflowRetried:
		it.workflow = m.WorkflowRetried.WorkflowId
	}
	if it.creates() {
		if ev := it.ev; ev.TaskId != "" {
			// Spawns join their parent's workflow: place the parent now,
			// with what the batch created before it.
			w.learn(partition)
			var at [1]events.Target
			if err := feed.Resolve(ctx, []string{ev.TaskId}, at[:], w.f.workflow != ""); err != nil {
				return err
			}
			it.createdIn = at[0].Workflow
		}
		for _, c := range *it.created {
			w.placed[partition] = append(w.placed[partition], events.Placed{TaskID: c.GetTaskId(),
				Target: events.Target{Namespace: c.GetNamespace(), Queue: c.GetQueue(), Workflow: it.createdIn}})
		}
	}
	w.pos.Set(partition, lsn)
	it.ev.Cursor = w.pos.String()
	w.items = append(w.items, it)
	w.bytes += len(e.Payload)
	return nil
}

// learn hands partition's feed the tasks the batch created so far.
func (w *eventWriter) learn(partition uint64) {
	if placed := w.placed[partition]; len(placed) > 0 {
		w.feeds[partition].Learn(placed, w.f.workflow != "")
		w.placed[partition] = placed[:0]
	}
}

// events places the batch's tasks (their namespace, queue and workflow,
// where their records do not carry them) and returns the events the
// filter selects. It fails only when a task's place could not be looked
// up (the partition is not served now).
func (w *eventWriter) events(ctx context.Context) ([]*tenurev1.Event, error) {
	for p := range w.placed {
		w.learn(p)
	}
	if len(w.items) == 0 {
		return nil, nil
	}
	if err := w.place(ctx); err != nil {
		return nil, err
	}
	out := make([]*tenurev1.Event, 0, len(w.items))
	for i := range w.items {
		it := &w.items[i]
		var pass bool
		switch {
		case it.deleted != nil:
			var err error
			if pass, err = w.passDeleted(ctx, it.ev, it.deleted); err != nil {
				return nil, err
			}
		case it.creates():
			pass = w.passCreated(it)
		default:
			pass = w.f.takes(it.ev.TaskId, events.Target{Namespace: it.ev.Namespace, Queue: it.ev.Queue, Workflow: it.workflow})
		}
		if pass {
			out = append(out, it.ev)
		}
	}
	return out, nil
}

// place sets the namespace, queue and workflow of the batch's events
// about a task whose record does not carry them (in a partition of one
// queue, the workflow only, for a workflow filter), asking each
// partition's feed once.
func (w *eventWriter) place(ctx context.Context) error {
	type ask struct {
		ids  []string
		refs []*eventItem
	}
	asks := map[uint64]*ask{}
	for i := range w.items {
		it := &w.items[i]
		if ev := it.ev; ev.TaskId != "" && (ev.Namespace == "" || w.f.workflow != "" && !it.creates()) {
			a := asks[ev.Partition]
			if a == nil {
				a = &ask{}
				asks[ev.Partition] = a
			}
			a.ids, a.refs = append(a.ids, ev.TaskId), append(a.refs, it)
		}
	}
	for p, a := range asks {
		found := make([]events.Target, len(a.ids))
		if err := w.feeds[p].Resolve(ctx, a.ids, found, w.f.workflow != ""); err != nil {
			return err
		}
		for i, it := range a.refs {
			it.ev.Namespace, it.ev.Queue, it.workflow = found[i].Namespace, found[i].Queue, found[i].Workflow
		}
	}
	return nil
}

// passDeleted keeps in a TasksDeleted event the tasks the filter selects,
// and reports whether any is left.
func (w *eventWriter) passDeleted(ctx context.Context, ev *tenurev1.Event, ids []string) (bool, error) {
	if w.f.namespace == "" && w.f.task == "" {
		return true, nil
	}
	found := make([]events.Target, len(ids))
	if err := w.feeds[ev.Partition].Resolve(ctx, ids, found, w.f.workflow != ""); err != nil {
		return false, err
	}
	var keep []string
	for i, id := range ids {
		if found[i] != (events.Target{}) && w.f.takes(id, found[i]) {
			keep = append(keep, id)
		}
	}
	ev.GetTasksDeleted().TaskIds = keep
	return len(keep) > 0, nil
}

// passCreated decides on an event of a record that creates tasks beside
// its own: it keeps the tasks the filter selects; an event whose own task
// the filter does not select passes with them only, without its task,
// lease and result (the task that spawned them may be out of the caller's
// scope).
func (w *eventWriter) passCreated(it *eventItem) bool {
	ev, created := it.ev, it.created
	var keep []*tenurev1.TaskCreatedEvent
	for _, c := range *created {
		if w.f.takes(c.GetTaskId(), events.Target{Namespace: c.GetNamespace(), Queue: c.GetQueue(), Workflow: it.createdIn}) {
			keep = append(keep, c)
		}
	}
	*created = keep
	if ev.TaskId != "" && w.f.takes(ev.TaskId, events.Target{Namespace: ev.Namespace, Queue: ev.Queue, Workflow: it.createdIn}) {
		return true
	}
	if len(keep) == 0 {
		return false
	}
	if ev.TaskId != "" {
		ev.TaskId, ev.RequestedBy = "", ""
	}
	switch m := ev.GetRecord().(type) {
	case *tenurev1.Event_TaskCommitted:
		m.TaskCommitted.LeaseId, m.TaskCommitted.Result = "", nil
	case *tenurev1.Event_TaskCompleted:
		m.TaskCompleted.LeaseId, m.TaskCompleted.Result = "", nil
	}
	// What they concern: their namespace and queue, where they share one.
	ev.Namespace, ev.Queue = keep[0].GetNamespace(), keep[0].GetQueue()
	for _, c := range keep[1:] {
		if c.GetNamespace() != ev.Namespace {
			ev.Namespace = ""
		}
		if c.GetQueue() != ev.Queue {
			ev.Queue = ""
		}
	}
	return true
}

// rescan adds the partitions of the filter's scope created since the
// stream opened.
func (w *eventWriter) rescan(ctx context.Context) error {
	feeds, err := w.s.opts.Events.Feeds(ctx, w.f.namespace, w.f.queue)
	if err != nil {
		return nil // the next rescan tries again; the stream reads on
	}
	for _, f := range feeds {
		if w.st.Reads(f.Partition()) {
			continue
		}
		if err := w.st.Add(ctx, f); err != nil {
			return err
		}
		w.feeds[f.Partition()] = f
	}
	return nil
}

// send sends one answer; the caller has the server's write timeout to
// take it.
func (w *eventWriter) send(m *tenurev1.WatchEventsResponse) error {
	if w.rc != nil {
		// Socket deadlines are real time, whatever clock the server runs
		// on.
		_ = w.rc.SetWriteDeadline(clock.Real.Now().Add(w.s.opts.Load.WriteTimeout))
	}
	return w.out.Send(m)
}
