package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	mrand "math/rand/v2"
	"sync"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/internal/backoff"
)

// The calls of TaskService: submit tasks, read them, and act on them as an
// operator.

// Submit creates one task, durable when Submit returns, and answers it
// whole (SubmitResult.Task). If req.RequestID is empty a random one is
// generated first, so the client's retries of this call never create a
// second task.
//
// If ctx holds an OpenTelemetry span, the submit carries its W3C trace
// context (traceparent and tracestate): the task keeps it, and package
// worker starts the span of each attempt as a child of it, so one trace
// runs from the submit through every attempt. SubmitBatch does the same
// for each of its tasks.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	msg := new(tenurev1.SubmitRequest)
	if err := fillSubmit(c.codec, "Submit", "", &req, msg); err != nil {
		return SubmitResult{}, err
	}
	msg.TraceContext = traceContextOf(ctx)
	resp, err := call(ctx, c, "Submit", c.tasks.Submit, msg)
	if err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{TaskID: resp.GetTask().GetTaskId(), Duplicate: resp.GetDuplicate(), Task: taskPtr(resp.GetTask())}, nil
}

// SubmitBatch creates up to 1000 tasks (the server's default limit) in one
// call; results come in the order of req.Requests, with each task's id
// (and the whole task with req.ReturnTasks, read by GetTask). Every request is checked
// before any task is created: an invalid one fails the whole call,
// ErrInvalidArgument naming it (e.g. "requests[3].queue"). Each request
// without a RequestID gets a random one, as in Submit. If the call fails
// after that check, some tasks may exist: retry with the same request ids
// to learn which.
func (c *Client) SubmitBatch(ctx context.Context, req SubmitBatchRequest) ([]SubmitResult, error) {
	msg := &tenurev1.SubmitBatchRequest{Requests: make([]*tenurev1.SubmitRequest, len(req.Requests)), WorkflowId: req.WorkflowID}
	held, reqs := pooled[tenurev1.SubmitRequest](&submitMessages, len(req.Requests))
	tc := traceContextOf(ctx)
	for i := range req.Requests {
		r := &req.Requests[i]
		if r.Args != nil {
			cp := *r // the caller's request stays as it was
			r = &cp
		}
		if err := fillSubmit(c.codec, "SubmitBatch", fmt.Sprintf("Requests[%d].", i), r, &reqs[i]); err != nil {
			unpool(&submitMessages, held, reqs)
			return nil, err
		}
		reqs[i].TraceContext = tc
		msg.Requests[i] = &reqs[i]
	}
	resp, err := call(ctx, c, "SubmitBatch", c.tasks.SubmitBatch, msg)
	unpool(&submitMessages, held, reqs) // sent
	if err != nil {
		return nil, err
	}
	ids, dups := resp.GetTaskIds(), resp.GetDuplicates()
	if len(ids) != len(req.Requests) || len(dups) != len(req.Requests) {
		return nil, fmt.Errorf("client: SubmitBatch: the server answered %d task ids and %d duplicate flags for %d requests (a server bug; the tasks may exist, retry with the same request ids)", len(ids), len(dups), len(req.Requests))
	}
	out := make([]SubmitResult, len(req.Requests))
	for i := range out {
		out[i] = SubmitResult{TaskID: ids[i], Duplicate: dups[i]}
	}
	if req.ReturnTasks {
		if err := c.readTasks(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readTasks reads the task of each result (GetTask), a few at once.
func (c *Client) readTasks(ctx context.Context, rs []SubmitResult) error {
	const parallel = 8
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, parallel)
		errs  = make([]error, len(rs))
	)
	for i := range rs {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			rs[i].Task, errs[i] = c.readBack(ctx, rs[i].TaskID)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("client: SubmitBatch: the tasks were submitted, but reading them back failed (ReturnTasks): %w", err)
	}
	return nil
}

// readBack reads a task just submitted. In cluster mode a task of a
// workflow batch placed in another partition than the batch's first is
// created there moments after the submit is answered (docs/guides/
// workflows.md): NOT_FOUND is asked again, for up to about 10 s.
func (c *Client) readBack(ctx context.Context, id string) (*Task, error) {
	policy := backoff.Policy{Initial: 10 * time.Millisecond, Max: time.Second}
	for attempt := 0; ; attempt++ {
		t, err := c.GetTask(ctx, GetTaskRequest{TaskID: id})
		if !errors.Is(err, ErrNotFound) || attempt == 20 || !backoff.Sleep(ctx, policy.Wait(attempt, mrand.Int64N)) {
			return t, err
		}
	}
}

// submitMessages and completeMessages keep the request messages of a
// SubmitBatch (160 bytes per task) and of a CompleteBatch (80) from call to
// call: the call has encoded them when it returns.
var (
	submitMessages   = sync.Pool{New: func() any { return new([]tenurev1.SubmitRequest) }}
	completeMessages = sync.Pool{New: func() any { return new([]tenurev1.CompleteRequest) }}
)

// pooled returns n zero elements from p, a pool of *[]T, and the pointer to
// give back to unpool.
func pooled[T any](p *sync.Pool, n int) (*[]T, []T) {
	held := p.Get().(*[]T)
	if cap(*held) < n {
		return held, make([]T, n)
	}
	return held, (*held)[:n]
}

// unpool clears s (it lets go of what its elements point at) and puts it
// back in p.
func unpool[T any](p *sync.Pool, held *[]T, s []T) {
	clear(s)
	*held = s[:0]
	p.Put(held)
}

// GetTask returns a task with its executions.
func (c *Client) GetTask(ctx context.Context, req GetTaskRequest) (*Task, error) {
	resp, err := call(ctx, c, "GetTask", c.tasks.GetTask, &tenurev1.GetTaskRequest{TaskId: req.TaskID})
	if err != nil {
		return nil, err
	}
	return answeredTask("GetTask", "", resp.GetTask())
}

// answeredTask converts the task op answered. An answer without one is a
// server bug; shows says what GetTask would show of the call's effect.
func answeredTask(op, shows string, p *tenurev1.Task) (*Task, error) {
	if p == nil {
		msg := "client: " + op + ": the server answered without a task (a server bug)"
		if shows != "" {
			msg += "; GetTask shows " + shows
		}
		return nil, errors.New(msg)
	}
	return taskPtr(p), nil
}

// ListTasks returns the tasks req selects, in creation order, fetching
// them a page at a time (req.PageSize per call) as the loop asks for
// more, from req.PageToken on ("": the first). A failed call ends the
// sequence with its error:
//
//	for t, err := range c.ListTasks(ctx, client.ListTasksRequest{Queue: "emails"}) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(t.ID, t.State)
//	}
func (c *Client) ListTasks(ctx context.Context, req ListTasksRequest) iter.Seq2[*Task, error] {
	return pages(req.PageToken, func(token string) ([]Task, string, error) {
		req.PageToken = token
		page, err := c.ListTasksPage(ctx, req)
		if err != nil {
			return nil, "", err
		}
		return page.Tasks, page.NextPageToken, nil
	}, func(t Task) (Task, error) { return t, nil })
}

// ListTasksPage returns one page of the tasks req selects, in creation
// order, with the token of the next page ("" on the last): for a program
// that pages by token itself (a listing people page through). ListTasks
// pages for you.
func (c *Client) ListTasksPage(ctx context.Context, req ListTasksRequest) (*TaskPage, error) {
	size, err := pageSize("ListTasks", req.PageSize)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c, "ListTasks", c.tasks.ListTasks, &tenurev1.ListTasksRequest{
		Namespace: req.Namespace,
		Queue:     req.Queue,
		State:     tenurev1.TaskState(req.State),
		PageSize:  size,
		PageToken: req.PageToken,
	})
	if err != nil {
		return nil, err
	}
	return &TaskPage{Tasks: allOf(resp.GetTasks(), taskOf), NextPageToken: resp.GetNextPageToken()}, nil
}

// KillTask moves a task that is not terminal to DEAD, and answers it; its
// current lease, if any, loses its authority at once. req.Reason becomes
// the task's FailureReason. A task already COMPLETED, FAILED or DEAD is
// refused with ErrWrongState.
func (c *Client) KillTask(ctx context.Context, req KillTaskRequest) (*Task, error) {
	resp, err := call(ctx, c, "KillTask", c.tasks.KillTask, &tenurev1.KillTaskRequest{
		TaskId: req.TaskID, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return nil, err
	}
	return answeredTask("KillTask", "whether it was killed", resp.GetTask())
}

// RetryTask returns a FAILED or DEAD task to WAITING, due at once, with a
// fresh budget of attempts, and answers it. Its earlier executions stay in
// its history. A COMPLETED task (submit a new one to run it again), a task
// not finished, and one an attempt committed before it was killed (its
// effect may have been applied) are refused with ErrWrongState.
func (c *Client) RetryTask(ctx context.Context, req RetryTaskRequest) (*Task, error) {
	resp, err := call(ctx, c, "RetryTask", c.tasks.RetryTask, &tenurev1.RetryTaskRequest{
		TaskId: req.TaskID, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return nil, err
	}
	return answeredTask("RetryTask", "whether it was retried", resp.GetTask())
}

// RetryTasks retries every FAILED or DEAD task req.Filter selects, as
// RetryTask would, and counts them; the others it selects are Skipped. A
// filter with nothing set and without All, or All with another field, is
// refused with ErrInvalidArgument. The server works in bounded steps and
// selects no task created after the call began; if the call fails part
// way, the tasks it changed stay changed: call it again to continue.
func (c *Client) RetryTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "RetryTasks", c.tasks.RetryTasks, &tenurev1.RetryTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// KillTasks kills every unfinished task req.Filter selects, as KillTask
// would, and counts them; those already finished are Skipped. The filter
// and a failure part way are as for RetryTasks.
func (c *Client) KillTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "KillTasks", c.tasks.KillTasks, &tenurev1.KillTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// PurgeTasks deletes every finished (COMPLETED, FAILED or DEAD) task
// req.Filter selects now rather than at the server's retention, and counts
// them; those not finished are Skipped. GetTask then answers ErrNotFound
// for them, and their request ids may be used again. The filter and a
// failure part way are as for RetryTasks.
func (c *Client) PurgeTasks(ctx context.Context, req BulkRequest) (BulkResult, error) {
	return bulkResult(call(ctx, c, "PurgeTasks", c.tasks.PurgeTasks, &tenurev1.PurgeTasksRequest{
		Filter: req.Filter.proto(), Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)}))
}

// bulkResult is the result of a bulk action's answer.
func bulkResult(resp interface {
	GetChanged() uint64
	GetSkipped() uint64
}, err error) (BulkResult, error) {
	if err != nil {
		return BulkResult{}, err
	}
	return BulkResult{Changed: resp.GetChanged(), Skipped: resp.GetSkipped()}, nil
}

// by is who asks for an operator's action: requestedBy, or the client's
// Options.RequestedBy.
func (c *Client) by(requestedBy string) string {
	return cmp.Or(requestedBy, c.requestedBy)
}

// GetTaskHistory returns the log records that touched a task, oldest
// first: what happened to it, and why it ran twice.
func (c *Client) GetTaskHistory(ctx context.Context, req GetTaskHistoryRequest) ([]HistoryEntry, error) {
	resp, err := call(ctx, c, "GetTaskHistory", c.tasks.GetTaskHistory, &tenurev1.GetTaskHistoryRequest{TaskId: req.TaskID})
	if err != nil {
		return nil, err
	}
	out := make([]HistoryEntry, len(resp.GetEntries()))
	for i, e := range resp.GetEntries() {
		out[i] = historyEntryOf(e)
	}
	return out, nil
}

// WaitTask waits up to req.Wait for the task to end, and returns it as it
// is then: Task.State.Ended() says whether it has (COMPLETED, with its
// Result, FAILED or DEAD). Wait waits for as long as it takes.
func (c *Client) WaitTask(ctx context.Context, req WaitTaskRequest) (*Task, error) {
	resp, err := call(ctx, c, "WaitTask", c.tasks.WaitTask, &tenurev1.WaitTaskRequest{TaskId: req.TaskID, Wait: optDuration(req.Wait)})
	if err != nil {
		return nil, err
	}
	return taskPtr(resp.GetTask()), nil
}

// maxWait is the longest wait of one WaitTask call Wait makes: the
// server's default limit of a long-poll.
const maxWait = 30 * time.Second

// Wait waits until task taskID has ended (COMPLETED, FAILED or DEAD) and
// returns it, calling WaitTask again and again; ctx bounds the whole wait.
// A task that FAILED or is DEAD is returned without an error: look at its
// State and FailureReason.
func (c *Client) Wait(ctx context.Context, taskID string) (*Task, error) {
	return waitEnded(ctx, func(wait time.Duration) (*Task, error) {
		return c.WaitTask(ctx, WaitTaskRequest{TaskID: taskID, Wait: wait})
	}, func(t *Task) bool { return t.State.Ended() })
}

// waitEnded long-polls with wait again and again until what it answers
// has ended, and returns that; ctx bounds the whole wait. Each wait is at
// most maxWait and is answered before ctx ends, so the last answer is
// current; with less than a second left it looks once more at its end.
func waitEnded[T any](ctx context.Context, wait func(time.Duration) (T, error), ended func(T) bool) (T, error) {
	for {
		d := maxWait
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, max(time.Until(dl)-time.Second, 0))
		}
		v, err := wait(d)
		if err != nil || ended(v) {
			return v, err
		}
		if err := ctx.Err(); err != nil {
			return v, err
		}
		if d == 0 {
			<-ctx.Done()
		}
	}
}

// SubmitAndWait submits req and waits until its task has ended (Submit,
// then Wait): the task with its result, or how it failed. ctx bounds the
// whole call; a retry with the same req.RequestID waits for the same task.
func (c *Client) SubmitAndWait(ctx context.Context, req SubmitRequest) (*Task, error) {
	res, err := c.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, res.TaskID)
}
