package client

import (
	"context"
	"errors"
	"iter"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The calls of WorkflowService: the tasks of a workflow batch
// (SubmitBatchRequest.WorkflowID) and those they spawned, viewed, waited
// for, cancelled and retried as one.

// GetWorkflow returns a workflow and one page of its tasks (all of them:
// page on with NextPageToken). A workflow none of whose tasks is left is
// refused with ErrNotFound.
func (c *Client) GetWorkflow(ctx context.Context, req GetWorkflowRequest) (*WorkflowPage, error) {
	size, err := pageSize("GetWorkflow", req.PageSize)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, c, "GetWorkflow", c.workflows.GetWorkflow, &tenurev1.GetWorkflowRequest{
		Namespace: req.Namespace, WorkflowId: req.WorkflowID, PageSize: size, PageToken: req.PageToken})
	if err != nil {
		return nil, err
	}
	w, err := workflowOf("GetWorkflow", resp.GetWorkflow())
	if err != nil {
		return nil, err
	}
	return &WorkflowPage{Workflow: w, Tasks: allOf(resp.GetTasks(), taskOf), NextPageToken: resp.GetNextPageToken()}, nil
}

// ListWorkflows returns the workflows of a namespace (or of every one),
// ordered by namespace and id, paging as it goes. A failed call ends the
// sequence with its error.
func (c *Client) ListWorkflows(ctx context.Context, req ListWorkflowsRequest) iter.Seq2[*Workflow, error] {
	return pages("", func(token string) ([]*tenurev1.Workflow, string, error) {
		resp, err := call(ctx, c, "ListWorkflows", c.workflows.ListWorkflows, &tenurev1.ListWorkflowsRequest{Namespace: req.Namespace, PageToken: token})
		return resp.GetWorkflows(), resp.GetNextPageToken(), err
	}, func(p *tenurev1.Workflow) (Workflow, error) { return workflowOf("ListWorkflows", p) })
}

// CancelWorkflow ends every task of a workflow that has not ended: DEAD,
// FailureReason "workflow cancelled: <Reason>", a lease held losing its
// authority at once; tasks outside it that depend on them end by their
// policy. Tasks is how many it ended. ErrNotFound when no task of it is
// left.
func (c *Client) CancelWorkflow(ctx context.Context, req WorkflowControlRequest) (WorkflowControlResult, error) {
	resp, err := call(ctx, c, "CancelWorkflow", c.workflows.CancelWorkflow, &tenurev1.CancelWorkflowRequest{
		Namespace: req.Namespace, WorkflowId: req.WorkflowID, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return WorkflowControlResult{}, err
	}
	w, err := workflowOf("CancelWorkflow", resp.GetWorkflow())
	return WorkflowControlResult{Workflow: w, Tasks: resp.GetCancelled()}, err
}

// RetryWorkflow runs a failed or cancelled workflow again from its failed
// steps: every FAILED or DEAD task of it that no attempt committed is
// retried, dependencies first; tasks that completed are not run again.
// Tasks is how many it retried. ErrWrongState when no task of it can be
// retried.
func (c *Client) RetryWorkflow(ctx context.Context, req WorkflowControlRequest) (WorkflowControlResult, error) {
	resp, err := call(ctx, c, "RetryWorkflow", c.workflows.RetryWorkflow, &tenurev1.RetryWorkflowRequest{
		Namespace: req.Namespace, WorkflowId: req.WorkflowID, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return WorkflowControlResult{}, err
	}
	w, err := workflowOf("RetryWorkflow", resp.GetWorkflow())
	return WorkflowControlResult{Workflow: w, Tasks: resp.GetRetried()}, err
}

// WaitWorkflow waits up to req.Wait for every task of the workflow to end,
// and returns the workflow as it is then: Workflow.State.Ended() says
// whether it has. With Wait 0 it answers at once; call it again to wait
// longer.
func (c *Client) WaitWorkflow(ctx context.Context, req WaitWorkflowRequest) (*Workflow, error) {
	resp, err := call(ctx, c, "WaitWorkflow", c.workflows.WaitWorkflow, &tenurev1.WaitWorkflowRequest{
		Namespace: req.Namespace, WorkflowId: req.WorkflowID, Wait: optDuration(req.Wait)})
	if err != nil {
		return nil, err
	}
	w, err := workflowOf("WaitWorkflow", resp.GetWorkflow())
	if err != nil {
		return nil, err
	}
	return &w, nil
}

// WaitForWorkflow waits until every task of the workflow has ended and
// returns it, calling WaitWorkflow again and again; ctx bounds the whole
// wait. A workflow that FAILED or was CANCELLED is returned without an
// error: look at its State.
func (c *Client) WaitForWorkflow(ctx context.Context, namespace, workflowID string) (*Workflow, error) {
	return waitEnded(ctx, func(wait time.Duration) (*Workflow, error) {
		return c.WaitWorkflow(ctx, WaitWorkflowRequest{Namespace: namespace, WorkflowID: workflowID, Wait: wait})
	}, func(w *Workflow) bool { return w.State.Ended() })
}

// workflowOf converts op's workflow.
func workflowOf(op string, p *tenurev1.Workflow) (Workflow, error) {
	if p == nil {
		return Workflow{}, errors.New("client: " + op + ": the server answered without the workflow (a server bug)")
	}
	w := Workflow{Namespace: p.GetNamespace(), ID: p.GetWorkflowId(), State: WorkflowState(p.GetState()),
		Tasks: taskCountsOf(p.GetTasks()), Total: p.GetTotal(), Delivering: p.GetDelivering(), CreatedAt: timeOf(p.GetCreatedAt()), UpdatedAt: timeOf(p.GetUpdatedAt())}
	if cp := p.GetCancelled(); cp != nil {
		w.Cancel = &WorkflowCancel{RequestedBy: cp.GetRequestedBy(), Reason: cp.GetReason(), At: timeOf(cp.GetPausedAt())}
	}
	return w, nil
}
