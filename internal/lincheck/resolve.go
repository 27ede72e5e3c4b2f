package lincheck

import "github.com/anishathalye/porcupine"

// Execution statuses in Execution.Status that Resolve looks at.
const (
	ExecDone    = "done"
	ExecAborted = "aborted"
	ExecSnoozed = "snoozed"
)

// Task is a task of the final state, as Resolve needs it; each test
// converts its own (the coordinator's, the API's) to it.
type Task struct {
	ID         string
	RequestID  string
	Payload    string
	State      string // StateDead, ...
	Executions []Execution
}

// Execution is one attempt of a Task.
type Execution struct {
	LeaseID   string
	WorkerID  string
	Attempt   uint32
	Committed bool   // this execution's commit is the task's
	Finalize  bool   // leased to finalise an earlier commit
	Status    string // ExecDone, ExecAborted, or another
	Reason    string // of an abort or a snooze
}

// Resolve turns the operations that got no answer into what the final
// state says they did, and returns them for the history; those that left
// no trace are dropped (they took no effect, or only an effect the model
// does not see, such as an expiry). It relies on inputs the tests make
// unique: one worker id per Lease call, one payload per submitted task (a
// submit retried with its request id reuses it), one reason per Fail and
// per Snooze. A
// kill, a retry or a resume without an answer stays pending: the final
// state does not always tell whether it happened, and the model takes it
// either way.
//
// An acknowledged operation is never resolved this way, so a lost
// acknowledgement cannot be explained away here.
func Resolve(pending []porcupine.Operation, final []Task) []porcupine.Operation {
	byPayload := map[string][]*Task{}
	byID := map[string]*Task{}
	byWorker := map[string][]*Task{}
	for i := range final {
		t := &final[i]
		byPayload[t.Payload] = append(byPayload[t.Payload], t)
		byID[t.ID] = t
		for _, e := range t.Executions {
			byWorker[e.WorkerID] = append(byWorker[e.WorkerID], t)
		}
	}
	exec := func(t *Task, lease string) *Execution {
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
		in := op.Input.(In)
		t := byID[in.Task]
		switch in.Op {
		case OpSubmit:
			for _, t := range byPayload[in.Payload] {
				if t.RequestID == in.RequestID {
					in.Task = t.ID
					op.Input, op.Output = in, Out{Pending: true}
					out = append(out, op)
				}
			}
			continue
		case OpLease:
			for _, t := range byWorker[in.Worker] {
				for _, e := range t.Executions {
					if e.WorkerID == in.Worker {
						in.Task = t.ID
						op.Input = in
						op.Output = Out{Unchecked: true, LeaseID: e.LeaseID, Attempt: e.Attempt, Committed: e.Finalize}
						out = append(out, op)
					}
				}
			}
			continue
		case OpCommit:
			if e := exec(t, in.Lease); e == nil || !e.Committed {
				continue
			}
		case OpComplete:
			if e := exec(t, in.Lease); e == nil || e.Status != ExecDone {
				continue
			}
		case OpFail:
			if e := exec(t, in.Lease); e == nil || e.Status != ExecAborted || e.Reason != in.Reason {
				continue
			}
		case OpSnooze:
			if e := exec(t, in.Lease); e == nil || e.Status != ExecSnoozed || e.Reason != in.Reason {
				continue
			}
		case OpKill, OpRetry, OpResume:
			// The final state does not always tell whether it happened (a
			// retry clears a kill's reason; a later kill covers a retry):
			// the model takes it either way.
			op.Output = Out{Pending: true}
			out = append(out, op)
			continue
		default: // get, heartbeat: no effect the model sees; a pause that
			// may not have happened only forbids more, so it is dropped
			continue
		}
		op.Output = Out{Unchecked: true}
		out = append(out, op)
	}
	return out
}
