package state

// QueuePaused pauses a queue: from then on it leases nothing but
// finalisations of COMMITTED tasks (whose effect may be half applied), until
// a QueueResumed. Submits are still accepted. The queue need not have a task
// in this partition: in cluster mode a pause is recorded in every partition
// the queue may use, so that its future tasks there wait too.
type QueuePaused struct {
	Namespace string
	Queue     string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (*QueuePaused) Task() string { return "" }

func (r *QueuePaused) apply(s *State, _ uint64) string {
	if r.Namespace == "" || r.Queue == "" {
		return "namespace and queue must be set"
	}
	qi := s.queueOf(r.Namespace, r.Queue)
	if qi.paused != nil {
		return "queue is already paused"
	}
	qi.paused = &Pause{By: r.By, Reason: r.Reason, At: r.At}
	return ""
}
