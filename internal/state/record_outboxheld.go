package state

import "fmt"

// MaxOutboxRowsPerRecord bounds the rows of an OutboxHeld or
// OutboxReleased: the rows of one relay's batch.
const MaxOutboxRowsPerRecord = 10000

// OutboxHeld records that the rows of an outbox are being submitted: each
// row holds its request id (its namespace and queue too) until an
// OutboxReleased of the row, in place of what it held before. The
// coordinator writes it in the same append as the rows' TaskCreated
// records, before them, so that a task of a row is durable only with its
// hold (docs/design/outbox.md).
type OutboxHeld struct {
	Outbox string
	Rows   []OutboxHeldRow
	// By is who asked.
	By string
	At Time
}

// OutboxHeldRow is one row of an OutboxHeld.
type OutboxHeldRow struct {
	Row       int64
	Namespace string
	Queue     string
	RequestID string
}

func (*OutboxHeld) Task() string { return "" }

func (r *OutboxHeld) apply(s *State, _ uint64) string {
	if why := checkOutboxRows(r.Outbox, len(r.Rows)); why != "" {
		return why
	}
	seen := make(map[int64]bool, len(r.Rows))
	for _, row := range r.Rows {
		h := OutboxHold{OutboxRow: OutboxRow{r.Outbox, row.Row}, Namespace: row.Namespace, Queue: row.Queue, RequestID: row.RequestID}
		if why := checkHold(h); why != "" {
			return why
		}
		if seen[row.Row] {
			return fmt.Sprintf("row %d appears twice", row.Row)
		}
		seen[row.Row] = true
	}
	for _, row := range r.Rows {
		s.hold(OutboxHold{OutboxRow: OutboxRow{r.Outbox, row.Row}, Namespace: row.Namespace, Queue: row.Queue, RequestID: row.RequestID})
	}
	return ""
}

// checkOutboxRows checks what OutboxHeld and OutboxReleased have in
// common: an outbox and 1..MaxOutboxRowsPerRecord rows.
func checkOutboxRows(outbox string, rows int) string {
	switch {
	case outbox == "":
		return "outbox must be set"
	case rows == 0 || rows > MaxOutboxRowsPerRecord:
		return fmt.Sprintf("%d rows is outside 1..%d", rows, MaxOutboxRowsPerRecord)
	}
	return ""
}
