package client

import "context"

// LeaseAnswer is a Lease call's answer whole: the tasks leased and, when
// none was because the queue is paused, how it was paused.
type LeaseAnswer struct {
	Tasks []LeasedTask
	// Paused is set when nothing was leased and the queue is paused: who
	// paused it, when and why. Leasing again leases nothing until it is
	// resumed.
	Paused *QueuePause
}

// LeaseWithPause is Lease answering the whole LeaseAnswer, so that a
// worker that leases nothing can tell a paused queue from an empty one.
func (c *Client) LeaseWithPause(ctx context.Context, req LeaseRequest) (LeaseAnswer, error) {
	msg, err := leaseMessage("Lease", req)
	if err != nil {
		return LeaseAnswer{}, err
	}
	resp, err := call(ctx, c, "Lease", c.workers.Lease, msg)
	if err != nil {
		return LeaseAnswer{}, err
	}
	return LeaseAnswer{Tasks: leasedTasksOf(resp.GetTasks()), Paused: pauseOf(resp.GetPaused())}, nil
}
