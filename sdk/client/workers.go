package client

import (
	"context"
	"errors"
	"fmt"
	"math"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The calls of WorkerService: the worker protocol (lease, start, heartbeat,
// commit, complete, fail, snooze). Package worker runs it for you.

// Lease grants up to MaxTasks tasks of a queue (or of several: Queues).
// With Wait it long-polls and answers as soon as one task is leased, or
// with none when Wait ran out; LeaseResult.Paused then tells a paused
// queue from an empty one. A Lease retried after an unavailable answer may
// have granted a lease whose answer was lost: that lease expires unused
// after the task's window.
func (c *Client) Lease(ctx context.Context, req LeaseRequest) (LeaseResult, error) {
	msg, err := leaseMessage("Lease", req)
	if err != nil {
		return LeaseResult{}, err
	}
	resp, err := call(ctx, c, "Lease", c.workers.Lease, msg)
	if err != nil {
		return LeaseResult{}, err
	}
	return LeaseResult{Tasks: allOf(resp.GetTasks(), leasedTaskOf), Paused: pauseOf(resp.GetPaused())}, nil
}

// leaseMessage is req on the wire, checked for call op.
func leaseMessage(op string, req LeaseRequest) (*tenurev1.LeaseRequest, error) {
	if req.MaxTasks < 0 || req.MaxTasks > math.MaxInt32 {
		return nil, invalid(op, "MaxTasks", fmt.Sprintf("MaxTasks %d is negative or too large; use 0 (one task) up to the server's limit (1000)", req.MaxTasks))
	}
	if req.Wait < 0 {
		return nil, invalid(op, "Wait", fmt.Sprintf("Wait %v is negative; use 0 to answer at once", req.Wait))
	}
	msg := &tenurev1.LeaseRequest{
		WorkerId:  req.WorkerID,
		Namespace: req.Namespace,
		Queue:     req.Queue,
		Queues:    req.Queues,
		MaxTasks:  uint32(req.MaxTasks),
	}
	if req.Wait > 0 {
		msg.Wait = durationpb.New(req.Wait)
	}
	return msg, nil
}

// Start reports that work on a leased task began (optional; the execution
// shows IN_PROGRESS).
func (c *Client) Start(ctx context.Context, req StartRequest) error {
	_, err := call(ctx, c, "Start", c.workers.Start, &tenurev1.StartRequest{TaskId: req.TaskID, LeaseId: req.LeaseID})
	return err
}

// Heartbeat extends the lease by the task's execution window from now and
// answers the new expiry. With req.Progress it also reports the work's
// progress, which the task shows (Task.Progress) while the lease holds.
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResult, error) {
	msg := &tenurev1.HeartbeatRequest{TaskId: req.TaskID, LeaseId: req.LeaseID}
	if p := req.Progress; p != nil {
		msg.Progress = &tenurev1.Progress{Message: p.Message}
		if p.HasPercent {
			msg.Progress.Percent = &p.Percent
		}
	}
	resp, err := call(ctx, c, "Heartbeat", c.workers.Heartbeat, msg)
	if err != nil {
		return HeartbeatResult{}, err
	}
	if resp.GetLeaseExpiry() == nil {
		return HeartbeatResult{}, errors.New("client: Heartbeat: the server answered without a lease expiry (a server bug); treat the lease as lost")
	}
	return HeartbeatResult{LeaseExpiry: resp.GetLeaseExpiry().AsTime()}, nil
}

// Commit records req.Result as the task's one committed result. Only after
// it succeeds may the caller apply the external effects, keyed by the
// fencing token. ErrLeaseLost or ErrAlreadyCommitted mean: apply no
// effects.
func (c *Client) Commit(ctx context.Context, req CommitRequest) (FencingToken, error) {
	spawn, err := spawnMessages(c.codec, "Commit", req.Spawn)
	if err != nil {
		return FencingToken{}, err
	}
	resp, err := call(ctx, c, "Commit", c.workers.Commit, &tenurev1.CommitRequest{TaskId: req.TaskID, LeaseId: req.LeaseID, Result: req.Result, Spawn: spawn})
	if err != nil {
		return FencingToken{}, err
	}
	tok := resp.GetFencingToken()
	return FencingToken{TaskID: tok.GetTaskId(), Attempt: tok.GetAttempt()}, nil
}

// Complete finishes the task: from LEASED it commits req.Result and
// completes in one step; from COMMITTED it finalises the committed result
// (req.Result is then ignored).
func (c *Client) Complete(ctx context.Context, req CompleteRequest) error {
	spawn, err := spawnMessages(c.codec, "Complete", req.Spawn)
	if err != nil {
		return err
	}
	_, err = call(ctx, c, "Complete", c.workers.Complete, &tenurev1.CompleteRequest{TaskId: req.TaskID, LeaseId: req.LeaseID, Result: req.Result, Spawn: spawn})
	return err
}

// CompleteBatch completes up to 1000 tasks (the server's default limit) in
// one call, each as Complete would. Result.Errors[i] is item i's own
// answer: nil when it completed (durable when CompleteBatch returns), else
// an *Error that errors.Is classifies (ErrLeaseLost, ErrAlreadyCommitted,
// ErrNotFound, ...) as it would Complete's. One item's failure does not
// affect the others.
//
// With req.Lease set, the call then leases as Lease(*req.Lease) would
// (with its Wait, it long-polls), and answers both when both are durable
// (Result.Leased): a worker that completes a batch and wants the next one
// saves a round trip; on a server that serves many small calls, most of
// the cost of a call is the call itself. The lease request is checked
// before any item is applied: an invalid one, or one the caller's token
// may not lease from, fails the call with nothing done.
//
// The error is for the call as a whole (no items or too many, the server
// could not answer even after the client's retries, or the lease failed
// after the items were applied); no item's outcome is then known.
// Retrying the call is safe: the same lease completing a task again gets
// the same answer, the client itself retries a call answered with
// unavailable, and, as for Lease, a lease whose answer was lost expires
// unused.
func (c *Client) CompleteBatch(ctx context.Context, req CompleteBatchRequest) (CompleteBatchResult, error) {
	var lease *tenurev1.LeaseRequest
	if req.Lease != nil {
		var err error
		if lease, err = leaseMessage("CompleteBatch", *req.Lease); err != nil {
			return CompleteBatchResult{}, err
		}
	}
	msg := &tenurev1.CompleteBatchRequest{Items: make([]*tenurev1.CompleteRequest, len(req.Items)), Lease: lease}
	held, reqs := pooled[tenurev1.CompleteRequest](&completeMessages, len(req.Items))
	for i, it := range req.Items {
		reqs[i] = tenurev1.CompleteRequest{TaskId: it.TaskID, LeaseId: it.LeaseID, Result: it.Result}
		if len(it.Spawn) > 0 {
			var err error
			if reqs[i].Spawn, err = spawnMessages(c.codec, "CompleteBatch", it.Spawn); err != nil {
				unpool(&completeMessages, held, reqs)
				return CompleteBatchResult{}, err
			}
		}
		msg.Items[i] = &reqs[i]
	}
	resp, err := call(ctx, c, "CompleteBatch", c.workers.CompleteBatch, msg)
	unpool(&completeMessages, held, reqs) // sent
	if err != nil {
		return CompleteBatchResult{}, err
	}
	errs, err := itemErrors(resp, req.Items)
	if err != nil {
		return CompleteBatchResult{}, err
	}
	return CompleteBatchResult{Errors: errs, Leased: allOf(resp.GetLeased(), leasedTaskOf)}, nil
}

// itemErrors is each item's answer in a CompleteBatch response.
func itemErrors(resp *tenurev1.CompleteBatchResponse, items []CompleteRequest) (errs []error, err error) {
	errs = make([]error, len(items))
	// The items not named in failed succeeded.
	for _, r := range resp.GetFailed() {
		i := int(r.GetIndex())
		if i >= len(items) || r.GetTaskId() != items[i].TaskID || r.GetCode() == "" {
			return nil, fmt.Errorf("client: CompleteBatch: the server answered a failure of item %d (task %q, code %q) that does not fit the %d items (a server bug; retry the call: completions are idempotent)", i, r.GetTaskId(), r.GetCode(), len(items))
		}
		errs[i] = itemError(r)
	}
	return errs, nil
}

// Fail ends an attempt that failed before commit: the task is retried per
// its policy, or FAILED if req.Permanent or out of attempts. A committed
// task cannot fail (ErrWrongState): finish it with Complete.
func (c *Client) Fail(ctx context.Context, req FailRequest) (FailResult, error) {
	resp, err := call(ctx, c, "Fail", c.workers.Fail, &tenurev1.FailRequest{TaskId: req.TaskID, LeaseId: req.LeaseID, Reason: req.Reason, Permanent: req.Permanent})
	if err != nil {
		return FailResult{}, err
	}
	return FailResult{State: TaskState(resp.GetState()), RetryAt: timeOf(resp.GetRetryAt())}, nil
}

// Snooze ends an attempt that has not committed and runs the task again
// after req.Delay without using up an attempt: the next lease has the same
// attempt number, and the retry budget and backoff are as they were. The
// lease ends with the snooze. A committed task cannot snooze, nor one
// snoozed as often as the server allows (1000 times by default), nor one
// whose deadline the delay would pass (ErrWrongState): complete or fail
// it.
func (c *Client) Snooze(ctx context.Context, req SnoozeRequest) (SnoozeResult, error) {
	if req.Delay < 0 {
		return SnoozeResult{}, invalid("Snooze", "Delay", fmt.Sprintf("Delay %v is negative; use 0 to run the task again at once", req.Delay))
	}
	resp, err := call(ctx, c, "Snooze", c.workers.Snooze, &tenurev1.SnoozeRequest{TaskId: req.TaskID, LeaseId: req.LeaseID,
		Delay: durationpb.New(req.Delay), Reason: req.Reason})
	if err != nil {
		return SnoozeResult{}, err
	}
	return SnoozeResult{NotBefore: timeOf(resp.GetNotBefore())}, nil
}
