package state

// OutboxReleased records that the rows of an outbox are deleted from its
// table: their holds end (a row that holds nothing is passed over), and
// the tasks they kept go at the retention purge after.
type OutboxReleased struct {
	Outbox string
	Rows   []int64
	// By is who asked.
	By string
	At Time
}

func (*OutboxReleased) Task() string { return "" }

func (r *OutboxReleased) apply(s *State, _ uint64) string {
	if why := checkOutboxRows(r.Outbox, len(r.Rows)); why != "" {
		return why
	}
	for _, row := range r.Rows {
		s.release(OutboxRow{r.Outbox, row})
	}
	return ""
}
