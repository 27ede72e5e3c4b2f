package snapshot

import (
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/snapshot/snapshotpb"
	"github.com/tenurehq/tenure/internal/state"
)

// chunkDecoder turns the payload of a chunk (a TaskChunk message) into
// tasks for state.Loader.
//
// It has a fast path that reads the message with protowire straight into
// state.Task values, without the intermediate snapshotpb messages. The fast
// path accepts only the plain shape Encode writes: known field numbers with
// their declared wire types, each singular field at most once, lsns packed,
// strings valid UTF-8. For that shape proto.Unmarshal would succeed and
// taskFromMessage would give the same tasks. On anything else (unusual but
// valid, or invalid) it gives up, and the chunk is decoded again by
// proto.Unmarshal and taskFromMessage, which decide what it means and word
// any error, exactly as before the fast path existed.
//
// A chunkDecoder is not safe for concurrent use; each decoding goroutine
// has its own.
type chunkDecoder struct {
	msg   snapshotpb.TaskChunk // the fallback's message, reused
	execs []state.Execution    // scratch for one task's executions

	// The last value of a few strings that many tasks share, so that equal
	// values share one string instead of one allocation each.
	namespace, queue, worker, reason, failure, kind string
	// The last queue key and policy, shared the same way by the tasks of a
	// chunk (the Loader replaces them by the state's own copies).
	key    *state.QueueKey
	policy *state.Policy
}

// queueKey returns a QueueKey equal to k, the previous task's if it is.
func (d *chunkDecoder) queueKey(k state.QueueKey) *state.QueueKey {
	if d.key == nil || *d.key != k {
		d.key = &k
	}
	return d.key
}

// taskPolicy returns a Policy equal to p, the previous task's if it is.
func (d *chunkDecoder) taskPolicy(p state.Policy) *state.Policy {
	if d.policy == nil || *d.policy != p {
		d.policy = &p
	}
	return d.policy
}

// chunkExtra is what a chunk holds beside tasks: queues, schedules and
// outbox holds.
type chunkExtra struct {
	queues     []state.QueueImage
	schedules  []*state.Schedule
	workflows  []state.WorkflowImage
	holds      []state.OutboxHold
	deliveries []state.Delivery
}

func (e chunkExtra) empty() bool {
	return len(e.queues) == 0 && len(e.schedules) == 0 && len(e.workflows) == 0 && len(e.holds) == 0 && len(e.deliveries) == 0
}

// load adds what e holds to l, in the order of its fields, up to the
// first refusal, which it returns.
func (e chunkExtra) load(l *state.Loader) error {
	for _, add := range []func() error{
		func() error { return addAll(e.queues, l.AddQueue) },
		func() error { return addAll(e.schedules, l.AddSchedule) },
		func() error { return addAll(e.workflows, l.AddWorkflow) },
		func() error { return addAll(e.holds, l.AddHold) },
		func() error { return addAll(e.deliveries, l.AddDelivery) },
	} {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

// addAll calls add with each of items, up to the first error.
func addAll[T any](items []T, add func(T) error) error {
	for _, it := range items {
		if err := add(it); err != nil {
			return err
		}
	}
	return nil
}

// decode appends the tasks of payload p, and what else the Loader takes
// with each, to tasks and extras, and returns its queues and schedules. The
// tasks own their memory: nothing aliases p. An error is proto.Unmarshal's.
func (d *chunkDecoder) decode(p []byte, tasks []*state.Task, extras []taskExtra) ([]*state.Task, []taskExtra, chunkExtra, error) {
	n0 := len(tasks)
	if tasks, extras, ok := d.fast(p, tasks, extras); ok {
		return tasks, extras, chunkExtra{}, nil
	}
	clear(tasks[n0:])
	tasks, extras = tasks[:n0], extras[:n0]
	var extra chunkExtra
	err := proto.Unmarshal(p, &d.msg)
	if err == nil {
		for _, m := range d.msg.Tasks {
			t, x := taskFromMessage(m)
			tasks = append(tasks, t)
			extras = append(extras, x)
		}
		for _, m := range d.msg.Queues {
			extra.queues = append(extra.queues, queueFromMessage(m))
		}
		for _, m := range d.msg.Schedules {
			extra.schedules = append(extra.schedules, scheduleFromMessage(m))
		}
		for _, m := range d.msg.Workflows {
			extra.workflows = append(extra.workflows, workflowFromMessage(m))
		}
		for _, m := range d.msg.OutboxHolds {
			extra.holds = append(extra.holds, state.OutboxHold{OutboxRow: state.OutboxRow{Outbox: m.Outbox, Row: m.Row},
				Namespace: m.Namespace, Queue: m.Queue, RequestID: m.RequestId})
		}
		for _, m := range d.msg.Deliveries {
			extra.deliveries = append(extra.deliveries, deliveryFromMessage(m))
		}
	}
	d.msg.Reset()
	return tasks, extras, extra, err
}

// fast is the fast path of decode; false means it gave up.
func (d *chunkDecoder) fast(p []byte, tasks []*state.Task, extras []taskExtra) ([]*state.Task, []taskExtra, bool) {
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return tasks, extras, false
		}
		p = p[n:]
		b, n := protowire.ConsumeBytes(p)
		if n < 0 {
			return tasks, extras, false
		}
		p = p[n:]
		t, x, ok := d.task(b)
		if !ok {
			return tasks, extras, false
		}
		tasks = append(tasks, t)
		extras = append(extras, x)
	}
	return tasks, extras, true
}

// task decodes one TaskSnapshot as taskFromMessage(proto.Unmarshal(b))
// would, or gives up.
func (d *chunkDecoder) task(b []byte) (t *state.Task, x taskExtra, ok bool) {
	t = new(state.Task)
	var (
		seen         uint64
		leaseCurrent bool
		key          state.QueueKey
		policy       state.Policy
		progress     state.Progress
	)
	execs := d.execs[:0]
	defer func() { clear(execs); d.execs = execs[:0] }()
	for len(b) > 0 {
		num, typ, rest, ok := nextTag(b, 32, 1<<18|1<<29, &seen)
		if !ok {
			return nil, x, false
		}
		b = rest
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, x, false
			}
			b = b[n:]
			switch num {
			case 5:
				policy.Window = time.Duration(int64(v))
			case 8:
				t.Priority = int32(protowire.DecodeZigZag(v & math.MaxUint32))
			case 12:
				t.CreatedLSN = v
			case 13:
				t.State = clampState(snapshotpb.TaskState(int32(v)))
			case 14:
				t.Attempt = uint32(v)
			case 21:
				progress.AttemptBase = uint32(v)
			case 20:
				leaseCurrent = protowire.DecodeBool(v)
			case 30:
				x.beside.Graph.Policy = state.DepPolicy(min(v, 255))
			case 32:
				x.beside.Graph.Seq = uint16(min(v, 0xffff))
			default:
				return nil, x, false
			}
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return nil, x, false
			}
			b = b[n:]
			switch num {
			case 9:
				t.NotBefore = state.Time(int64(v))
			case 10:
				t.CreatedAt = state.Time(int64(v))
			case 11:
				t.UpdatedAt = state.Time(int64(v))
			case 22:
				x.beside.Deadline = state.Time(int64(v))
			default:
				return nil, x, false
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, x, false
			}
			b = b[n:]
			ok := true
			switch num {
			case 1:
				t.ID, ok = newString(v)
			case 2:
				key.Namespace, ok = sharedString(&d.namespace, v)
			case 3:
				key.Queue, ok = sharedString(&d.queue, v)
			case 4:
				t.Payload = cloneBytes(v)
			case 6:
				policy.Retry, ok = retryPolicy(v)
			case 7:
				t.RequestID, ok = newString(v)
			case 15:
				progress.Result = cloneBytes(v)
			case 16:
				// Usually the lease id of the last execution.
				if k := len(execs); k > 0 && string(v) == execs[k-1].LeaseID {
					progress.CommittedBy = execs[k-1].LeaseID
				} else {
					progress.CommittedBy, ok = newString(v)
				}
			case 17:
				progress.FailureReason, ok = sharedString(&d.failure, v)
			case 18:
				execs = append(execs, state.Execution{})
				ok = d.execution(v, &execs[len(execs)-1], progress.CommittedBy)
			case 19:
				progress.History, ok = packedUint64s(v)
			case 23:
				x.beside.Trace.Parent, ok = newString(v)
			case 24:
				x.beside.Trace.State, ok = newString(v)
			case 25:
				ok = lastReport(v, &x.beside.Report)
			case 26:
				policy.Kind, ok = sharedString(&d.kind, v)
			case 27:
				x.beside.Key, ok = newString(v)
			case 28:
				x.beside.Graph.Workflow, ok = newString(v)
			case 29:
				x.beside.Graph.Edges = append(x.beside.Graph.Edges, state.Edge{})
				var result []byte
				ok = edge(v, &x.beside.Graph.Edges[len(x.beside.Graph.Edges)-1], &result)
				if i := len(x.beside.Graph.Edges) - 1; result != nil {
					if len(x.beside.Graph.Results) <= i {
						x.beside.Graph.Results = append(x.beside.Graph.Results, make([][]byte, i+1-len(x.beside.Graph.Results))...)
					}
					x.beside.Graph.Results[i] = result
				}
			case 31:
				x.beside.Graph.Parent, ok = newString(v)
			default:
				ok = false
			}
			if !ok {
				return nil, x, false
			}
		default:
			return nil, x, false
		}
	}
	if len(execs) > 0 {
		progress.Executions = make([]state.Execution, len(execs))
		copy(progress.Executions, execs)
	}
	if g := &x.beside.Graph; g.Results != nil && len(g.Results) < len(g.Edges) {
		g.Results = append(g.Results, make([][]byte, len(g.Edges)-len(g.Results))...)
	}
	t.Progress = orNil(&progress)
	t.QueueKey, t.Policy = d.queueKey(key), d.taskPolicy(policy)
	x.lease = leaseIndex(len(execs), leaseCurrent)
	return t, x, true
}

// execution decodes one ExecutionSnapshot into e, or gives up.
// committedBy is the task's CommittedBy so far, shared with an equal lease
// id.
func (d *chunkDecoder) execution(b []byte, e *state.Execution, committedBy string) bool {
	var seen uint64
	for len(b) > 0 {
		num, typ, rest, ok := nextTag(b, 12, 0, &seen)
		if !ok {
			return false
		}
		b = rest
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 1:
				e.Attempt = uint32(v)
			case 4:
				e.Status = clampStatus(snapshotpb.ExecutionStatus(int32(v)))
			case 5:
				e.Finalize = protowire.DecodeBool(v)
			case 12:
				e.Refused = clampRefused(uint32(v))
			default:
				return false
			}
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 6:
				e.LeasedAt = state.Time(int64(v))
			case 7:
				e.LeaseExpiry = state.Time(int64(v))
			case 8:
				e.StartedAt = state.Time(int64(v))
			case 9:
				e.CommittedAt = state.Time(int64(v))
			case 10:
				e.FinishedAt = state.Time(int64(v))
			default:
				return false
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			ok := true
			switch num {
			case 2:
				if committedBy != "" && string(v) == committedBy {
					e.LeaseID = committedBy
				} else {
					e.LeaseID, ok = newString(v)
				}
			case 3:
				e.WorkerID, ok = sharedString(&d.worker, v)
			case 11:
				e.Reason, ok = sharedString(&d.reason, v)
			default:
				ok = false
			}
			if !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// retryPolicy decodes a RetryPolicy as taskFromMessage would convert it, or
// gives up.
func retryPolicy(b []byte) (state.RetryPolicy, bool) {
	var (
		r    state.RetryPolicy
		seen uint64
	)
	for len(b) > 0 {
		num, typ, rest, ok := nextTag(b, 4, 0, &seen)
		if !ok {
			return r, false
		}
		b = rest
		switch {
		case typ == protowire.VarintType && num >= 1 && num <= 3:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return r, false
			}
			b = b[n:]
			switch num {
			case 1:
				r.MaxAttempts = uint32(v)
			case 2:
				r.InitialBackoff = time.Duration(int64(v))
			case 3:
				r.MaxBackoff = time.Duration(int64(v))
			}
		case typ == protowire.Fixed64Type && num == 4:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				return r, false
			}
			b = b[n:]
			r.Multiplier = math.Float64frombits(v)
		default:
			return r, false
		}
	}
	return r, true
}

// packedUint64s decodes a packed repeated uint64 field, or gives up (also
// on an empty one, which the fast path leaves to proto).
func packedUint64s(b []byte) ([]uint64, bool) {
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	if n == 0 {
		return nil, false
	}
	s := make([]uint64, 0, n)
	for len(b) > 0 {
		v, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return nil, false
		}
		b = b[k:]
		s = append(s, v)
	}
	return s, true
}

// newString copies a proto3 string field, which must be valid UTF-8.
func newString(b []byte) (string, bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// sharedString is newString that returns *last when it is equal, and
// otherwise remembers the new string in *last.
func sharedString(last *string, b []byte) (string, bool) {
	if string(b) == *last {
		return *last, true
	}
	s, ok := newString(b)
	if ok {
		*last = s
	}
	return s, ok
}

// cloneBytes copies a bytes field; empty is nil, as taskFromMessage makes
// it.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// edge decodes one DependencySnapshot into e, or gives up.
func edge(b []byte, e *state.Edge, result *[]byte) bool {
	return fields(b, 4, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (ok bool) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e.ID, ok = newString(v)
			return ok
		case num == 2 && typ == protowire.VarintType:
			e.State = state.EdgeState(min(x, 255))
			return true
		case num == 3 && typ == protowire.VarintType:
			e.Remote = protowire.DecodeBool(x)
			return true
		case num == 4 && typ == protowire.BytesType:
			*result = append([]byte(nil), v...)
			return true
		}
		return false
	})
}

// lastReport decodes one ProgressSnapshot into r, or gives up.
func lastReport(b []byte, r *state.LastReport) bool {
	return fields(b, 4, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (ok bool) {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.Message, ok = newString(v)
			return ok
		case num == 2 && typ == protowire.VarintType:
			r.Percent = uint32(x)
		case num == 3 && typ == protowire.VarintType:
			r.HasPercent = protowire.DecodeBool(x)
		case num == 4 && typ == protowire.Fixed64Type:
			r.At = state.Time(int64(x))
		default:
			return false
		}
		return true
	})
}

// fields walks the fields of a small message whose fields are numbered up
// to max, none repeated, calling fn with each: its number, wire type, and
// value (v for a bytes field, x for a varint or fixed64 one). It gives up,
// as fn may, on anything else.
func fields(b []byte, max protowire.Number, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool) bool {
	var seen uint64
	for len(b) > 0 {
		num, typ, rest, ok := nextTag(b, max, 0, &seen)
		if !ok {
			return false
		}
		var v []byte
		var x uint64
		n := -1
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(rest)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(rest)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(rest)
		}
		if n < 0 || !fn(num, typ, v, x) {
			return false
		}
		b = rest[n:]
	}
	return true
}

// nextTag consumes the tag at the start of b, the encoding of a message
// whose fields are numbered up to max, and returns the rest. It gives up
// (ok false: the caller leaves the message to proto) on a bad tag, a
// number past max, and a field seen before (seen has a bit per number),
// unless its bit is in repeated (the repeated fields; 0: none): proto
// merges a repeated singular field.
func nextTag(b []byte, max protowire.Number, repeated uint64, seen *uint64) (num protowire.Number, typ protowire.Type, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > max || num > 63 {
		return 0, 0, nil, false
	}
	bit := uint64(1) << num
	if *seen&bit != 0 && repeated&bit == 0 {
		return 0, 0, nil, false
	}
	*seen |= bit
	return num, typ, b[n:], true
}
