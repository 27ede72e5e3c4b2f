package state

// QueueResumed ends a QueuePaused: the queue leases again.
type QueueResumed struct {
	Namespace string
	Queue     string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*QueueResumed) Task() string { return "" }

func (r *QueueResumed) apply(s *State, _ uint64) string {
	qi := s.queues[QueueKey{r.Namespace, r.Queue}]
	if qi == nil || qi.paused == nil {
		return "queue is not paused"
	}
	qi.paused = nil
	s.maybeForget(qi, r.At)
	return ""
}
