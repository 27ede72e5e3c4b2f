package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// Workflows of one partition: views, cancel, retry and waits
// (docs/design/workflows.md). In cluster mode a workflow's tasks may be in
// several partitions; each answers for its own, and the API adds them up.

// WorkflowView is what a partition knows of a workflow: its tasks there,
// counted by state, when it was made, its last change and its cancel.
type WorkflowView struct {
	Key       state.WorkflowKey
	CreatedAt state.Time
	// UpdatedAt is the latest UpdatedAt of its tasks.
	UpdatedAt state.Time
	Cancelled *state.Pause
	Counts    [state.NumStates]int
	Total     int
	// Delivering counts its tasks that this partition's records created
	// for other partitions and has not delivered yet (not in Total).
	Delivering int
}

// Done reports whether every task of the workflow has ended.
func (v WorkflowView) Done() bool { return ended(v) == v.Total && v.Delivering == 0 }

// workflowView copies w; c.mu must be held.
func (c *Coordinator) workflowView(w *state.Workflow) WorkflowView {
	v := WorkflowView{Key: w.Key, CreatedAt: w.CreatedAt, Counts: w.Counts(), Total: w.Len(), Delivering: c.st.WorkflowDeliveries(w.Key)}
	if w.Cancelled != nil {
		p := *w.Cancelled
		v.Cancelled = &p
	}
	w.Members(func(t *state.Task) bool {
		v.UpdatedAt = max(v.UpdatedAt, t.UpdatedAt)
		return true
	})
	return v
}

// checkWorkflow checks a workflow's names, namespace "" meaning the
// default one, and returns its key.
func (l Limits) checkWorkflow(namespace, id string) (state.WorkflowKey, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	if err := l.checkID("namespace", namespace, true); err != nil {
		return state.WorkflowKey{}, err
	}
	if err := l.checkID("workflow_id", id, true); err != nil {
		return state.WorkflowKey{}, err
	}
	return state.WorkflowKey{Namespace: namespace, ID: id}, nil
}

// WorkflowError is a refusal about a workflow: errors.Is matches its Kind
// (ErrNotFound, ErrWrongState).
type WorkflowError struct {
	Kind error
	Key  state.WorkflowKey
	msg  string
}

func (e *WorkflowError) Error() string { return e.msg }

func (e *WorkflowError) Unwrap() error { return e.Kind }

// workflowNotFound is the refusal of a workflow this partition has no
// task of.
func workflowNotFound(k state.WorkflowKey) error {
	return &WorkflowError{Kind: ErrNotFound, Key: k,
		msg: fmt.Sprintf("workflow not found: namespace %q has no workflow %q (check the id; a workflow leaves with its last task, after the retention period): `tenure workflow list` lists them", k.Namespace, k.ID)}
}

// Workflow returns workflow namespace/id and up to limit of its tasks
// created after the key after, in creation order, with the key to go on
// from (zero: none left). ErrNotFound if the partition has no task of it.
func (c *Coordinator) Workflow(ctx context.Context, namespace, id string, after state.OrderKey, limit int) (WorkflowView, []TaskView, state.OrderKey, error) {
	k, err := c.cfg.Limits.checkWorkflow(namespace, id)
	if err != nil {
		return WorkflowView{}, nil, state.OrderKey{}, err
	}
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > c.cfg.Limits.MaxListPage {
		return WorkflowView{}, nil, state.OrderKey{}, fieldErr("page_size", "%d is outside 0..%d (0: the default, 100)", limit, c.cfg.Limits.MaxListPage)
	}
	var v WorkflowView
	var tasks []TaskView
	var next state.OrderKey
	err = c.read(ctx, func() error {
		w := c.st.Workflow(k)
		if w == nil {
			return workflowNotFound(k)
		}
		v = c.workflowView(w)
		w.Members(func(t *state.Task) bool {
			key := c.st.OrderKey(t)
			if !after.Less(key) {
				return true
			}
			if len(tasks) == limit {
				next = c.st.OrderKey(c.st.Task(tasks[len(tasks)-1].ID))
				return false
			}
			tasks = append(tasks, c.view(t))
			return true
		})
		return nil
	})
	return v, tasks, next, err
}

// Workflows returns up to limit workflows of namespace ("": every one)
// whose key is after after, in key order, and the key to go on from
// (zero: none left).
func (c *Coordinator) Workflows(ctx context.Context, namespace string, after state.WorkflowKey, limit int) ([]WorkflowView, state.WorkflowKey, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > c.cfg.Limits.MaxListPage {
		return nil, state.WorkflowKey{}, fieldErr("page_size", "%d is outside 0..%d (0: the default, 100)", limit, c.cfg.Limits.MaxListPage)
	}
	var out []WorkflowView
	var next state.WorkflowKey
	err := c.read(ctx, func() error {
		c.st.Workflows(namespace, after, func(w *state.Workflow) bool {
			if len(out) == limit {
				next = out[len(out)-1].Key
				return false
			}
			out = append(out, c.workflowView(w))
			return true
		})
		return nil
	})
	return out, next, err
}

// CancelWorkflow ends every task of workflow namespace/id that has not
// ended (one WorkflowCancelled record) and returns the workflow and how
// many tasks it ended.
func (c *Coordinator) CancelWorkflow(ctx context.Context, namespace, id string, a Actor) (WorkflowView, int, error) {
	return c.workflowAction(ctx, namespace, id, a, func(w *state.Workflow, now state.Time) (state.Record, error) {
		return &state.WorkflowCancelled{Namespace: w.Key.Namespace, Workflow: w.Key.ID, Reason: a.Reason, By: a.By, At: now}, nil
	}, func(before, after WorkflowView) int {
		return ended(after) - ended(before)
	})
}

// RetryWorkflow retries every FAILED or DEAD task of workflow namespace/id
// that can run again (one WorkflowRetried record), and returns the
// workflow and how many tasks it retried. Refused (ErrWrongState) when no
// task of it can be retried.
func (c *Coordinator) RetryWorkflow(ctx context.Context, namespace, id string, a Actor) (WorkflowView, int, error) {
	return c.workflowAction(ctx, namespace, id, a, func(w *state.Workflow, now state.Time) (state.Record, error) {
		can := false
		w.Members(func(t *state.Task) bool {
			can = (t.State == state.Failed || t.State == state.Dead) && t.CommittedBy == ""
			return !can
		})
		if !can && w.Cancelled == nil {
			return nil, &WorkflowError{Kind: ErrWrongState, Key: w.Key,
				msg: fmt.Sprintf("nothing to retry: no task of workflow %q is FAILED or DEAD and can run again (a task committed before it was killed is not retried: its effect may have been applied)", w.Key.ID)}
		}
		return &state.WorkflowRetried{Namespace: w.Key.Namespace, Workflow: w.Key.ID, Reason: a.Reason, By: a.By, At: now}, nil
	}, func(before, after WorkflowView) int {
		return ended(before) - ended(after)
	})
}

// ended counts the tasks of v that have ended.
func ended(v WorkflowView) int {
	return v.Counts[state.Completed] + v.Counts[state.Failed] + v.Counts[state.Dead]
}

// workflowAction writes the record rec makes of a workflow for an
// operator's action, and answers the workflow after it with what count
// says the action changed.
func (c *Coordinator) workflowAction(ctx context.Context, namespace, id string, a Actor,
	rec func(*state.Workflow, state.Time) (state.Record, error), count func(before, after WorkflowView) int) (WorkflowView, int, error) {
	k, err := c.cfg.Limits.checkWorkflow(namespace, id)
	if err != nil {
		return WorkflowView{}, 0, err
	}
	if err := c.cfg.Limits.checkActor(a); err != nil {
		return WorkflowView{}, 0, err
	}
	if err := c.lock(); err != nil {
		return WorkflowView{}, 0, err
	}
	w := c.st.Workflow(k)
	var r state.Record
	refusal := workflowNotFound(k)
	if w != nil {
		r, refusal = rec(w, c.now())
	}
	if refusal != nil {
		// The refusal reveals the state: answer once it is durable.
		if err := c.writeAndWait(ctx); err != nil {
			return WorkflowView{}, 0, err
		}
		return WorkflowView{}, 0, refusal
	}
	before := c.workflowView(w)
	var after WorkflowView
	err = c.writeAnswered(ctx, []state.Record{r}, func() {
		if w := c.st.Workflow(k); w != nil {
			after = c.workflowView(w)
		}
	})
	return after, count(before, after), err
}

// WaitWorkflow returns workflow namespace/id once every task of it has
// ended, or as it is when wait runs out or ctx ends first; done says
// whether it has. wait is 0..Limits.MaxWait.
func (c *Coordinator) WaitWorkflow(ctx context.Context, namespace, id string, wait time.Duration) (v WorkflowView, done bool, err error) {
	k, err := c.cfg.Limits.checkWorkflow(namespace, id)
	if err != nil {
		return WorkflowView{}, false, err
	}
	err = c.longPoll(ctx, wait, func() (<-chan struct{}, error) {
		w := c.st.Workflow(k)
		if w == nil {
			return nil, workflowNotFound(k)
		}
		if v = c.workflowView(w); v.Done() {
			done = true
			return nil, nil
		}
		return waiter(&c.wfWaits, k), nil
	})
	return v, done, err
}
