package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The calls below span partitions. Each is split over the partitions that
// serve its parts, and the parts' answers are merged as API messages: a
// part served here is converted from the coordinator's answer exactly as a
// call addressed to it alone would be, and a part another node served is
// taken as that node answered it.

// part is the items of a batch that go to one partition, by their index
// in the batch.
type part struct {
	p   route.Partition
	idx []int
}

// parts groups the items of a batch by partition. at returns the
// partition of item i, or none (nil, nil) to leave the item out.
func parts(n int, at func(i int) (route.Partition, error)) ([]*part, error) {
	ps := make([]route.Partition, n)
	for i := range n {
		var err error
		if ps[i], err = at(i); err != nil {
			return nil, err
		}
	}
	var out []*part
	for _, idx := range groups(n, func(i int) (uint64, bool) {
		if ps[i] == nil {
			return 0, false
		}
		return ps[i].ID(), true
	}) {
		out = append(out, &part{p: ps[idx[0]], idx: idx})
	}
	return out, nil
}

// groups returns 0..n-1 grouped by key, each group in order and the groups
// in the order of their first members; i is left out where key is not ok.
func groups[K comparable](n int, key func(i int) (K, bool)) [][]int {
	var out [][]int
	at := make(map[K]int) // key → its group in out
	for i := range n {
		k, ok := key(i)
		if !ok {
			continue
		}
		g, seen := at[k]
		if !seen {
			g = len(out)
			at[k] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// each runs fn for parts 0..n-1, concurrently when there are several, and
// returns the first error in part order.
func each(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fanOut runs the parts of a batch concurrently, the parts that another
// node serves (route.Partition.Peer) grouped into one call to that node:
// do runs one part (through its partition's Do, here or forwarded), and
// forward sends the items idx to peer in one call. The node receiving a
// group splits it by partition again and serves each part or refuses it
// as unavailable; it forwards nothing further. A group that fails as
// unavailable runs part by part with do instead, when resend allows it
// for the group's items: Do follows a partition that moved, but the node
// that refused the group may have served some of its parts. Each failure
// is passed to failed with the items it is for; fanOut returns one of
// them (the parts alone come first, in order, then the groups).
func fanOut(ctx context.Context, ps []*part, do func(*part) error, forward func(peer route.Peer, idx []int) error, resend func(idx []int) bool, failed func(idx []int, err error)) error {
	type unit struct {
		parts []*part
		peer  route.Peer // nil: one part, run by do
		idx   []int      // with peer: the items of every part
	}
	var us []*unit
	peers := make([]route.Peer, len(ps))
	for k, pt := range ps {
		if peers[k] = pt.p.Peer(ctx); peers[k] == nil {
			us = append(us, &unit{parts: []*part{pt}})
		}
	}
	for _, ks := range groups(len(ps), func(k int) (string, bool) {
		if peers[k] == nil {
			return "", false
		}
		return peers[k].Addr(), true
	}) {
		u := &unit{peer: peers[ks[0]]}
		for _, k := range ks {
			u.parts = append(u.parts, ps[k])
			u.idx = append(u.idx, ps[k].idx...)
		}
		slices.Sort(u.idx) // the items in the batch's order
		us = append(us, u)
	}
	one := func(pt *part) error {
		err := do(pt)
		if err != nil && failed != nil {
			failed(pt.idx, err)
		}
		return err
	}
	return each(len(us), func(k int) error {
		u := us[k]
		if u.peer == nil || len(u.parts) == 1 {
			return one(u.parts[0])
		}
		err := forward(u.peer, u.idx)
		if err != nil && connect.CodeOf(err) == connect.CodeUnavailable && resend(u.idx) {
			return each(len(u.parts), func(j int) error { return one(u.parts[j]) })
		}
		if err != nil && failed != nil {
			failed(u.idx, err)
		}
		return err
	})
}

// badAnswer is an answer from another node that does not fit the request.
func badAnswer(peer route.Peer, format string, args ...any) error {
	return fmt.Errorf("%w: tenure node %s answered something this node cannot use: %s", coordinator.ErrUnavailable, peer.Addr(), fmt.Sprintf(format, args...))
}

// leases keeps the coordinator's leases of a Lease call from call to call
// (200 bytes per task), once converted to the answer.
var leases = sync.Pool{New: func() any { return new([]coordinator.Lease) }}

// submitRequests keeps the converted requests of a SubmitBatch from call
// to call: about 200 bytes per task that each batch allocated anew. The
// coordinator keeps nothing of them (its records copy what they need).
var submitRequests = sync.Pool{New: func() any { return new([]coordinator.SubmitRequest) }}

// submitBatch places each task in its partition and submits each
// partition's tasks in one call (those of another node's partitions in
// one call to that node). A batch that spans partitions is checked
// as a whole first, so that a bad item creates nothing; each part is then
// atomic on its own. If a part fails the call fails, though other parts
// may have been created: a retry with the same request ids (the SDK always
// sets them) creates each task once.
func (s *Server) submitBatch(ctx context.Context, msg *tenurev1.SubmitBatchRequest) (*tenurev1.SubmitBatchResponse, error) {
	in := msg.GetRequests()
	l := s.opts.Limits
	if len(in) == 0 || len(in) > cmp.Or(l.MaxBatch, coordinator.DefaultLimits.MaxBatch) {
		return nil, l.CheckBatch(make([]coordinator.SubmitRequest, len(in)), s.opts.Clock.Now())
	}
	held := submitRequests.Get().(*[]coordinator.SubmitRequest)
	reqs := *held
	if cap(reqs) < len(in) {
		reqs = make([]coordinator.SubmitRequest, len(in))
	}
	reqs = reqs[:len(in)]
	defer func() {
		clear(reqs) // let go of the payloads
		*held = reqs[:0]
		submitRequests.Put(held)
	}()
	for i, r := range in {
		var err error
		if reqs[i], err = submitRequest(r); err != nil {
			return nil, coordinator.ItemError(err, i)
		}
	}
	ps, err := parts(len(reqs), func(i int) (route.Partition, error) {
		r := &reqs[i]
		p, err := s.r.Place(ctx, cmp.Or(r.Namespace, coordinator.DefaultNamespace), r.Queue, r.RequestID)
		return p, coordinator.ItemError(err, i)
	})
	if err != nil {
		return nil, err
	}
	if len(ps) > 1 {
		if err := l.CheckBatch(reqs, s.opts.Clock.Now()); err != nil {
			return nil, err
		}
	}
	compact := msg.GetCompactIds()
	idsOnly := msg.GetIdsOnly() || compact
	out := &tenurev1.SubmitBatchResponse{}
	if compact {
		out.TaskIds, out.Duplicates = make([]string, len(reqs)), make([]bool, len(reqs))
	} else {
		out.Responses = make([]*tenurev1.SubmitResponse, len(reqs))
	}
	forward := func(peer route.Peer, idx []int) error {
		resp, err := peer.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: fanout.Pick(in, idx), IdsOnly: idsOnly, CompactIds: compact}))
		if err != nil {
			return err
		}
		got := resp.Msg
		switch {
		case compact && len(got.GetTaskIds()) == len(idx) && len(got.GetDuplicates()) == len(idx):
			for j, i := range idx {
				out.TaskIds[i], out.Duplicates[i] = got.GetTaskIds()[j], got.GetDuplicates()[j]
			}
		case len(got.GetResponses()) != len(idx):
			return badAnswer(peer, "SubmitBatch: %d results for %d tasks", max(len(got.GetResponses()), len(got.GetTaskIds())), len(idx))
		case compact:
			// A node older than compact_ids answers responses.
			for j, i := range idx {
				r := got.GetResponses()[j]
				out.TaskIds[i], out.Duplicates[i] = r.GetTask().GetTaskId(), r.GetDuplicate()
			}
		default:
			for j, i := range idx {
				out.Responses[i] = got.GetResponses()[j]
			}
		}
		return nil
	}
	do := func(pt *part) error {
		return pt.p.Do(ctx, false, func(c *coordinator.Coordinator) error {
			if compact {
				res, err := c.SubmitBatchIDs(ctx, fanout.Pick(reqs, pt.idx))
				for j, r := range res {
					out.TaskIds[pt.idx[j]], out.Duplicates[pt.idx[j]] = r.ID, r.Duplicate
				}
				return err
			}
			if idsOnly {
				res, err := c.SubmitBatchIDs(ctx, fanout.Pick(reqs, pt.idx))
				// Two allocations per call, not two per task.
				rs, ts := make([]tenurev1.SubmitResponse, len(res)), make([]tenurev1.Task, len(res))
				for j, r := range res {
					ts[j].TaskId = r.ID
					rs[j].Task, rs[j].Duplicate = &ts[j], r.Duplicate
					out.Responses[pt.idx[j]] = &rs[j]
				}
				return err
			}
			res, err := c.SubmitBatch(ctx, fanout.Pick(reqs, pt.idx))
			for j, r := range res {
				out.Responses[pt.idx[j]] = &tenurev1.SubmitResponse{Task: task(r.TaskView), Duplicate: r.Duplicate}
			}
			return err
		}, func(peer route.Peer) error { return forward(peer, pt.idx) })
	}
	// A group sent again creates each task once only if every task has
	// a request id: its partition then answers a task the refused call
	// created as a duplicate.
	resend := func(idx []int) bool {
		for _, i := range idx {
			if reqs[i].RequestID == "" {
				return false
			}
		}
		return true
	}
	if err := fanOut(ctx, ps, do, forward, resend, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// completeBatch completes each item in its task's partition, one call per
// partition (one call per node for another node's partitions). Every item
// is answered on its own; a part whose call fails as a whole answers that
// error for each of its items.
//
// With later nil, the answers are durable when it returns. Otherwise the
// writes of this node's partitions are added to later, and the caller
// waits for them (durables.wait) before it answers: a worker's
// CompleteBatch that also leases writes its lease first, so that the two
// share one wait.
func (s *Server) completeBatch(ctx context.Context, msg *tenurev1.CompleteBatchRequest, later *durables) (*tenurev1.CompleteBatchResponse, error) {
	in := msg.GetItems()
	if err := s.opts.Limits.CheckCompleteBatch(len(in)); err != nil {
		return nil, err
	}
	// results[i] is item i's: a failure has a code.
	results := make([]tenurev1.CompleteResult, len(in))
	failedOnly := msg.GetFailedOnly()
	fail := func(i int, err error) {
		ce := s.apiError(err)
		results[i].Code, results[i].Message, results[i].Detail = ce.Code().String(), ce.Message(), detailOf(ce)
	}
	// Items whose task id names no partition are answered at once; the
	// rest go to their partitions.
	ps, _ := parts(len(in), func(i int) (route.Partition, error) {
		p, err := s.r.Task(ctx, in[i].GetTaskId())
		if err != nil {
			fail(i, err)
			return nil, nil
		}
		return p, nil
	})
	forward := func(peer route.Peer, idx []int) error {
		resp, err := peer.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: fanout.Pick(in, idx), FailedOnly: failedOnly}))
		if err != nil {
			return err
		}
		got := resp.Msg.GetResults()
		// A node older than failed_only answers results.
		compact := len(got) == 0 && failedOnly
		if compact {
			got = resp.Msg.GetFailed() // the items not named succeeded
		} else if len(got) != len(idx) {
			return badAnswer(peer, "CompleteBatch: %d results for %d items", len(got), len(idx))
		}
		for k, r := range got {
			j := k
			if compact {
				j = int(r.GetIndex())
			}
			if j >= len(idx) || r.GetTaskId() != in[idx[j]].GetTaskId() {
				return badAnswer(peer, "CompleteBatch: result %d is for task %q, not item %d's", k, r.GetTaskId(), j)
			}
			res := &results[idx[j]]
			res.Code, res.Message, res.Detail = r.GetCode(), r.GetMessage(), r.GetDetail()
		}
		return nil
	}
	do := func(pt *part) error {
		return pt.p.Do(ctx, false, func(c *coordinator.Coordinator) error {
			// An item outside the caller's scope (or not found) is
			// refused on its own.
			items := make([]coordinator.CompleteItem, 0, len(pt.idx))
			at := make([]int, 0, len(pt.idx)) // the index in `in` of each of items
			for _, i := range pt.idx {
				err := s.checkTask(ctx, c, in[i].GetTaskId())
				if errors.Is(err, coordinator.ErrUnavailable) {
					return err
				}
				if err != nil {
					fail(i, err)
					continue
				}
				items = append(items, coordinator.CompleteItem{TaskID: in[i].GetTaskId(), LeaseID: in[i].GetLeaseId(), Result: in[i].GetResult()})
				at = append(at, i)
			}
			if len(items) == 0 {
				return nil
			}
			errs, durable, err := c.CompleteBatchUnwaited(ctx, items)
			if err == nil && later != nil {
				later.add(durable)
			} else if err == nil {
				err = durable.Wait(ctx)
			}
			if err != nil {
				return err
			}
			for j, e := range errs {
				if e != nil {
					fail(at[j], e)
				}
			}
			return nil
		}, func(peer route.Peer) error { return forward(peer, pt.idx) })
	}
	// A completion sent again is applied at most once: its lease ends
	// with the first.
	resend := func([]int) bool { return true }
	fanOut(ctx, ps, do, forward, resend, func(idx []int, err error) {
		for _, i := range idx {
			fail(i, err)
		}
	})
	out := &tenurev1.CompleteBatchResponse{}
	if !failedOnly {
		out.Results = make([]*tenurev1.CompleteResult, len(in))
	}
	for i := range results {
		r := &results[i]
		switch {
		case !failedOnly:
			r.TaskId = in[i].GetTaskId()
			out.Results[i] = r
		case r.Code != "":
			r.TaskId, r.Index = in[i].GetTaskId(), uint32(i)
			out.Failed = append(out.Failed, r)
		}
	}
	return out, nil
}

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
	var out *tenurev1.LeaseResponse
	err := p.Do(ctx, false, func(c *coordinator.Coordinator) error {
		if signals != nil {
			*signals = append(*signals, c.Signal(req.Namespace, req.Queue))
		}
		held := leases.Get().(*[]coordinator.Lease)
		ls, err := c.LeaseAppend(ctx, req, (*held)[:0])
		if err == nil {
			out = &tenurev1.LeaseResponse{Tasks: leasedTasks(ctx, ls)}
		}
		clear(ls) // converted: let go of the tasks' memory
		*held = ls[:0]
		leases.Put(held)
		if err == nil && len(out.Tasks) == 0 {
			// Nothing leased: say whether because the queue is paused.
			var p *state.Pause
			if p, err = c.QueuePause(ctx, req.Namespace, req.Queue); p != nil {
				out.Paused = &tenurev1.QueuePause{RequestedBy: p.By, Reason: p.Reason, PausedAt: ts(p.At)}
			}
		}
		return err
	}, func(peer route.Peer) error {
		m := &tenurev1.LeaseRequest{WorkerId: req.WorkerID, Namespace: req.Namespace, Queue: req.Queue, MaxTasks: uint32(req.MaxTasks), Wait: optDuration(req.Wait)}
		resp, err := peer.Lease(ctx, connect.NewRequest(m))
		if err != nil {
			return err
		}
		out = resp.Msg
		return nil
	})
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

// Page tokens name a partition and a position in it: the partition id in
// the top 24 bits, the position (a creation LSN) in the lower 40, written
// in decimal. Embedded mode's one partition is 0, so its tokens are the
// position alone.
const cursorBits = 40

func pageToken(partitionID, after uint64) (string, error) {
	if partitionID >= 1<<(64-cursorBits) || after >= 1<<cursorBits {
		return "", fmt.Errorf("%w: partition %d at position %d does not fit a page token", coordinator.ErrUnavailable, partitionID, after)
	}
	return strconv.FormatUint(partitionID<<cursorBits|after, 10), nil
}

func parsePageToken(tok string) (partitionID, after uint64, err error) {
	if tok == "" {
		return 0, 0, nil
	}
	c, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return 0, 0, &coordinator.FieldError{Field: "page_token", Problem: "not a token this server issued; pass next_page_token from the previous page"}
	}
	return c >> cursorBits, c & (1<<cursorBits - 1), nil
}

// list walks the partitions of the listing's scope in order, from the one
// its page token names. A forwarded listing covers exactly the partition
// its token names.
func (s *Server) list(ctx context.Context, msg *tenurev1.ListTasksRequest) (*tenurev1.ListTasksResponse, error) {
	f := coordinator.ListFilter{Namespace: msg.GetNamespace(), Queue: msg.GetQueue(), Limit: int(msg.GetPageSize())}
	st, ok := TaskState(msg.GetState())
	if !ok {
		return nil, &coordinator.FieldError{Field: "state", Problem: "unknown task state"}
	}
	f.State = st
	maxPage := cmp.Or(s.opts.Limits.MaxListPage, coordinator.DefaultLimits.MaxListPage)
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > maxPage {
		return nil, &coordinator.FieldError{Field: "page_size", Problem: fmt.Sprintf("%d is outside 0..%d (0: the default, 100)", f.Limit, maxPage)}
	}
	startID, after, err := parsePageToken(msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	var scope []route.Partition
	if _, fw := route.Forwarded(ctx); fw {
		p, err := s.r.Partition(ctx, startID)
		if err != nil {
			return nil, err
		}
		scope = []route.Partition{p}
	} else if scope, err = s.r.Scope(ctx, f.Namespace, f.Queue); err != nil {
		return nil, err
	}
	i := 0
	if msg.GetPageToken() != "" {
		for i < len(scope) && scope[i].ID() != startID {
			i++
		}
		if i == len(scope) {
			return nil, &coordinator.FieldError{Field: "page_token", Problem: "names a partition this listing does not cover; pass next_page_token from the previous page"}
		}
	}
	out := &tenurev1.ListTasksResponse{}
	for ; i < len(scope); i, after = i+1, 0 {
		p := scope[i]
		sub := f
		sub.Limit, sub.After = f.Limit-len(out.Tasks), after
		var next uint64
		err := p.Do(ctx, true, func(c *coordinator.Coordinator) error {
			tasks, n, err := c.List(ctx, sub)
			if err != nil {
				return err
			}
			for _, t := range tasks {
				out.Tasks = append(out.Tasks, task(t))
			}
			next = n
			return nil
		}, func(peer route.Peer) error {
			tok, err := pageToken(p.ID(), after)
			if err != nil {
				return err
			}
			m := &tenurev1.ListTasksRequest{Namespace: msg.GetNamespace(), Queue: msg.GetQueue(), State: msg.GetState(), PageSize: int32(sub.Limit), PageToken: tok}
			resp, err := peer.ListTasks(ctx, connect.NewRequest(m))
			if err != nil {
				return err
			}
			id, n, err := parsePageToken(resp.Msg.GetNextPageToken())
			if err != nil || (n != 0 && id != p.ID()) {
				return badAnswer(peer, "ListTasks: next page token %q is not one of partition %d", resp.Msg.GetNextPageToken(), p.ID())
			}
			out.Tasks = append(out.Tasks, resp.Msg.GetTasks()...)
			next = n
			return nil
		})
		if err != nil {
			return nil, err
		}
		if next != 0 {
			out.NextPageToken, err = pageToken(p.ID(), next)
			return out, err
		}
		if len(out.Tasks) == f.Limit {
			if i+1 < len(scope) {
				out.NextPageToken, err = pageToken(scope[i+1].ID(), 0)
			}
			return out, err
		}
	}
	return out, nil
}

// durables are the writes of one request that its handler waits for once,
// after the rest of its work.
type durables struct {
	mu sync.Mutex
	ds []coordinator.Durable
}

func (d *durables) add(x coordinator.Durable) {
	d.mu.Lock()
	d.ds = append(d.ds, x)
	d.mu.Unlock()
}

// wait waits until every write added is durable.
func (d *durables) wait(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.ds {
		if err := x.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}
