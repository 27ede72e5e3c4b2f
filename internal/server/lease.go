package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// A Lease draws from every partition of its queues: this node's without a
// network hop (fanout.Call), the other nodes' through one call to each
// node that serves some. It goes through them one after the other, until
// it has as many tasks as it asks for: leases granted cannot be taken
// back, so it never asks for more than it still lacks.

// leases keeps the coordinator's leases of a Lease call from call to call
// (200 bytes per task), once converted to the answer.
var leases = sync.Pool{New: func() any { return new([]coordinator.Lease) }}

// leaseRequest is a Lease call's request, checked: the coordinator's
// request, and the queues of a lease from several (nil for one, Queue).
type leaseRequest struct {
	coordinator.LeaseRequest
	queues []string
}

// maxLeaseQueues is the most queues one Lease may name.
const maxLeaseQueues = 32

// leaseRequest is msg as the coordinator's request, with its defaults,
// checked against the server's limits.
func (s *Server) leaseRequest(msg *tenurev1.LeaseRequest) (leaseRequest, error) {
	wait, err := duration("wait", msg.GetWait())
	if err != nil {
		return leaseRequest{}, err
	}
	req := leaseRequest{LeaseRequest: coordinator.LeaseRequest{
		WorkerID:  msg.GetWorkerId(),
		Namespace: msg.GetNamespace(),
		Queue:     msg.GetQueue(),
		MaxTasks:  int(msg.GetMaxTasks()),
		Wait:      wait,
	}}
	qs := msg.GetQueues()
	if len(qs) == 0 {
		return req, s.opts.Limits.CheckLease(&req.LeaseRequest)
	}
	switch {
	case req.Queue != "":
		return leaseRequest{}, &coordinator.FieldError{Field: "queue", Problem: "set with queues: name the queues in queues alone"}
	case len(qs) > maxLeaseQueues:
		return leaseRequest{}, &coordinator.FieldError{Field: "queues", Problem: fmt.Sprintf("%d queues is over the limit of %d per lease", len(qs), maxLeaseQueues)}
	}
	for i, q := range qs {
		one := req.LeaseRequest
		one.Queue = q
		if err := s.opts.Limits.CheckLease(&one); err != nil {
			var fe *coordinator.FieldError
			if errors.As(err, &fe) && fe.Field == "queue" {
				fe.Field = fmt.Sprintf("queues[%d]", i)
			}
			return leaseRequest{}, err
		}
		if slices.Contains(qs[:i], q) {
			return leaseRequest{}, &coordinator.FieldError{Field: fmt.Sprintf("queues[%d]", i), Problem: fmt.Sprintf("%q is named twice", q)}
		}
		req.LeaseRequest = one // its defaults filled in
	}
	req.Queue, req.queues = "", qs
	return req, nil
}

// lease leases from the queue's partitions: this node's own without a
// network hop, the others' through their nodes. With nothing ready it
// waits for its own partitions' signals and polls the others at a growing
// interval (at most Options.MaxRemotePoll), up to the request's wait. One
// partition served here long-polls on its own. A lease from several queues
// does the same over the partitions of all of them, starting from a queue
// that rotates from call to call. req is checked (leaseRequest).
func (s *Server) lease(ctx context.Context, req leaseRequest) (*tenurev1.LeaseResponse, error) {
	clk := s.opts.Clock
	deadline := clk.Now().Add(req.Wait)
	poll := minRemotePoll
	for {
		var (
			got     *tenurev1.LeaseResponse
			signals []<-chan struct{}
			err     error
		)
		if req.queues == nil {
			local, peers, qerr := s.r.Queue(ctx, req.Namespace, req.Queue)
			if qerr != nil {
				return nil, qerr
			}
			if len(local) == 1 && len(peers) == 0 {
				sub := req.LeaseRequest
				sub.Wait = max(0, deadline.Sub(clk.Now()))
				return s.leaseFrom(ctx, local[0], sub, nil)
			}
			got, signals, err = s.leaseOnce(ctx, req.LeaseRequest, local, peers)
		} else {
			got, signals, err = s.leaseQueues(ctx, req)
		}
		if err != nil {
			return nil, err // got is nil: reading it first panicked (a shutdown's unavailable answer)
		}
		if len(got.Tasks) > 0 {
			return got, nil
		}
		now := clk.Now()
		if !now.Before(deadline) {
			return got, nil
		}
		d := min(deadline.Sub(now), poll)
		poll = min(2*poll, s.opts.MaxRemotePoll)
		if err := s.waitAny(ctx, signals, d); err != nil {
			return nil, err
		}
	}
}

// leaseQueues leases without waiting from the partitions of each of
// req.queues in turn, from one that rotates from call to call, until
// req.MaxTasks; it returns the signals of the partitions served here. A
// queue's error ends the call unless tasks were leased (they are always
// returned).
func (s *Server) leaseQueues(ctx context.Context, req leaseRequest) (*tenurev1.LeaseResponse, []<-chan struct{}, error) {
	out := &tenurev1.LeaseResponse{}
	var signals []<-chan struct{}
	n := len(req.queues)
	first := int(s.leaseTurn.Add(1) % uint64(n))
	allPaused := true // every queue answered nothing, being paused
	for i := range n {
		if len(out.Tasks) >= req.MaxTasks {
			break
		}
		sub := req.LeaseRequest
		sub.Queue, sub.MaxTasks = req.queues[(first+i)%n], req.MaxTasks-len(out.Tasks)
		local, peers, err := s.r.Queue(ctx, sub.Namespace, sub.Queue)
		var got *tenurev1.LeaseResponse
		var sigs []<-chan struct{}
		if err == nil {
			got, sigs, err = s.leaseOnce(ctx, sub, local, peers)
		}
		if err != nil {
			if len(out.Tasks) > 0 {
				return out, signals, nil
			}
			return nil, nil, err
		}
		out.Tasks = append(out.Tasks, got.Tasks...)
		signals = append(signals, sigs...)
		if got.Paused == nil {
			allPaused = false
		} else if out.Paused == nil {
			out.Paused = got.Paused
		}
	}
	if len(out.Tasks) > 0 || !allPaused {
		out.Paused = nil
	}
	return out, signals, nil
}

// leaseOnce leases without waiting from local (in an order that rotates
// from call to call) and then from peers, until req.MaxTasks. Leases
// granted are always returned, with a later error dropped; an unavailable
// partition or peer is skipped.
func (s *Server) leaseOnce(ctx context.Context, req coordinator.LeaseRequest, local []route.Partition, peers []route.Peer) (*tenurev1.LeaseResponse, []<-chan struct{}, error) {
	out := &tenurev1.LeaseResponse{}
	var signals []<-chan struct{}
	add := func(err error) error {
		if err == nil || len(out.Tasks) > 0 || connect.CodeOf(s.apiError(err)) == connect.CodeUnavailable {
			return nil
		}
		return err
	}
	for _, p := range local {
		if len(out.Tasks) >= req.MaxTasks {
			break
		}
		sub := req
		sub.MaxTasks, sub.Wait = req.MaxTasks-len(out.Tasks), 0
		got, err := s.leaseFrom(ctx, p, sub, &signals)
		if err := add(err); err != nil {
			return nil, nil, err
		}
		if got != nil {
			out.Tasks = append(out.Tasks, got.Tasks...)
			out.Paused = cmp.Or(out.Paused, got.Paused)
		}
	}
	for _, peer := range peers {
		if len(out.Tasks) >= req.MaxTasks {
			break
		}
		resp, err := peer.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId:  req.WorkerID,
			Namespace: req.Namespace,
			Queue:     req.Queue,
			MaxTasks:  uint32(req.MaxTasks - len(out.Tasks)),
		}))
		if err := add(err); err != nil {
			return nil, nil, err
		}
		if err == nil {
			out.Tasks = append(out.Tasks, resp.Msg.GetTasks()...)
			out.Paused = cmp.Or(out.Paused, resp.Msg.GetPaused())
		}
	}
	if len(out.Tasks) > 0 {
		out.Paused = nil
	}
	return out, signals, nil
}

// leaseFrom leases from one partition; with signals, it also collects the
// channel that is closed when the partition's queue may have a task ready.
func (s *Server) leaseFrom(ctx context.Context, p route.Partition, req coordinator.LeaseRequest, signals *[]<-chan struct{}) (*tenurev1.LeaseResponse, error) {
	return fanout.Call(ctx, p, false, func(c *coordinator.Coordinator) (*tenurev1.LeaseResponse, error) {
		if signals != nil {
			*signals = append(*signals, c.Signal(req.Namespace, req.Queue))
		}
		return leaseHere(ctx, c, req)
	}, func(peer route.Peer) (*tenurev1.LeaseResponse, error) {
		m := &tenurev1.LeaseRequest{WorkerId: req.WorkerID, Namespace: req.Namespace, Queue: req.Queue, MaxTasks: uint32(req.MaxTasks), Wait: optDuration(req.Wait)}
		resp, err := peer.Lease(ctx, connect.NewRequest(m))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
}

// leaseHere leases from a partition served here. With nothing leased, the
// answer says whether the queue is paused.
func leaseHere(ctx context.Context, c *coordinator.Coordinator, req coordinator.LeaseRequest) (*tenurev1.LeaseResponse, error) {
	held := leases.Get().(*[]coordinator.Lease)
	ls, err := c.LeaseAppend(ctx, req, (*held)[:0])
	var out *tenurev1.LeaseResponse
	if err == nil {
		out = &tenurev1.LeaseResponse{Tasks: leasedTasks(ctx, ls)}
	}
	clear(ls) // converted: let go of the tasks' memory
	*held = ls[:0]
	leases.Put(held)
	if err != nil || len(out.Tasks) > 0 {
		return out, err
	}
	p, err := c.QueuePause(ctx, req.Namespace, req.Queue)
	if p != nil {
		out.Paused = &tenurev1.QueuePause{RequestedBy: p.By, Reason: p.Reason, PausedAt: ts(p.At)}
	}
	return out, err
}

// waitAny waits for d, a signal, or the end of ctx.
func (s *Server) waitAny(ctx context.Context, signals []<-chan struct{}, d time.Duration) error {
	t := s.opts.Clock.NewTimer(d)
	defer t.Stop()
	cases := make([]reflect.SelectCase, 0, len(signals)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C())})
	for _, sig := range signals {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sig)})
	}
	if i, _, _ := reflect.Select(cases); i == 0 {
		return ctx.Err()
	}
	return nil
}
