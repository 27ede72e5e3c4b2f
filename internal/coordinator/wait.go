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
	if wait < 0 || wait > c.cfg.Limits.MaxWait {
		return TaskView{}, false, fieldErr("wait", "%v is outside 0..%v", wait, c.cfg.Limits.MaxWait)
	}
	end := c.cfg.Clock.Now().Add(wait)
	for {
		var ended <-chan struct{}
		err := c.read(ctx, func() error {
			t := c.st.Task(taskID)
			if t == nil {
				return notFound(taskID)
			}
			v, done = c.view(t), t.State.Terminal()
			if !done {
				ended = c.waitFor(taskID)
			}
			return nil
		})
		if err != nil || done {
			return v, done, err
		}
		remaining := end.Sub(c.cfg.Clock.Now())
		if remaining <= 0 {
			return v, false, nil
		}
		timer := c.cfg.Clock.NewTimer(remaining)
		select {
		case <-ctx.Done():
			timer.Stop()
			return v, false, ctx.Err()
		case <-timer.C():
			return v, false, nil
		case <-ended:
			timer.Stop()
		}
	}
}

// waitFor returns the channel that closes when task id ends (or the
// coordinator stops); c.mu must be held.
func (c *Coordinator) waitFor(id string) <-chan struct{} {
	if c.waits == nil {
		c.waits = make(map[string]chan struct{})
	}
	ch, ok := c.waits[id]
	if !ok {
		ch = make(chan struct{})
		c.waits[id] = ch
	}
	return ch
}

// wakeWaiters closes the channels of the waiters of the tasks the record
// just applied ended; c.mu must be held.
func (c *Coordinator) wakeWaiters() {
	if len(c.waits) == 0 {
		return
	}
	for _, t := range c.st.Ended() {
		if ch, ok := c.waits[t.ID]; ok {
			close(ch)
			delete(c.waits, t.ID)
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
}
