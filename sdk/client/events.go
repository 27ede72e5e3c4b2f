package client

import (
	"context"
	"errors"
	"iter"
	mrand "math/rand/v2"
	"net/http"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/internal/backoff"
)

// Where a Watch starts when it has no cursor of its own.
const (
	// CursorNow (or ""): after everything durable when the stream opens.
	CursorNow = "now"
	// CursorOldest: from the first record the server's log still holds.
	CursorOldest = "oldest"
)

// EventFilter selects the events of a Watch. Unset fields select
// everything (a server that authenticates needs a token of namespace * to
// watch every namespace).
type EventFilter struct {
	// Namespace and Queue select the events of one namespace, or of one
	// queue of it.
	Namespace, Queue string
	// TaskID selects the events of one task.
	TaskID string
	// WorkflowID selects the events of one workflow's tasks and the
	// workflow's cancellations and retries; a workflow id is its
	// namespace's, so Namespace is needed with it.
	WorkflowID string
	// Types selects events by record type name ("TaskCreated",
	// "TaskCompleted", ...: Event.Type).
	Types []string
}

// Event is one record of a partition's log: one decision the server made
// (docs/design/events.md).
type Event struct {
	// Partition and LSN place it in the log: within a partition, events
	// come in LSN order.
	Partition, LSN uint64
	// At is when the server decided it.
	At time.Time
	// Type is its record type's name: "TaskCreated", "LeaseGranted",
	// "TaskCompleted", ...
	Type string
	// Namespace, Queue and TaskID say what it concerns (empty for what
	// concerns none).
	Namespace, Queue, TaskID string
	// RequestedBy is who asked for it, as in the task history.
	RequestedBy string
	// Cursor is the cursor after this event: Watch from it to continue
	// exactly after it.
	Cursor string
	// Record is the event as the API sends it, with its record's own
	// fields (Record.GetTaskCompleted().GetResult(), ...).
	Record *tenurev1.Event
}

func eventOf(p *tenurev1.Event) *Event {
	return &Event{
		Partition: p.GetPartition(), LSN: p.GetLsn(), At: timeOf(p.GetAt()), Type: p.GetType(),
		Namespace: p.GetNamespace(), Queue: p.GetQueue(), TaskID: p.GetTaskId(), RequestedBy: p.GetRequestedBy(),
		Cursor: p.GetCursor(), Record: p,
	}
}

// maxWatchBackoff caps the wait between two tries to open a Watch's
// stream again.
const maxWatchBackoff = 10 * time.Second

// Watch streams the events filter selects, from cursor (a cursor of an
// earlier event, CursorNow or "", or CursorOldest), for as long as the
// loop runs: what the server's log holds from there, then each decision
// as soon as it is durable. Each Event carries the cursor after it; keep
// the last one handled to resume exactly after it.
//
// A stream that breaks — the server restarts, a partition moves, the
// connection drops, the consumer is slower than the server's write
// timeout — is opened again from the cursor after the last event yielded
// (and past the records the filter skipped since), with a growing wait
// between tries: the loop sees every event once, in order within each
// partition. Watch ends when ctx does or the loop breaks (no error), or
// yields one error and ends when retrying cannot help: ErrCursorExpired
// (Error.OldestCursor is where the log now starts), ErrInvalidArgument,
// ErrUnauthenticated, ErrPermissionDenied.
func (c *Client) Watch(ctx context.Context, filter EventFilter, cursor string) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		for ans, err := range c.WatchAnswers(ctx, filter, cursor) {
			if err != nil {
				yield(nil, err)
				return
			}
			for _, ev := range ans.GetEvents() {
				if !yield(eventOf(ev), nil) {
					return
				}
			}
		}
	}
}

// WatchAnswers is Watch an answer of the stream at a time, each as the
// server sent it (tenure.v1.WatchEventsResponse): its events, the cursor
// after everything it covered (past its last event when the filter
// skipped records after it), and whether it caught up with what was
// durable. The first answer of each stream has no event and the cursor it
// starts from; an idle stream sends one at least every 30 seconds. For a
// program that keeps its place between rare events (store the answers'
// cursors), stops once it caught up, or shows the API's answers (`tenure
// events --json`). It opens the stream again as Watch does, from the last
// answer's cursor.
func (c *Client) WatchAnswers(ctx context.Context, filter EventFilter, cursor string) iter.Seq2[*tenurev1.WatchEventsResponse, error] {
	return func(yield func(*tenurev1.WatchEventsResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req := &tenurev1.WatchEventsRequest{Cursor: cursor, Filter: &tenurev1.EventFilter{
			Namespace: filter.Namespace, Queue: filter.Queue, TaskId: filter.TaskID, WorkflowId: filter.WorkflowID, Types: filter.Types}}
		policy := backoff.Policy{Initial: c.backoff.Initial, Max: maxWatchBackoff}
		for failures := 0; ; failures++ {
			progressed, err := c.watchOnce(ctx, req, yield)
			if errors.Is(err, errStopped) || ctx.Err() != nil {
				return
			}
			e := newError("WatchEvents", err)
			if !watchRetries(e) {
				yield(nil, e)
				return
			}
			if progressed {
				failures = 0
			}
			if !backoff.Sleep(ctx, policy.Wait(failures, mrand.Int64N)) {
				return
			}
		}
	}
}

// errStopped: the loop over a Watch broke.
var errStopped = errors.New("client: the loop stopped")

// watchOnce runs one stream of a Watch, moving req.Cursor along: it
// returns why the stream ended, and whether it received anything.
func (c *Client) watchOnce(ctx context.Context, req *tenurev1.WatchEventsRequest, yield func(*tenurev1.WatchEventsResponse, error) bool) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := connect.NewRequest(req)
	var s *connect.ServerStreamForClient[tenurev1.WatchEventsResponse]
	open := func(ctx context.Context) error {
		if s, err = c.events.WatchEvents(ctx, r); err != nil {
			return newError("WatchEvents", err)
		}
		return nil
	}
	if c.intercept != nil {
		cl := &Call{Op: "WatchEvents", Header: make(http.Header)}
		err = c.intercept(ctx, cl, func(ctx context.Context) error {
			for k, v := range cl.Header {
				r.Header()[k] = v
			}
			return open(ctx)
		})
	} else {
		err = open(ctx)
	}
	if err != nil {
		return false, err
	}
	defer s.Close()
	for s.Receive() {
		m := s.Msg()
		progressed = true
		if !yield(m, nil) {
			return true, errStopped
		}
		if m.GetCursor() != "" {
			req.Cursor = m.GetCursor()
		}
	}
	if err := s.Err(); err != nil {
		return progressed, err
	}
	return progressed, connect.NewError(connect.CodeUnavailable, errors.New("the server ended the stream"))
}

// watchRetries reports whether a Watch opens its stream again after e:
// unless the server refused it for good.
func watchRetries(e *Error) bool {
	if e.tlsRefused {
		return false
	}
	switch e.Code {
	case connect.CodeInvalidArgument, connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeOutOfRange,
		connect.CodeUnimplemented, connect.CodeFailedPrecondition, connect.CodeNotFound:
		return false
	}
	// Unavailable, and what a stream cut mid-answer looks like (internal:
	// "incomplete envelope", unknown): open it again.
	return true
}
