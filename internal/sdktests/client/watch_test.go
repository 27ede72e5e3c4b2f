package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/wal"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestWatch: Watch from the oldest record gives every event once, in
// order, with its cursor; a Watch from any event's cursor gives exactly the
// events after it; a Watch from now gives what comes next.
func TestWatch(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var ids []string
		for i := range 10 {
			res, err := c.Submit(ctx, client.SubmitRequest{Namespace: "w", Queue: "q", Payload: fmt.Appendf(nil, "%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.TaskID)
		}
		var seen []*client.Event
		for ev, err := range c.Watch(ctx, client.EventFilter{Namespace: "w"}, client.CursorOldest) {
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, ev)
			if len(seen) == 10 {
				break
			}
		}
		for i, ev := range seen {
			if ev.Type != "TaskCreated" || ev.TaskID != ids[i] || ev.LSN != uint64(i+1) || ev.Namespace != "w" || ev.Queue != "q" ||
				string(ev.Record.GetTaskCreated().GetPayload()) != fmt.Sprint(i) || ev.At.IsZero() || ev.Cursor == "" {
				t.Fatalf("event %d: %+v", i, ev)
			}
		}
		// From the fifth event's cursor: the sixth on.
		var rest []string
		for ev, err := range c.Watch(ctx, client.EventFilter{Namespace: "w"}, seen[4].Cursor) {
			if err != nil {
				t.Fatal(err)
			}
			rest = append(rest, ev.TaskID)
			if len(rest) == 5 {
				break
			}
		}
		if fmt.Sprint(rest) != fmt.Sprint(ids[5:]) {
			t.Fatalf("after the fifth: %v, want %v", rest, ids[5:])
		}
		// From now: the next submit.
		next := make(chan *client.Event, 1)
		go func() {
			for ev, err := range c.Watch(ctx, client.EventFilter{Namespace: "w", Types: []string{"TaskCreated"}}, client.CursorNow) {
				if err == nil {
					next <- ev
				}
				return
			}
		}()
		var id string
		for id == "" {
			// The stream may open after the submit: submit until one is seen.
			res, err := c.Submit(ctx, client.SubmitRequest{Namespace: "w", Queue: "q"})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-next:
				if ev.LSN <= 10 {
					t.Fatalf("a Watch from now gave %+v", ev)
				}
				id = res.TaskID
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// switchable serves whatever handler it holds now: a server that restarts
// behind the same address.
type switchable struct{ h atomic.Pointer[http.Handler] }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

func (s *switchable) serve(h http.Handler) { s.h.Store(&h) }

// TestWatchResumesAcrossRestarts: while the server restarts (its
// connections cut, its node closed and opened again on the same data
// directory) under a Watch, three times, the loop still sees every event
// exactly once, in order.
func TestWatchResumesAcrossRestarts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	open := func() *node.Node {
		n, err := node.Open(ctx, node.Config{DataDir: dir, Sync: wal.SyncNone})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sw := &switchable{}
	n := open()
	sw.serve(server.New(n.Router(), server.Options{Events: n}).Handler())
	ts := httptest.NewServer(sw)
	defer ts.Close()
	c := newClient(t, ts.URL, client.Options{RetryBackoff: 10 * time.Millisecond})

	const rounds, perRound = 4, 50
	got := make(chan *client.Event, rounds*perRound)
	watchErr := make(chan error, 1)
	go func() {
		for ev, err := range c.Watch(ctx, client.EventFilter{}, client.CursorOldest) {
			if err != nil {
				watchErr <- err
				return
			}
			got <- ev
		}
	}()
	restarted := 0
	for r := range rounds {
		for i := range perRound {
			if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "q", Payload: fmt.Appendf(nil, "%d/%d", r, i)}); err != nil {
				t.Fatal(err)
			}
		}
		if r == rounds-1 {
			break
		}
		// A restart: connections cut, the node closed, a new one opened.
		sw.serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
		}))
		ts.CloseClientConnections()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n = open()
		sw.serve(server.New(n.Router(), server.Options{Events: n}).Handler())
		restarted++
	}
	defer n.Close()
	next := uint64(1)
	for next <= rounds*perRound {
		select {
		case ev := <-got:
			if ev.LSN != next {
				t.Fatalf("event lsn %d, want %d (after %d restarts)", ev.LSN, next, restarted)
			}
			if want := fmt.Sprintf("%d/%d", (next-1)/perRound, (next-1)%perRound); string(ev.Record.GetTaskCreated().GetPayload()) != want {
				t.Fatalf("event %d carries %q, want %q", next, ev.Record.GetTaskCreated().GetPayload(), want)
			}
			next++
		case err := <-watchErr:
			t.Fatalf("Watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("waiting for event %d: %v", next, ctx.Err())
		}
	}
	select {
	case ev := <-got:
		t.Fatalf("an event more: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
	cancel() // the stream ends before the server closes
}

// TestWatchCursorExpired: a Watch from a cursor the log no longer holds
// yields ErrCursorExpired with the oldest cursor, and ends.
func TestWatchCursorExpired(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Sync: wal.SyncNone, SegmentBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := newClient(t, apitest.Serve(t, server.New(n.Router(), server.Options{Events: n})), client.Options{})
	for i := range 3 {
		for range 30 {
			if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "q", Payload: make([]byte, 2000)}); err != nil {
				t.Fatal(err)
			}
		}
		if i < 2 {
			if _, err := n.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if n.WALFirstLSN() <= 1 {
		t.Fatalf("the WAL was not compacted (first lsn %d): the test needs it to be", n.WALFirstLSN())
	}
	n2 := 0
	for _, err := range c.Watch(ctx, client.EventFilter{}, events.Cursor{{Partition: 0, LSN: 1}}.String()) {
		n2++
		var e *client.Error
		if !errors.Is(err, client.ErrCursorExpired) || !errors.As(err, &e) || e.OldestCursor == "" {
			t.Fatalf("Watch of an expired cursor: %v", err)
		}
	}
	if n2 != 1 {
		t.Fatalf("Watch yielded %d times, want one error", n2)
	}
}
