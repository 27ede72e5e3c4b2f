package state

import (
	"cmp"
	"fmt"
	"slices"
)

// The transactional outbox (docs/design/outbox.md): a relay submits the
// rows of an application's outbox table, and until it has deleted a row
// the log keeps the row's request id from being forgotten. A row holds its
// request id (OutboxHeld) from the submit until the relay releases it
// (OutboxReleased); while any row holds a request id, the retention purge
// keeps the task that has it, and so its request id deduplicates every
// submit of the row again, however long the relay was away.

// OutboxRow names a row of an outbox: the outbox (the name its relay gives
// it) and the row's number in its table.
type OutboxRow struct {
	Outbox string
	Row    int64
}

// OutboxHold is what a row of an outbox holds: the request id of its
// submit, in its namespace, and the queue it was placed by.
type OutboxHold struct {
	OutboxRow
	Namespace string
	Queue     string
	RequestID string
}

// requestKey is a request id in its namespace.
type requestKey struct{ namespace, requestID string }

// outboxHolds is the holds of a State.
type outboxHolds struct {
	// rows holds every row's hold; requests counts the rows that hold
	// each request id. Both are nil until the first hold.
	rows     map[OutboxRow]OutboxHold
	requests map[requestKey]int
}

// hold makes h the hold of its row, in place of what the row held before.
func (s *State) hold(h OutboxHold) {
	if s.holds.rows == nil {
		s.holds.rows, s.holds.requests = make(map[OutboxRow]OutboxHold), make(map[requestKey]int)
	}
	s.release(h.OutboxRow)
	s.holds.rows[h.OutboxRow] = h
	s.holds.requests[requestKey{h.Namespace, h.RequestID}]++
}

// release ends the hold of row, if it has one.
func (s *State) release(row OutboxRow) {
	h, ok := s.holds.rows[row]
	if !ok {
		return
	}
	delete(s.holds.rows, row)
	k := requestKey{h.Namespace, h.RequestID}
	if s.holds.requests[k]--; s.holds.requests[k] == 0 {
		delete(s.holds.requests, k)
	}
}

// Held reports whether a row of an outbox holds requestID in namespace:
// the task that has it is then kept past its retention.
func (s *State) Held(namespace, requestID string) bool {
	return len(s.holds.requests) > 0 && requestID != "" && s.holds.requests[requestKey{namespace, requestID}] > 0
}

// kept reports whether the retention purge keeps the finished task t for
// an outbox's hold on its request id.
func (s *State) kept(t *Task) bool {
	return len(s.holds.requests) > 0 && s.Held(t.Namespace, t.RequestID)
}

// Holds returns the holds of outbox ("": of every outbox), ordered by
// outbox and row.
func (s *State) Holds(outbox string) []OutboxHold {
	var out []OutboxHold
	for _, h := range s.holds.rows {
		if outbox == "" || h.Outbox == outbox {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, compareHolds)
	return out
}

// HoldCount is the number of rows that hold a request id.
func (s *State) HoldCount() int { return len(s.holds.rows) }

func compareHolds(a, b OutboxHold) int {
	return cmp.Or(cmp.Compare(a.Outbox, b.Outbox), cmp.Compare(a.Row, b.Row))
}

// checkHold is what a hold must be: an outbox, a namespace, a queue and a
// request id.
func checkHold(h OutboxHold) string {
	switch {
	case h.Outbox == "":
		return "outbox must be set"
	case h.Namespace == "" || h.Queue == "":
		return fmt.Sprintf("row %d: namespace and queue must be set", h.Row)
	case h.RequestID == "":
		return fmt.Sprintf("row %d: request id must be set", h.Row)
	}
	return ""
}

// holdErrors are the ways the holds' count of request ids is not theirs
// (Invariants).
func (s *State) holdErrors() []error {
	var errs []error
	want := map[requestKey]int{}
	for row, h := range s.holds.rows {
		if h.OutboxRow != row {
			errs = append(errs, fmt.Errorf("outbox hold of %v is filed under %v", h.OutboxRow, row))
		}
		if why := checkHold(h); why != "" {
			errs = append(errs, fmt.Errorf("outbox hold of %v: %s", row, why))
		}
		want[requestKey{h.Namespace, h.RequestID}]++
	}
	if len(want) != len(s.holds.requests) {
		errs = append(errs, fmt.Errorf("%d request ids are counted as held, the holds hold %d", len(s.holds.requests), len(want)))
	}
	for k, n := range want {
		if s.holds.requests[k] != n {
			errs = append(errs, fmt.Errorf("request id %q in namespace %q is counted as held %d times, by %d rows", k.requestID, k.namespace, s.holds.requests[k], n))
		}
	}
	return errs
}

// AddHold restores a hold of an Image. After an error the Loader refuses
// everything.
func (l *Loader) AddHold(h OutboxHold) error {
	if l.err != nil {
		return l.err
	}
	if why := checkHold(h); why != "" {
		l.err = fmt.Errorf("%w: outbox hold of row %d of %q: %s", ErrRestore, h.Row, h.Outbox, why)
		return l.err
	}
	if _, ok := l.s.holds.rows[h.OutboxRow]; ok {
		l.err = fmt.Errorf("%w: row %d of outbox %q is held twice", ErrRestore, h.Row, h.Outbox)
		return l.err
	}
	l.s.hold(h)
	return nil
}
