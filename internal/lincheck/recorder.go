package lincheck

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/anishathalye/porcupine"
)

// PendingEnd is the return time of an operation that never returned: it
// may take effect at any point after its call.
const PendingEnd = math.MaxInt64

// Recorder collects a history from any number of goroutines. Times are a
// logical counter: porcupine needs only their order. Its zero value is
// ready to use.
type Recorder struct {
	now     atomic.Int64
	mu      sync.Mutex
	ops     []porcupine.Operation
	pending []porcupine.Operation // no answer; resolved at the end
}

// Call returns the next time: an operation's call, or a return shared by
// several operations (the tasks of one Lease, the requests of one batch).
func (r *Recorder) Call() int64 { return r.now.Add(1) }

// Now is the last time handed out.
func (r *Recorder) Now() int64 { return r.now.Load() }

// Add records op; an op whose Out is Pending goes to the unresolved list,
// with its return at PendingEnd.
func (r *Recorder) Add(op porcupine.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op.Output.(Out).Pending {
		op.Return = PendingEnd
		r.pending = append(r.pending, op)
		return
	}
	r.ops = append(r.ops, op)
}

// Done records an operation called at call that returns now.
func (r *Recorder) Done(client int, in In, call int64, out Out) {
	r.Add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: r.now.Add(1)})
}

// Ops is a copy of the answered operations.
func (r *Recorder) Ops() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Pending is a copy of the operations that got no answer.
func (r *Recorder) Pending() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.pending...)
}
