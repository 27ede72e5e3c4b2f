package snapshot

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/pbwire"
	"github.com/tenurehq/tenure/internal/state"
)

// taskEncoder appends tasks to a chunk as field 1 of a TaskChunk, writing
// the bytes proto.Marshal writes for TaskMessage(t, b) without
// building the message: a snapshot encodes every task the state holds, and
// the message, its executions and its retry policy were most of that cost
// and all of its garbage. Any task it cannot encode that way (a string that
// is not valid UTF-8, which proto refuses) goes through proto, so that the
// two paths cannot differ in what they accept. The decoder's fast path
// (chunk.go) is its mirror.
type taskEncoder struct {
	body []byte // one task's encoding, before its length is known
	exec []byte // one execution's
}

// appendTask appends the task field of t to chunk.
func (e *taskEncoder) appendTask(chunk []byte, t *state.Task, beside state.Beside) ([]byte, error) {
	if !validStrings(t, beside) {
		b, err := proto.MarshalOptions{}.MarshalAppend(e.body[:0], TaskMessage(t, beside))
		if err != nil {
			return chunk, err
		}
		e.body = b
	} else {
		e.body = e.task(e.body[:0], t, beside)
	}
	chunk = protowire.AppendTag(chunk, 1, protowire.BytesType)
	return protowire.AppendBytes(chunk, e.body), nil
}

// validStrings reports whether every string field of t and b is valid
// UTF-8, as proto3 requires.
func validStrings(t *state.Task, b state.Beside) bool {
	if !pbwire.ValidStrings(t.ID, t.Namespace, t.Queue, t.RequestID, t.CommittedBy, t.FailureReason,
		b.Trace.Parent, b.Trace.State, b.Report.Message, t.Kind, b.Key, b.Graph.Workflow, b.Graph.Parent) {
		return false
	}
	for _, e := range b.Graph.Edges {
		if !pbwire.ValidStrings(e.ID) {
			return false
		}
	}
	for i := range t.Executions {
		x := &t.Executions[i]
		if !pbwire.ValidStrings(x.LeaseID, x.WorkerID, x.Reason) {
			return false
		}
	}
	return true
}

// task appends the fields of TaskMessage(t, beside) to b in field order,
// leaving out zero values as proto3 does.
func (e *taskEncoder) task(b []byte, t *state.Task, beside state.Beside) []byte {
	b = pbwire.String(b, 1, t.ID)
	b = pbwire.String(b, 2, t.Namespace)
	b = pbwire.String(b, 3, t.Queue)
	b = pbwire.Bytes(b, 4, t.Payload)
	b = pbwire.Varint(b, 5, uint64(t.Window))
	b = pbwire.RetryPolicy(b, 6, t.Retry)
	b = pbwire.String(b, 7, t.RequestID)
	b = pbwire.Varint(b, 8, protowire.EncodeZigZag(int64(t.Priority)))
	b = pbwire.Fixed(b, 9, int64(t.NotBefore))
	b = pbwire.Fixed(b, 10, int64(t.CreatedAt))
	b = pbwire.Fixed(b, 11, int64(t.UpdatedAt))
	b = pbwire.Varint(b, 12, t.CreatedLSN)
	b = pbwire.Varint(b, 13, uint64(int64(t.State)))
	b = pbwire.Varint(b, 14, uint64(t.Attempt))
	b = pbwire.Bytes(b, 15, t.Result)
	b = pbwire.String(b, 16, t.CommittedBy)
	b = pbwire.String(b, 17, t.FailureReason)
	for i := range t.Executions {
		e.exec = execution(e.exec[:0], &t.Executions[i])
		b = protowire.AppendTag(b, 18, protowire.BytesType)
		b = protowire.AppendBytes(b, e.exec)
	}
	if lsns := t.LSNs(); len(lsns) > 0 {
		n := 0
		for _, v := range lsns {
			n += protowire.SizeVarint(v)
		}
		b = protowire.AppendTag(b, 19, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		for _, v := range lsns {
			b = protowire.AppendVarint(b, v)
		}
	}
	if t.LeaseIndex() >= 0 {
		b = pbwire.Varint(b, 20, 1)
	}
	b = pbwire.Varint(b, 21, uint64(t.AttemptBase))
	b = pbwire.Fixed(b, 22, int64(beside.Deadline))
	b = pbwire.String(b, 23, beside.Trace.Parent)
	b = pbwire.String(b, 24, beside.Trace.State)
	if r := beside.Report; r.At != 0 {
		e.exec = report(e.exec[:0], r)
		b = protowire.AppendTag(b, 25, protowire.BytesType)
		b = protowire.AppendBytes(b, e.exec)
	}
	b = pbwire.String(b, 26, t.Kind)
	b = pbwire.String(b, 27, beside.Key)
	g := &beside.Graph
	b = pbwire.String(b, 28, g.Workflow)
	for i, x := range g.Edges {
		e.exec = pbwire.String(e.exec[:0], 1, x.ID)
		e.exec = pbwire.Varint(e.exec, 2, uint64(x.State))
		if x.Remote {
			e.exec = pbwire.Varint(e.exec, 3, 1)
		}
		if i < len(g.Results) && len(g.Results[i]) > 0 {
			e.exec = protowire.AppendTag(e.exec, 4, protowire.BytesType)
			e.exec = protowire.AppendBytes(e.exec, g.Results[i])
		}
		b = protowire.AppendTag(b, 29, protowire.BytesType)
		b = protowire.AppendBytes(b, e.exec)
	}
	b = pbwire.Varint(b, 30, uint64(g.Policy))
	b = pbwire.String(b, 31, g.Parent)
	return pbwire.Varint(b, 32, uint64(g.Seq))
}

// report appends the fields of a ProgressSnapshot of r to b.
func report(b []byte, r state.LastReport) []byte {
	b = pbwire.String(b, 1, r.Message)
	b = pbwire.Varint(b, 2, uint64(r.Percent))
	if r.HasPercent {
		b = pbwire.Varint(b, 3, 1)
	}
	return pbwire.Fixed(b, 4, int64(r.At))
}

// execution appends the fields of an ExecutionSnapshot of x to b.
func execution(b []byte, x *state.Execution) []byte {
	b = pbwire.Varint(b, 1, uint64(x.Attempt))
	b = pbwire.String(b, 2, x.LeaseID)
	b = pbwire.String(b, 3, x.WorkerID)
	b = pbwire.Varint(b, 4, uint64(int64(x.Status)))
	if x.Finalize {
		b = pbwire.Varint(b, 5, 1)
	}
	b = pbwire.Fixed(b, 6, int64(x.LeasedAt))
	b = pbwire.Fixed(b, 7, int64(x.LeaseExpiry))
	b = pbwire.Fixed(b, 8, int64(x.StartedAt))
	b = pbwire.Fixed(b, 9, int64(x.CommittedAt))
	b = pbwire.Fixed(b, 10, int64(x.FinishedAt))
	b = pbwire.String(b, 11, x.Reason)
	return pbwire.Varint(b, 12, uint64(uint32(x.Refused)))
}
