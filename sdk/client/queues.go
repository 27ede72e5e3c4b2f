package client

import (
	"context"
	"errors"
	"iter"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The calls of QueueService: queue statistics, pause and resume, flow
// control.

// ListQueues returns the queues that exist (with a task, paused, with
// limits, or with an event in the last hour), ordered by namespace and
// queue. A failed call ends the sequence with its error.
func (c *Client) ListQueues(ctx context.Context, req ListQueuesRequest) iter.Seq2[*Queue, error] {
	return pages("", func(string) ([]*tenurev1.Queue, string, error) {
		resp, err := call(ctx, c, "ListQueues", c.queues.ListQueues, &tenurev1.ListQueuesRequest{Namespace: req.Namespace, Queue: req.Queue, TopKeys: req.TopKeys})
		return resp.GetQueues(), "", err
	}, converted(queueOf))
}

// GetQueue returns one queue. A queue that does not exist (no task, not
// paused, no limits, no event in the last hour) is refused with
// ErrNotFound.
func (c *Client) GetQueue(ctx context.Context, req GetQueueRequest) (*Queue, error) {
	resp, err := call(ctx, c, "GetQueue", c.queues.GetQueue, &tenurev1.GetQueueRequest{Namespace: req.Namespace, Queue: req.Queue})
	if err != nil {
		return nil, err
	}
	if resp.GetQueue() == nil {
		return nil, errors.New("client: GetQueue: the server answered without a queue (a server bug)")
	}
	q := queueOf(resp.GetQueue())
	return &q, nil
}

// PauseQueue pauses a queue: it leases nothing more but COMMITTED tasks to
// be finalised, until ResumeQueue; it still accepts submits, and leases
// held already keep their authority. The pause is a log record: it holds
// across restarts. Pausing a paused queue changes nothing (Changed is
// false); a queue that does not exist is refused with ErrNotFound.
func (c *Client) PauseQueue(ctx context.Context, req PauseQueueRequest) (QueueControlResult, error) {
	resp, err := call(ctx, c, "PauseQueue", c.queues.PauseQueue, &tenurev1.PauseQueueRequest{
		Namespace: req.Namespace, Queue: req.Queue, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return QueueControlResult{}, err
	}
	return queueControlResult("PauseQueue", resp)
}

// ResumeQueue resumes a paused queue; its waiting long-polls get tasks at
// once. Resuming a running queue changes nothing (Changed is false); a
// queue that does not exist is refused with ErrNotFound.
func (c *Client) ResumeQueue(ctx context.Context, req ResumeQueueRequest) (QueueControlResult, error) {
	resp, err := call(ctx, c, "ResumeQueue", c.queues.ResumeQueue, &tenurev1.ResumeQueueRequest{
		Namespace: req.Namespace, Queue: req.Queue, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return QueueControlResult{}, err
	}
	return queueControlResult("ResumeQueue", resp)
}

// SetQueueLimits sets or clears a queue's flow control: at most
// MaxConcurrency leases live at once, and leases granted at most at Rate
// per second with bursts of Burst (a token bucket); and the same per key,
// with ordered keys and fair turns across the keys. A limit the request
// neither sets nor clears is kept as it is. Each change is a log record; in
// cluster mode the limits are split over the queue's partitions and their
// sum is never exceeded. A queue that does not exist yet is created. A bad
// limit is refused with ErrInvalidArgument naming the field, and nothing
// is written; setting the limits the queue has changes nothing (Changed is
// false).
func (c *Client) SetQueueLimits(ctx context.Context, req SetQueueLimitsRequest) (QueueControlResult, error) {
	resp, err := call(ctx, c, "SetQueueLimits", c.queues.SetQueueLimits, &tenurev1.SetQueueLimitsRequest{
		Namespace: req.Namespace, Queue: req.Queue,
		MaxConcurrency: req.MaxConcurrency, Rate: req.Rate, Burst: req.Burst,
		ClearMaxConcurrency: req.ClearMaxConcurrency, ClearRate: req.ClearRate,
		KeyMaxConcurrency: req.KeyMaxConcurrency, KeyRate: req.KeyRate, KeyBurst: req.KeyBurst,
		ClearKeyMaxConcurrency: req.ClearKeyMaxConcurrency, ClearKeyRate: req.ClearKeyRate, KeyOrdered: req.KeyOrdered, Fair: req.Fair,
		KeyWeights: keyWeightMessages(req.KeyWeights), ClearKeyWeights: req.ClearKeyWeights,
		Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return QueueControlResult{}, err
	}
	return queueControlResult("SetQueueLimits", resp)
}

// keyWeightMessages converts key weights to the API's.
func keyWeightMessages(ws []KeyWeight) []*tenurev1.KeyWeight {
	var out []*tenurev1.KeyWeight
	for _, w := range ws {
		out = append(out, &tenurev1.KeyWeight{Key: w.Key, Weight: w.Weight})
	}
	return out
}

// queueControlResult is the result of op's answer (a pause, a resume or
// a change of limits).
func queueControlResult(op string, resp interface {
	GetChanged() bool
	GetQueue() *tenurev1.Queue
}) (QueueControlResult, error) {
	if resp.GetQueue() == nil {
		return QueueControlResult{}, errors.New("client: " + op + ": the server answered without the queue (a server bug); GetQueue shows it")
	}
	return QueueControlResult{Changed: resp.GetChanged(), Queue: queueOf(resp.GetQueue())}, nil
}
