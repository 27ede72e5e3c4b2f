package coordinator

// A sequential model of one task's state machine (DESIGN.md §2–§3) for
// porcupine, and a recorder of client-visible operations with their
// invoke and return times. The simulation (sim_test.go) and the
// linearizability tests (linearizability_test.go) record histories with it;
// cmd/tenure/linearizability_test.go holds a twin for the API (test files
// of one package cannot be imported by another).
//
// The model is per task: the history is partitioned by task id, and a
// partition is linearizable exactly when the task's operations are.
//
// The model has no clock. A lease may expire at any moment, so every
// answer that an expiry explains is accepted, and the expiry is applied to
// the model's state only when an answer reveals it (lazily). That is
// sound: an expiry is an internal step that may happen at any point, and
// applying it as late as possible accepts every history that applying it
// earlier would. Answers that no expiry explains (a Get that shows an
// acknowledged submit missing, a completed task leased again, two winning
// commits) are rejected.

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/tenurehq/tenure/internal/state"
)

// Operation kinds.
const (
	opSubmit    = "submit"
	opLease     = "lease"
	opCommit    = "commit"
	opComplete  = "complete"
	opFail      = "fail"
	opHeartbeat = "heartbeat"
	opGet       = "get"
	opKill      = "kill"
)

// Error kinds in outputs ("" is success).
const (
	errNotFound         = "not_found"
	errLeaseLost        = "lease_lost"
	errAlreadyCommitted = "already_committed"
	errWrongState       = "wrong_state"
)

// linInput is what an operation asked. Task is the partition key; for a
// submit it is filled in from the answer (or, for a submit whose answer
// never came, from the final state).
type linInput struct {
	Op          string
	Task        string
	Lease       string // commit, complete, fail, heartbeat
	RequestID   string // submit
	Payload     string // submit
	MaxAttempts uint32 // submit
	Result      string // commit, complete
	Permanent   bool   // fail
	Reason      string // fail, kill
	Worker      string // lease
}

// linOutput is what the operation answered.
type linOutput struct {
	// Pending: no answer came (a crash, a failed log). The operation may or
	// may not have taken effect. Only a submit stays pending in a checked
	// history; the other kinds are resolved from the final state first
	// (see resolvePending).
	Pending bool
	// Unchecked: the answer was recovered from the final state, which does
	// not tell its details (a fencing token's attempt, a retry decision).
	Unchecked bool
	Err       string
	// submit
	Duplicate bool
	// lease: one granted task
	LeaseID         string
	Attempt         uint32 // lease; commit: the fencing token's attempt; get
	Committed       bool
	CommittedResult string
	// fail
	Retry bool // WAITING for a retry rather than FAILED
	// get
	State       string
	CurLease    string
	CommittedBy string
	Result      string
}

// linState is the model's state of one task. It is comparable, so the
// checker's default equality (==) works.
type linState struct {
	Exists      bool
	RequestID   string
	MaxAttempts uint32
	State       string
	Attempt     uint32
	Lease       string // current lease, "" if none
	CommittedBy string
	Result      string
	DoneBy      string // the lease whose Complete finished the task
}

var (
	sWaiting   = state.Waiting.String()
	sLeased    = state.Leased.String()
	sCommitted = state.Committed.String()
	sCompleted = state.Completed.String()
	sFailed    = state.Failed.String()
	sDead      = state.Dead.String()
)

func terminal(st string) bool { return st == sCompleted || st == sFailed || st == sDead }

// expired is s after its current lease expired (LeaseExpired): an
// uncommitted task waits for a retry or, on its last attempt, fails; a
// committed one keeps its commit and waits to be finalised.
func (s linState) expired() linState {
	if s.Lease == "" {
		return s
	}
	n := s
	n.Lease = ""
	if s.State == sLeased {
		n.State = sFailed
		if s.Attempt < s.MaxAttempts {
			n.State = sWaiting
		}
	}
	return n
}

// refused is the state after a lease-holder operation by lease was refused
// with err, and whether that refusal is possible. A refusal of the current
// lease means it expired; of another lease, nothing changed. Another
// attempt's commit makes the refusal "already committed", otherwise it is
// "lease lost".
func (s linState) refused(lease, err string) (bool, linState) {
	other := s.CommittedBy != "" && s.CommittedBy != lease
	switch err {
	case errAlreadyCommitted:
		if !other {
			return false, s
		}
	case errLeaseLost:
		if other {
			return false, s
		}
	default:
		return false, s
	}
	if s.Lease == lease {
		return true, s.expired()
	}
	return true, s
}

func linStep(st, in0, out0 any) (bool, any) {
	s, in, out := st.(linState), in0.(linInput), out0.(linOutput)
	if in.Op == opSubmit {
		return modelSubmit(s, in, out)
	}
	if out.Pending {
		return false, s // must have been resolved (resolvePending)
	}
	if !s.Exists || out.Err == errNotFound {
		return !s.Exists && out.Err == errNotFound, s
	}
	switch in.Op {
	case opLease:
		return modelLease(s, out)
	case opCommit:
		return modelCommit(s, in, out)
	case opComplete:
		return modelComplete(s, in, out)
	case opFail:
		return modelFail(s, in, out)
	case opHeartbeat:
		if out.Err == "" {
			return s.Lease == in.Lease, s
		}
		return s.refused(in.Lease, out.Err)
	case opKill:
		return modelKill(s, out)
	case opGet:
		for _, x := range []linState{s, s.expired()} {
			if x.State == out.State && x.Attempt == out.Attempt && x.Lease == out.CurLease &&
				x.CommittedBy == out.CommittedBy && x.Result == out.Result {
				return true, x
			}
		}
		return false, s
	}
	panic("model: unknown operation " + in.Op)
}

func modelSubmit(s linState, in linInput, out linOutput) (bool, any) {
	created := linState{Exists: true, RequestID: in.RequestID, MaxAttempts: in.MaxAttempts, State: sWaiting}
	same := s.Exists && in.RequestID != "" && s.RequestID == in.RequestID
	switch {
	case out.Pending:
		// It created the task, or (with a request id) found it created.
		if !s.Exists {
			return true, created
		}
		return same, s
	case out.Err != "":
		return false, s
	case out.Duplicate:
		return same, s
	default:
		return !s.Exists, created
	}
}

func modelLease(s linState, out linOutput) (bool, any) {
	if out.Err != "" {
		return false, s
	}
	// The task is offered if it has no lease, or once its lease expired.
	for _, x := range []linState{s, s.expired()} {
		if x.Lease != "" || (x.State != sWaiting && x.State != sCommitted) {
			continue
		}
		if out.Attempt != x.Attempt+1 || out.Committed != (x.State == sCommitted) {
			continue
		}
		if out.Committed && !out.Unchecked && out.CommittedResult != x.Result {
			continue
		}
		n := x
		n.Lease, n.Attempt = out.LeaseID, out.Attempt
		if x.State == sWaiting {
			n.State = sLeased
		}
		return true, n
	}
	return false, s
}

func modelCommit(s linState, in linInput, out linOutput) (bool, any) {
	if s.CommittedBy == in.Lease {
		return out.Err == "", s // a retry of the winning commit
	}
	if out.Err != "" {
		return s.refused(in.Lease, out.Err)
	}
	if s.Lease != in.Lease || s.State != sLeased || (!out.Unchecked && out.Attempt != s.Attempt) {
		return false, s
	}
	n := s
	n.State, n.CommittedBy, n.Result = sCommitted, in.Lease, in.Result
	return true, n
}

func modelComplete(s linState, in linInput, out linOutput) (bool, any) {
	if s.State == sCompleted && s.DoneBy == in.Lease {
		return out.Err == "", s // a retry of the completion
	}
	if out.Err != "" {
		return s.refused(in.Lease, out.Err)
	}
	if s.Lease != in.Lease || (s.State != sLeased && s.State != sCommitted) {
		return false, s
	}
	n := s
	if s.State == sLeased { // commit and done in one record
		n.CommittedBy, n.Result = in.Lease, in.Result
	}
	n.State, n.Lease, n.DoneBy = sCompleted, "", in.Lease
	return true, n
}

func modelFail(s linState, in linInput, out linOutput) (bool, any) {
	switch out.Err {
	case "":
		if s.Lease != in.Lease || s.State != sLeased {
			return false, s
		}
		retry := !in.Permanent && s.Attempt < s.MaxAttempts
		if !out.Unchecked && out.Retry != retry {
			return false, s
		}
		n := s
		n.Lease, n.State = "", sFailed
		if retry {
			n.State = sWaiting
		}
		return true, n
	case errWrongState:
		// The lease still holds, but its task is committed: finish it
		// with Complete.
		return s.Lease == in.Lease && s.State == sCommitted, s
	}
	return s.refused(in.Lease, out.Err)
}

func modelKill(s linState, out linOutput) (bool, any) {
	switch out.Err {
	case "":
		// Kill does not expire a lease first: a task whose lease is past
		// due but not yet expired is still LEASED (or COMMITTED).
		if terminal(s.State) {
			return false, s
		}
		n := s
		n.State, n.Lease = sDead, ""
		return true, n
	case errWrongState:
		for _, x := range []linState{s, s.expired()} {
			if terminal(x.State) {
				return true, x
			}
		}
	}
	return false, s
}

func describeOp(in0, out0 any) string {
	in, out := in0.(linInput), out0.(linOutput)
	var b strings.Builder
	switch in.Op {
	case opSubmit:
		fmt.Fprintf(&b, "submit(rid=%q, attempts=%d)", in.RequestID, in.MaxAttempts)
	case opLease:
		fmt.Fprintf(&b, "lease(worker=%s)", in.Worker)
	case opCommit, opComplete:
		fmt.Fprintf(&b, "%s(%s, %q)", in.Op, short(in.Lease), in.Result)
	case opFail:
		fmt.Fprintf(&b, "fail(%s, permanent=%v)", short(in.Lease), in.Permanent)
	case opHeartbeat:
		fmt.Fprintf(&b, "heartbeat(%s)", short(in.Lease))
	default:
		b.WriteString(in.Op + "()")
	}
	b.WriteString(" -> ")
	switch {
	case out.Pending:
		b.WriteString("no answer")
	case out.Err != "":
		b.WriteString(out.Err)
	case in.Op == opSubmit:
		fmt.Fprintf(&b, "%s duplicate=%v", short(in.Task), out.Duplicate)
	case in.Op == opLease:
		fmt.Fprintf(&b, "lease %s attempt %d committed=%v", short(out.LeaseID), out.Attempt, out.Committed)
	case in.Op == opFail:
		fmt.Fprintf(&b, "ok retry=%v", out.Retry)
	case in.Op == opGet:
		fmt.Fprintf(&b, "%s attempt %d lease %s committed by %s result %q", out.State, out.Attempt, short(out.CurLease), short(out.CommittedBy), out.Result)
	default:
		b.WriteString("ok")
	}
	if out.Unchecked {
		b.WriteString(" (recovered from the final state)")
	}
	return b.String()
}

func describeState(st any) string {
	s := st.(linState)
	if !s.Exists {
		return "no task"
	}
	return fmt.Sprintf("%s attempt %d/%d lease %s committed by %s result %q done by %s",
		s.State, s.Attempt, s.MaxAttempts, short(s.Lease), short(s.CommittedBy), s.Result, short(s.DoneBy))
}

// short abbreviates a 26-character id for descriptions.
func short(id string) string {
	if id == "" {
		return "-"
	}
	if len(id) > 8 {
		return "…" + id[len(id)-6:]
	}
	return id
}

// taskModel is the per-task model, partitioned by task id.
var taskModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linInput).Task
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init:              func() any { return linState{} },
	Step:              linStep,
	DescribeOperation: describeOp,
	DescribeState:     describeState,
}

// pendingEnd is the return time of an operation that never returned: it
// may take effect at any point after its call.
const pendingEnd = math.MaxInt64

// recorder collects a history from any number of goroutines. Times are a
// logical counter: porcupine needs only their order.
type recorder struct {
	now     atomic.Int64
	mu      sync.Mutex
	ops     []porcupine.Operation
	pending []porcupine.Operation // no answer; resolved at the end
}

func (r *recorder) call() int64 { return r.now.Add(1) }

// done records a completed operation called at call; an output marked
// Pending goes to the unresolved list.
func (r *recorder) done(client int, in linInput, call int64, out linOutput) {
	ret := r.now.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	if out.Pending {
		op.Return = pendingEnd
		r.pending = append(r.pending, op)
		return
	}
	r.ops = append(r.ops, op)
}

// errKind maps a coordinator error to its kind in an output; ok is false
// for an error after which the outcome is unknown (unavailable, ctx).
func errKind(err error) (kind string, ok bool) {
	switch {
	case err == nil:
		return "", true
	case errors.Is(err, ErrNotFound):
		return errNotFound, true
	case errors.Is(err, ErrLeaseLost):
		return errLeaseLost, true
	case errors.Is(err, ErrAlreadyCommitted):
		return errAlreadyCommitted, true
	case errors.Is(err, ErrWrongState):
		return errWrongState, true
	}
	return "", false
}

// getOutput is the output of a Get that returned t.
func getOutput(t *state.Task) linOutput {
	out := linOutput{State: t.State.String(), Attempt: t.Attempt, CommittedBy: t.CommittedBy, Result: string(t.Result)}
	if cur := t.CurrentLease(); cur != nil {
		out.CurLease = cur.LeaseID
	}
	return out
}

// resolvePending turns the operations that got no answer into what the
// final state says they did, and returns them for the history; those that
// left no trace are dropped (they took no effect, or only an effect the
// model does not see, such as an expiry). It relies on inputs the test
// makes unique: one worker id per Lease call, one payload per submitted
// task (a submit retried with its request id reuses it), one reason per
// Fail and Kill.
//
// An acknowledged operation is never resolved this way, so a lost
// acknowledgement cannot be explained away here.
func resolvePending(pending []porcupine.Operation, final []*state.Task) []porcupine.Operation {
	byPayload := map[string][]*state.Task{}
	byID := map[string]*state.Task{}
	byWorker := map[string][]*state.Task{}
	for _, t := range final {
		byPayload[string(t.Payload)] = append(byPayload[string(t.Payload)], t)
		byID[t.ID] = t
		for _, e := range t.Executions {
			byWorker[e.WorkerID] = append(byWorker[e.WorkerID], t)
		}
	}
	exec := func(t *state.Task, lease string) *state.Execution {
		if t == nil {
			return nil
		}
		for i := range t.Executions {
			if t.Executions[i].LeaseID == lease {
				return &t.Executions[i]
			}
		}
		return nil
	}
	var out []porcupine.Operation
	for _, op := range pending {
		in := op.Input.(linInput)
		resolved := linOutput{Unchecked: true}
		t := byID[in.Task]
		switch in.Op {
		case opSubmit:
			for _, t := range byPayload[in.Payload] {
				if t.RequestID == in.RequestID {
					in.Task = t.ID
					op.Input, op.Output = in, linOutput{Pending: true}
					out = append(out, op)
				}
			}
			continue
		case opLease:
			for _, t := range byWorker[in.Worker] {
				for _, e := range t.Executions {
					if e.WorkerID == in.Worker {
						in.Task = t.ID
						op.Input = in
						op.Output = linOutput{Unchecked: true, LeaseID: e.LeaseID, Attempt: e.Attempt, Committed: e.Finalize}
						out = append(out, op)
					}
				}
			}
			continue
		case opCommit:
			if t == nil || t.CommittedBy != in.Lease {
				continue
			}
		case opComplete:
			if e := exec(t, in.Lease); e == nil || e.Status != state.ExecDone {
				continue
			}
		case opFail:
			if e := exec(t, in.Lease); e == nil || e.Status != state.ExecAborted || e.Reason != in.Reason {
				continue
			}
		case opKill:
			if t == nil || t.State != state.Dead || t.FailureReason != in.Reason {
				continue
			}
		default: // get, heartbeat: no effect the model sees
			continue
		}
		op.Output = resolved
		out = append(out, op)
	}
	return out
}

// checkHistory checks ops with porcupine. On a violation it returns an
// error that shows the first task whose operations are not linearizable
// and, with visualise, names a temporary file holding porcupine's
// visualisation of the history.
func checkHistory(ops []porcupine.Operation, timeout time.Duration, visualise bool) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(taskModel, ops, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	msg := fmt.Sprintf("porcupine: history of %d operations is %s", len(ops), res)
	if visualise {
		if f, err := os.CreateTemp("", "tenure-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(taskModel, info, f); err == nil {
				msg += "; visualisation: " + f.Name()
			}
			f.Close()
		}
	}
	if res == porcupine.Illegal {
		msg += "\n" + explainViolation(ops)
	}
	return res, errors.New(msg)
}

// explainViolation finds the first task whose partition is not
// linearizable and lists its operations in call order.
func explainViolation(ops []porcupine.Operation) string {
	for _, part := range taskModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(taskModel, part, 10*time.Second) != porcupine.Illegal {
			continue
		}
		part = slices.Clone(part)
		slices.SortStableFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		fmt.Fprintf(&b, "task %s is not linearizable; its operations in call order:", part[0].Input.(linInput).Task)
		for _, op := range part {
			ret := fmt.Sprint(op.Return)
			if op.Return == pendingEnd {
				ret = "∞"
			}
			fmt.Fprintf(&b, "\n  [%d, %s] client %d: %s", op.Call, ret, op.ClientId, describeOp(op.Input, op.Output))
		}
		return b.String()
	}
	return "(no single task is illegal on its own)"
}
