package lincheck

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Operation kinds (In.Op).
const (
	OpSubmit    = "submit"
	OpLease     = "lease"
	OpCommit    = "commit"
	OpComplete  = "complete"
	OpFail      = "fail"
	OpHeartbeat = "heartbeat"
	OpSnooze    = "snooze"
	OpGet       = "get"
	OpKill      = "kill"
	OpRetry     = "retry"
	// OpPause and OpResume pause and resume the one queue of the history;
	// they name no task and belong to every task's partition.
	OpPause  = "pause"
	OpResume = "resume"
)

// Error kinds in Out.Err ("" is success).
const (
	NotFound         = "not_found"
	LeaseLost        = "lease_lost"
	AlreadyCommitted = "already_committed"
	WrongState       = "wrong_state"
	// FailedPrecondition is the API's answer to Fail that stands for
	// either LeaseLost or WrongState.
	FailedPrecondition = "failed_precondition"
)

// Task states, as the coordinator and the API (without its prefix) name
// them.
const (
	StateWaiting   = "WAITING"
	StateLeased    = "LEASED"
	StateCommitted = "COMMITTED"
	StateCompleted = "COMPLETED"
	StateFailed    = "FAILED"
	StateDead      = "DEAD"
)

// In is what an operation asked. Task is the partition key; for a submit
// it is filled in from the answer (or, for a submit whose answer never
// came, from the final state by Resolve).
type In struct {
	Op          string
	Task        string
	Lease       string // commit, complete, fail, heartbeat, snooze
	RequestID   string // submit
	Payload     string // submit
	MaxAttempts uint32 // submit
	Result      string // commit, complete
	Permanent   bool   // fail
	Reason      string // fail, snooze, kill, retry
	Worker      string // lease
}

// Out is what the operation answered.
type Out struct {
	// Pending: no answer came (a crash, a failed log). The operation may or
	// may not have taken effect. Only a submit stays pending in a checked
	// history; the other kinds are resolved from the final state first
	// (see Resolve).
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

// State is the model's state of one task. It is comparable, so the
// checker's default equality (==) works.
type State struct {
	Exists      bool
	RequestID   string
	MaxAttempts uint32
	State       string
	Attempt     uint32
	Lease       string // current lease, "" if none
	CommittedBy string
	Result      string
	DoneBy      string // the lease whose Complete finished the task
	// Base is Attempt at the last operator retry: the attempts after it
	// count against MaxAttempts.
	Base uint32
	// Paused: the queue is paused, so a WAITING task is not leased.
	Paused bool
}

// attemptsLeft reports whether the retry policy allows another attempt.
func (s State) attemptsLeft() bool { return s.Attempt-s.Base < s.MaxAttempts }

// retryable reports whether an operator's retry applies: FAILED or DEAD,
// and never committed.
func (s State) retryable() bool {
	return (s.State == StateFailed || s.State == StateDead) && s.CommittedBy == ""
}

func terminal(st string) bool {
	return st == StateCompleted || st == StateFailed || st == StateDead
}

// expired is s after its current lease expired (LeaseExpired): an
// uncommitted task waits for a retry or, on its last attempt, fails; a
// committed one keeps its commit and waits to be finalised.
func (s State) expired() State {
	if s.Lease == "" {
		return s
	}
	n := s
	n.Lease = ""
	if s.State == StateLeased {
		n.State = StateFailed
		if s.attemptsLeft() {
			n.State = StateWaiting
		}
	}
	return n
}

// refused is the state after a lease-holder operation by lease was refused
// with err, and whether that refusal is possible. A refusal of the current
// lease means it expired; of another lease, nothing changed. Another
// attempt's commit makes the refusal "already committed", otherwise it is
// "lease lost" (for which FailedPrecondition also stands).
func (s State) refused(lease, err string) (bool, State) {
	other := s.CommittedBy != "" && s.CommittedBy != lease
	if err == FailedPrecondition {
		err = LeaseLost
	}
	switch err {
	case AlreadyCommitted:
		if !other {
			return false, s
		}
	case LeaseLost:
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

// Step is the model's transition: whether out is a possible answer to in
// from st, and the state after it. st is a State, in an In, out an Out.
func Step(st, in0, out0 any) (bool, any) {
	s, in, out := st.(State), in0.(In), out0.(Out)
	switch in.Op {
	case OpSubmit:
		return stepSubmit(s, in, out)
	case OpPause, OpResume:
		// Pause and resume are answered whatever the task's state. A
		// resume without an answer may have happened (Resolve keeps it
		// pending; a pause without one it drops): assuming it did only
		// allows more.
		if out.Err == NotFound {
			return true, s // the queue had no task yet: nothing to pause
		}
		n := s
		n.Paused = in.Op == OpPause
		return out.Err == "", n
	case OpRetry:
		return stepRetry(s, out)
	case OpKill:
		if out.Pending {
			// No answer came: it may or may not have happened (Resolve
			// keeps it pending); where it is placed, the checker tries
			// both.
			if !s.Exists || terminal(s.State) {
				return true, s
			}
			n := s
			n.State, n.Lease = StateDead, ""
			return true, n
		}
	}
	if out.Pending {
		return false, s // must have been resolved (Resolve)
	}
	if !s.Exists || out.Err == NotFound {
		return !s.Exists && out.Err == NotFound, s
	}
	switch in.Op {
	case OpLease:
		return stepLease(s, out)
	case OpCommit:
		return stepCommit(s, in, out)
	case OpComplete:
		return stepComplete(s, in, out)
	case OpFail:
		return stepFail(s, in, out)
	case OpSnooze:
		return stepSnooze(s, in, out)
	case OpHeartbeat:
		if out.Err == "" {
			return s.Lease == in.Lease, s
		}
		return s.refused(in.Lease, out.Err)
	case OpKill:
		return stepKill(s, out)
	case OpGet:
		for _, x := range []State{s, s.expired()} {
			if x.State == out.State && x.Attempt == out.Attempt && x.Lease == out.CurLease &&
				x.CommittedBy == out.CommittedBy && x.Result == out.Result {
				return true, x
			}
		}
		return false, s
	}
	panic("lincheck: unknown operation " + in.Op)
}

func stepSubmit(s State, in In, out Out) (bool, any) {
	created := State{Exists: true, RequestID: in.RequestID, MaxAttempts: in.MaxAttempts, State: StateWaiting}
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

func stepLease(s State, out Out) (bool, any) {
	if out.Err != "" {
		return false, s
	}
	// The task is offered if it has no lease, or once its lease expired.
	for _, x := range []State{s, s.expired()} {
		if x.Lease != "" || (x.State != StateWaiting && x.State != StateCommitted) || (x.State == StateWaiting && x.Paused) {
			continue
		}
		if out.Attempt != x.Attempt+1 || out.Committed != (x.State == StateCommitted) {
			continue
		}
		if out.Committed && !out.Unchecked && out.CommittedResult != x.Result {
			continue
		}
		n := x
		n.Lease, n.Attempt = out.LeaseID, out.Attempt
		if x.State == StateWaiting {
			n.State = StateLeased
		}
		return true, n
	}
	return false, s
}

func stepCommit(s State, in In, out Out) (bool, any) {
	if s.CommittedBy == in.Lease {
		return out.Err == "", s // a retry of the winning commit
	}
	if out.Err != "" {
		return s.refused(in.Lease, out.Err)
	}
	if s.Lease != in.Lease || s.State != StateLeased || (!out.Unchecked && out.Attempt != s.Attempt) {
		return false, s
	}
	n := s
	n.State, n.CommittedBy, n.Result = StateCommitted, in.Lease, in.Result
	return true, n
}

func stepComplete(s State, in In, out Out) (bool, any) {
	if s.State == StateCompleted && s.DoneBy == in.Lease {
		return out.Err == "", s // a retry of the completion
	}
	if out.Err != "" {
		return s.refused(in.Lease, out.Err)
	}
	if s.Lease != in.Lease || (s.State != StateLeased && s.State != StateCommitted) {
		return false, s
	}
	n := s
	if s.State == StateLeased { // commit and done in one record
		n.CommittedBy, n.Result = in.Lease, in.Result
	}
	n.State, n.Lease, n.DoneBy = StateCompleted, "", in.Lease
	return true, n
}

func stepFail(s State, in In, out Out) (bool, any) {
	return stepEnd(s, in, out, func() (bool, State) {
		retry := !in.Permanent && s.attemptsLeft()
		if !out.Unchecked && out.Retry != retry {
			return false, s
		}
		n := s
		n.Lease, n.State = "", StateFailed
		if retry {
			n.State = StateWaiting
		}
		return true, n
	})
}

// stepSnooze is a worker's snooze: like a retryable failure, but the
// attempt is given back (the next lease has the same number).
func stepSnooze(s State, in In, out Out) (bool, any) {
	return stepEnd(s, in, out, func() (bool, State) {
		n := s
		n.Lease, n.State, n.Attempt = "", StateWaiting, s.Attempt-1
		return true, n
	})
}

// stepEnd is a worker ending an attempt before a commit (fail, snooze):
// a success is ok's, from a LEASED task whose lease it names; the other
// answers are a refusal, or wrong state for a committed task.
func stepEnd(s State, in In, out Out, ok func() (bool, State)) (bool, any) {
	// The lease still holds, but its task is committed: finish it with
	// Complete.
	committed := s.Lease == in.Lease && s.State == StateCommitted
	switch out.Err {
	case "":
		if s.Lease != in.Lease || s.State != StateLeased {
			return false, s
		}
		return ok()
	case WrongState:
		return committed, s
	case FailedPrecondition:
		// Wrong state, or the lease was lost. Taking the first when it
		// fits defers the expiry, which accepts everything the second
		// would.
		if committed {
			return true, s
		}
	}
	return s.refused(in.Lease, out.Err)
}

func stepKill(s State, out Out) (bool, any) {
	switch out.Err {
	case "":
		// Kill does not expire a lease first: a task whose lease is past
		// due but not yet expired is still LEASED (or COMMITTED).
		if terminal(s.State) {
			return false, s
		}
		n := s
		n.State, n.Lease = StateDead, ""
		return true, n
	case WrongState:
		for _, x := range []State{s, s.expired()} {
			if terminal(x.State) {
				return true, x
			}
		}
	}
	return false, s
}

// stepRetry is an operator's retry. Like Kill it does not expire a lease
// first, but a background expiry may have failed the task just before.
func stepRetry(s State, out Out) (bool, any) {
	retried := func(x State) State {
		n := x
		n.State, n.Lease, n.Base = StateWaiting, "", x.Attempt
		return n
	}
	switch {
	case out.Pending:
		// No answer came: it may or may not have happened (Resolve keeps
		// it pending). Where it is placed, the checker tries both.
		if !s.Exists {
			return true, s
		}
		for _, x := range []State{s, s.expired()} {
			if x.retryable() {
				return true, retried(x)
			}
		}
		return true, s
	case !s.Exists:
		return out.Err == NotFound, s
	case out.Err == "":
		for _, x := range []State{s, s.expired()} {
			if x.retryable() {
				return true, retried(x)
			}
		}
	case out.Err == WrongState:
		for _, x := range []State{s, s.expired()} {
			if !x.retryable() {
				return true, x
			}
		}
	}
	return false, s
}

// Describe describes an operation (porcupine's DescribeOperation).
func Describe(in0, out0 any) string {
	in, out := in0.(In), out0.(Out)
	var b strings.Builder
	switch in.Op {
	case OpSubmit:
		fmt.Fprintf(&b, "submit(rid=%q, attempts=%d)", in.RequestID, in.MaxAttempts)
	case OpLease:
		fmt.Fprintf(&b, "lease(worker=%s)", in.Worker)
	case OpCommit, OpComplete:
		fmt.Fprintf(&b, "%s(%s, %q)", in.Op, short(in.Lease), in.Result)
	case OpFail:
		fmt.Fprintf(&b, "fail(%s, permanent=%v)", short(in.Lease), in.Permanent)
	case OpHeartbeat:
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
	case in.Op == OpSubmit:
		fmt.Fprintf(&b, "%s duplicate=%v", short(in.Task), out.Duplicate)
	case in.Op == OpLease:
		fmt.Fprintf(&b, "lease %s attempt %d committed=%v", short(out.LeaseID), out.Attempt, out.Committed)
	case in.Op == OpFail:
		fmt.Fprintf(&b, "ok retry=%v", out.Retry)
	case in.Op == OpGet:
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
	s := st.(State)
	if !s.Exists {
		return "no task"
	}
	return fmt.Sprintf("%s attempt %d/%d (after %d) lease %s committed by %s result %q done by %s paused %v",
		s.State, s.Attempt, s.MaxAttempts, s.Base, short(s.Lease), short(s.CommittedBy), s.Result, short(s.DoneBy), s.Paused)
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

// Model is the per-task model, partitioned by task id.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		var queue []porcupine.Operation // pause and resume: in every partition
		for _, op := range h {
			in := op.Input.(In)
			if in.Op == OpPause || in.Op == OpResume {
				queue = append(queue, op)
				continue
			}
			k := in.Task
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, append(by[k], queue...))
		}
		return out
	},
	Init:              func() any { return State{} },
	Step:              Step,
	DescribeOperation: Describe,
	DescribeState:     describeState,
}

// Visualise writes porcupine's visualisation of info to a new temporary
// file named after pattern (as os.CreateTemp takes it) and returns its
// name, or "" if it could not.
func Visualise(info porcupine.LinearizationInfo, pattern string) string {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := porcupine.Visualize(Model, info, f); err != nil {
		return ""
	}
	return f.Name()
}

// Explain finds the first task whose partition of ops is not linearizable
// and lists its operations in call order.
func Explain(ops []porcupine.Operation) string {
	for _, part := range Model.Partition(ops) {
		if porcupine.CheckOperationsTimeout(Model, part, 10*time.Second) != porcupine.Illegal {
			continue
		}
		part = slices.Clone(part)
		slices.SortStableFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		fmt.Fprintf(&b, "task %s is not linearizable; its operations in call order:", part[0].Input.(In).Task)
		for _, op := range part {
			ret := fmt.Sprint(op.Return)
			if op.Return == PendingEnd {
				ret = "∞"
			}
			fmt.Fprintf(&b, "\n  [%d, %s] client %d: %s", op.Call, ret, op.ClientId, Describe(op.Input, op.Output))
		}
		return b.String()
	}
	return "(no single task is illegal on its own)"
}
