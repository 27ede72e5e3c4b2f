package coordinator

import (
	"context"
	"time"
)

// Waiting for tasks to end (docs/design/workflows.md, "Waiting"): a
// waiter long-polls on a channel that the record ending its task closes.

// WaitTask returns the task once it has ended (COMPLETED, FAILED or
// DEAD), or as it is when wait runs out or ctx ends first; done says
// whether it has ended. wait is 0..Limits.MaxWait (0: answer at once).
func (c *Coordinator) WaitTask(ctx context.Context, taskID string, wait time.Duration) (v TaskView, done bool, err error) {
	if err := c.checkID("task_id", taskID, true); err != nil {
		return TaskView{}, false, err
	}
	err = c.longPoll(ctx, wait, func() (<-chan struct{}, error) {
		t := c.st.Task(taskID)
		if t == nil {
			return nil, notFound(taskID)
		}
		if v, done = c.view(t), t.State.Terminal(); done {
			return nil, nil
		}
		return waiter(&c.waits, taskID), nil
	})
	return v, done, err
}

// longPoll calls look under c.mu, once what it reads is durable, until it
// says it is done (no channel), or until wait (0..Limits.MaxWait) runs out
// or ctx ends: look returns the channel that closes when it should look
// again.
func (c *Coordinator) longPoll(ctx context.Context, wait time.Duration, look func() (<-chan struct{}, error)) error {
	if wait < 0 || wait > c.cfg.Limits.MaxWait {
		return fieldErr("wait", "%v is outside 0..%v", wait, c.cfg.Limits.MaxWait)
	}
	end := c.cfg.Clock.Now().Add(wait)
	for {
		var again <-chan struct{}
		err := c.read(ctx, func() (err error) {
			again, err = look()
			return err
		})
		if err != nil || again == nil {
			return err
		}
		remaining := end.Sub(c.cfg.Clock.Now())
		if remaining <= 0 {
			return nil
		}
		timer := c.cfg.Clock.NewTimer(remaining)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C():
			return nil
		case <-again:
			timer.Stop()
		}
	}
}

// waiter returns the channel of waits that closes when what k names ends
// (or the coordinator stops); c.mu must be held.
func waiter[K comparable](waits *map[K]chan struct{}, k K) <-chan struct{} {
	if *waits == nil {
		*waits = make(map[K]chan struct{})
	}
	ch, ok := (*waits)[k]
	if !ok {
		ch = make(chan struct{})
		(*waits)[k] = ch
	}
	return ch
}

// wakeWaiters closes the channels of the waiters of the tasks the record
// just applied ended, and of the workflows whose last task it ended; c.mu
// must be held.
func (c *Coordinator) wakeWaiters() {
	if len(c.waits) == 0 && len(c.wfWaits) == 0 {
		return
	}
	for _, t := range c.st.Ended() {
		if ch, ok := c.waits[t.ID]; ok {
			close(ch)
			delete(c.waits, t.ID)
		}
		if len(c.wfWaits) > 0 {
			if w := c.st.WorkflowOf(t); w != nil && w.Final() {
				if ch, ok := c.wfWaits[w.Key]; ok {
					close(ch)
					delete(c.wfWaits, w.Key)
				}
			}
		}
	}
}

// stopWaiters wakes every waiter: the coordinator stops serving; c.mu
// must be held.
func (c *Coordinator) stopWaiters() {
	for id, ch := range c.waits {
		close(ch)
		delete(c.waits, id)
	}
	for k, ch := range c.wfWaits {
		close(ch)
		delete(c.wfWaits, k)
	}
}
