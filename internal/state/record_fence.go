package state

import "fmt"

// Fence marks the start of a new owner's epoch of a partition (cluster
// mode): a node that gains ownership of a partition appends it before
// anything else.
type Fence struct {
	Epoch  uint64
	NodeID string
	At     Time
}

func (*Fence) Task() string { return "" }

func (r *Fence) apply(s *State, _ uint64) string {
	// The same epoch may fence again: a node restarted with its partitions
	// still assigned to it claims them anew (the log's primary key, not the
	// epoch, shuts out its previous incarnation).
	if r.Epoch < s.epoch {
		return fmt.Sprintf("fence epoch %d is below the current epoch %d", r.Epoch, s.epoch)
	}
	s.epoch = r.Epoch
	return ""
}
