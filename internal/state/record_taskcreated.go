package state

import (
	"fmt"
	"time"
	"unsafe"
)

// TaskCreated introduces a task; it enters WAITING with attempt 0.
type TaskCreated struct {
	TaskID    string
	Namespace string
	Queue     string
	Payload   []byte
	// ExecutionWindow is the lease duration granted per attempt and per
	// heartbeat.
	ExecutionWindow time.Duration
	Retry           RetryPolicy
	// RequestID, when set, makes the submission idempotent within the
	// namespace.
	RequestID string
	// NotBefore is the earliest time the task may be leased (0: at once).
	NotBefore Time
	// Priority orders leasing within a queue: higher first.
	Priority  int32
	CreatedAt Time
	// By is who asked: the principal's name ("" without one).
	By string
	// Deadline, when set, is the instant after which the task, unless
	// COMMITTED by then, fails (TaskDeadlineExceeded); no lease outlives
	// it. 0: none.
	Deadline Time
	// Trace is the submitter's W3C trace context (zero: none), kept beside
	// the task for the workers that lease it.
	Trace TraceContext
	// Kind says what kind of work the task is ("" for none).
	Kind string
	// Key is the submitter's key of the task, for the flow control of its
	// queue's keys ("" for none; docs/design/keys.md), kept beside it.
	Key string
	// DependsOn names the tasks it depends on, each once: it is BLOCKED
	// until all of them are COMPLETED (docs/design/workflows.md).
	DependsOn []string
	// OnDependencyFailure says what a dependency that ends FAILED or DEAD
	// does to it.
	OnDependencyFailure DepPolicy
	// Remote lists, in ascending order, the indexes in DependsOn of the
	// tasks of other partitions (cluster mode): their edges stay pending
	// until a DependencyResolved resolves them.
	Remote []uint32
}

func (r *TaskCreated) Task() string { return r.TaskID }

func (r *TaskCreated) apply(s *State, lsn uint64) string {
	if why := r.check(s, nil); why != "" {
		return why
	}
	r.create(s, lsn, 0, "", nil)
	return ""
}

// check says why the task cannot be created in s, or "". created holds
// the ids and request ids (namespace and id) of the tasks the same record
// creates before it (nil for none).
func (r *TaskCreated) check(s *State, created *batchIDs) string {
	if why := r.checkFields(); why != "" {
		return why
	}
	if s.Task(r.TaskID) != nil {
		return "task id already exists"
	}
	if r.RequestID != "" && (s.ByRequest(r.Namespace, r.RequestID) != nil || created.hasRequest(r.Namespace, r.RequestID)) {
		return fmt.Sprintf("request id %q already used in namespace %q", r.RequestID, r.Namespace)
	}
	if created.hasTask(r.TaskID) {
		return "task id already exists"
	}
	var ids map[string]string
	if created != nil {
		ids = created.tasks
	}
	return s.checkDeps(r.Namespace, r.DependsOn, r.Remote, ids)
}

// checkFields says why the task, on its own, is not one a state can
// create, or "".
func (r *TaskCreated) checkFields() string {
	switch {
	case r.TaskID == "":
		return "task id is empty"
	case r.Namespace == "" || r.Queue == "":
		return "namespace and queue must be set"
	case r.ExecutionWindow <= 0:
		return "execution window must be positive"
	case r.Retry.MaxAttempts < 1:
		return "retry policy needs at least one attempt"
	case r.Deadline < 0:
		return fmt.Sprintf("deadline %d is negative", r.Deadline)
	case !(r.Retry.Multiplier >= 1) || r.Retry.InitialBackoff < 0 || r.Retry.MaxBackoff < r.Retry.InitialBackoff:
		return fmt.Sprintf("retry policy %+v is invalid (multiplier >= 1, 0 <= initial <= max backoff)", r.Retry)
	case checkTrace(r.Trace) != "":
		return checkTrace(r.Trace)
	case len(r.Key) > MaxKeyBytes:
		return fmt.Sprintf("key of %d bytes is over the limit of %d", len(r.Key), MaxKeyBytes)
	case r.OnDependencyFailure > DepRun:
		return fmt.Sprintf("dependency failure policy %d is not one of DEAD and RUN", r.OnDependencyFailure)
	}
	return ""
}

// create applies a checked TaskCreated at lsn as the seq-th task its
// record creates, spawned by parent ("" for none), in workflow w (nil for
// none). The caller settles at the end of its record.
func (r *TaskCreated) create(s *State, lsn uint64, seq uint16, parent string, w *Workflow) *Task {
	start, why := s.startOf(r.DependsOn, r.Remote, r.OnDependencyFailure)
	id, requestID, key, payload, trace := pack(r.TaskID, r.RequestID, r.Key, r.Payload, r.Trace)
	t, qi := s.addTask(&Task{
		ID:         id,
		Payload:    payload,
		RequestID:  requestID,
		Priority:   r.Priority,
		NotBefore:  r.NotBefore,
		CreatedAt:  r.CreatedAt,
		UpdatedAt:  r.CreatedAt,
		CreatedLSN: lsn,
		State:      start,
		cur:        -1,
		heapIdx:    -1,
	}, QueueKey{r.Namespace, r.Queue}, Policy{r.Kind, r.ExecutionWindow, r.Retry})
	if why != "" {
		t.progress().FailureReason = why
		s.account(t)
		s.ended = append(s.ended, t)
	}
	// Its node first: its place in the creation order is its key's order.
	s.link(t, r.DependsOn, r.Remote, r.OnDependencyFailure, parent, seq, w)
	if key != "" {
		s.keyed(t, qi, key)
		if !start.Terminal() {
			s.opened(qi, t, lsn)
		}
	}
	if start == Waiting {
		qi.add(t)
	}
	qi.events.add(r.CreatedAt, EventSubmitted)
	if r.Deadline != 0 && !start.Terminal() {
		s.deadlines.add(t, r.Deadline)
	}
	s.setTrace(t, trace)
	return t
}

// batchIDs holds the task ids and request ids of the tasks a record
// creates, as far as it got: what the next task of it may not reuse and
// may depend on. A nil one holds nothing.
type batchIDs struct {
	tasks    map[string]string // namespace by id
	requests map[[2]string]bool
}

func newBatchIDs(n int) *batchIDs {
	return &batchIDs{tasks: make(map[string]string, n), requests: make(map[[2]string]bool)}
}

func (b *batchIDs) add(r *TaskCreated) {
	b.tasks[r.TaskID] = r.Namespace
	if r.RequestID != "" {
		b.requests[[2]string{r.Namespace, r.RequestID}] = true
	}
}

func (b *batchIDs) hasTask(id string) bool {
	if b == nil {
		return false
	}
	_, ok := b.tasks[id]
	return ok
}

func (b *batchIDs) hasRequest(namespace, id string) bool {
	return b != nil && b.requests[[2]string{namespace, id}]
}

// pack copies a new task's id, request id, key, payload and trace context into
// one allocation of the state's own. The record's copies come from a
// decoded request or log record, each its own small allocation beside
// others that die with the request; kept as they are, they would pin
// partly empty memory spans for as long as the task lives. Nothing writes
// to the payload (a Task is read-only), so the strings may share its
// allocation.
func pack(id, requestID, key string, payload []byte, tc TraceContext) (string, string, string, []byte, TraceContext) {
	buf := make([]byte, len(id)+len(requestID)+len(key)+len(tc.Parent)+len(tc.State)+len(payload))
	off := 0
	str := func(v string) string {
		if v == "" {
			return ""
		}
		n := copy(buf[off:], v)
		off += n
		return unsafe.String(&buf[off-n], n)
	}
	id, requestID, key = str(id), str(requestID), str(key)
	tc.Parent, tc.State = str(tc.Parent), str(tc.State)
	if len(payload) > 0 {
		copy(buf[off:], payload)
		payload = buf[off:len(buf):len(buf)]
	}
	return id, requestID, key, payload, tc
}
