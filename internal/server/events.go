package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/record"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// EventService.WatchEvents (docs/design/events.md): a stream of the
// records of the partitions a filter selects, from a cursor, read from the
// partitions' feeds (package events), decoded, filtered and converted
// here.

// EventSource gives the feeds of this server's partitions.
type EventSource interface {
	// Feeds returns the feeds of the partitions a stream of namespace and
	// queue reads ("" matches every one), in increasing order of
	// partition.
	Feeds(ctx context.Context, namespace, queue string) ([]*events.Feed, error)
}

// What one answer of a stream holds at most, and how it paces itself.
const (
	eventBatchRecords = 1000
	eventBatchBytes   = 1 << 20
	// A stream that polls (partitions of other nodes) polls at
	// eventPollMin after it read something, doubling up to eventPollMax
	// while it finds nothing.
	eventPollMin = 20 * time.Millisecond
	eventPollMax = time.Second
	// eventRescan is how often a stream over several partitions looks for
	// partitions created since it opened (new queues, cluster mode).
	eventRescan = 2 * time.Second
	// eventKeepalive bounds the time between two answers of an idle
	// stream (at most a quarter of the write timeout).
	eventKeepalive = 30 * time.Second
)

type eventService struct{ s *Server }

// WatchEvents implements EventService.
func (h eventService) WatchEvents(ctx context.Context, req *connect.Request[tenurev1.WatchEventsRequest], out *connect.ServerStream[tenurev1.WatchEventsResponse]) error {
	s := h.s
	if s.opts.Events == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this server keeps no event feeds"))
	}
	f, err := s.eventFilter(req.Msg.GetFilter())
	if err != nil {
		return s.apiError(err)
	}
	start, err := eventStart(req.Msg.GetCursor())
	if err != nil {
		return s.apiError(err)
	}
	leave, err := s.enterStream()
	if err != nil {
		return s.apiError(err)
	}
	defer leave()
	feeds, err := s.opts.Events.Feeds(ctx, f.namespace, f.queue)
	if err != nil {
		return s.apiError(err)
	}
	st, err := events.Open(ctx, feeds, start)
	if err != nil {
		return s.eventError(err)
	}
	defer st.Close()
	// A graceful shutdown (Drain) ends every stream at once; its consumer
	// resumes from its cursor elsewhere, or once the server is back.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(s.drain, stop)()
	w := &eventWriter{s: s, f: f, st: st, out: out, rc: responseControllerOf(ctx), feeds: make(map[uint64]*events.Feed, len(feeds)),
		placed: make(map[uint64][]events.Placed)}
	for _, fd := range feeds {
		w.feeds[fd.Partition()] = fd
	}
	return w.run(ctx)
}

// eventFilter is a stream's filter, checked.
type eventFilter struct {
	namespace, queue, task, workflow string
	// types: the record types selected, by number; nil: every one.
	types []bool
}

func (s *Server) eventFilter(m *tenurev1.EventFilter) (eventFilter, error) {
	f := eventFilter{namespace: m.GetNamespace(), queue: m.GetQueue(), task: m.GetTaskId(), workflow: m.GetWorkflowId()}
	maxID := s.opts.Limits.MaxIDBytes
	if maxID == 0 {
		maxID = coordinator.DefaultLimits.MaxIDBytes
	}
	for _, v := range []struct{ field, value string }{{"filter.namespace", f.namespace}, {"filter.queue", f.queue}, {"filter.task_id", f.task}, {"filter.workflow_id", f.workflow}} {
		if len(v.value) > maxID {
			return f, &coordinator.FieldError{Field: v.field, Problem: fmt.Sprintf("%d bytes, over the limit of %d", len(v.value), maxID)}
		}
	}
	if f.queue != "" && f.namespace == "" {
		return f, &coordinator.FieldError{Field: "filter.namespace", Problem: "a queue is named without its namespace: name the namespace too"}
	}
	if f.workflow != "" && f.namespace == "" {
		return f, &coordinator.FieldError{Field: "filter.namespace", Problem: "a workflow is named without its namespace (a workflow id is the namespace's): name the namespace too"}
	}
	if len(m.GetTypes()) > 0 {
		all := record.Types()
		f.types = make([]bool, int(all[len(all)-1])+1)
		for i, name := range m.GetTypes() {
			t, ok := record.ParseType(name)
			if !ok {
				names := make([]string, len(all))
				for k, t := range all {
					names[k] = t.String()
				}
				return f, &coordinator.FieldError{Field: fmt.Sprintf("filter.types[%d]", i),
					Problem: fmt.Sprintf("%q is not a record type; the types are %s", name, strings.Join(names, ", "))}
			}
			f.types[t] = true
		}
	}
	return f, nil
}

// selects reports whether the filter selects records of type t.
func (f *eventFilter) selects(t record.Type) bool {
	return f.types == nil || (int(t) < len(f.types) && f.types[t])
}

// takes reports whether the filter selects an event about task (""
// for none) of namespace, queue and workflow at ("" for one that concerns
// none, or a task nobody knows any more).
func (f *eventFilter) takes(task string, at events.Target) bool {
	return (f.namespace == "" || at.Namespace == f.namespace) && (f.queue == "" || at.Queue == f.queue) &&
		(f.task == "" || task == f.task) && (f.workflow == "" || at.Workflow == f.workflow)
}

// eventStart is where a stream of cursor starts.
func eventStart(cursor string) (events.Start, error) {
	switch cursor {
	case "", "now":
		return events.Start{Now: true}, nil
	case "oldest":
		return events.Start{Oldest: true}, nil
	}
	c, err := events.ParseCursor(cursor)
	if err != nil {
		return events.Start{}, &coordinator.FieldError{Field: "cursor", Problem: err.Error() + `; or give "now" or "oldest"`}
	}
	return events.Start{Cursor: c}, nil
}

// eventError is the API's error for what refused or ended a stream: a
// cursor too old, with the oldest cursor available; one past the log.
func (s *Server) eventError(err error) error {
	if e, ok := errors.AsType[*events.ExpiredError](err); ok {
		ce := connect.NewError(connect.CodeOutOfRange, err)
		if s.opts.Reword != nil {
			ce = connect.NewError(connect.CodeOutOfRange, errors.New(s.opts.Reword(err.Error())))
		}
		if d, derr := connect.NewErrorDetail(&tenurev1.ErrorDetail{
			Reason: tenurev1.ErrorReason_ERROR_REASON_CURSOR_EXPIRED, OldestCursor: e.Oldest.String(),
		}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	}
	if _, ok := errors.AsType[*events.AheadError](err); ok {
		return s.apiError(&coordinator.FieldError{Field: "cursor", Problem: err.Error()})
	}
	return s.apiError(err)
}

// enterStream admits one more event stream, or refuses it past
// LoadLimits.MaxEventStreams.
func (s *Server) enterStream() (leave func(), err error) {
	limit := int64(s.opts.Load.MaxEventStreams)
	if n := s.streams.Add(1); n > limit {
		s.streams.Add(-1)
		s.hit(LimitEventStreams)
		return nil, &limitError{kind: coordinator.ErrTooLarge, field: "streams", size: n, limit: limit,
			msg: fmt.Sprintf("too many event streams: %d WatchEvents calls are streaming from this server, the limit (--max-event-streams); retry with backoff, or share one stream", limit)}
	}
	return func() { s.streams.Add(-1) }, nil
}

// responseControllerKey carries a stream's http.ResponseController to its
// handler, which extends the write deadline before each answer.
type responseControllerKey struct{}

func responseControllerOf(ctx context.Context) *http.ResponseController {
	rc, _ := ctx.Value(responseControllerKey{}).(*http.ResponseController)
	return rc
}

// streamDeadlines hands the handler of a stream its response controller,
// so that the write timeout bounds each answer rather than the whole
// stream.
func streamDeadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), responseControllerKey{}, http.NewResponseController(w))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
