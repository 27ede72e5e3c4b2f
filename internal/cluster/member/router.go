package member

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
)

// forwarded reports whether the request came from another node, which
// chose this node as the partition's owner: it is served here or refused,
// never forwarded again.
func forwarded(ctx context.Context) bool {
	_, ok := server.Forwarded(ctx)
	return ok
}

// forwarder returns the API of the node at addr.
func (m *Member) forwarder(addr string) server.Backend {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.remotes[addr]
	if !ok {
		b = remote.New("http://"+addr, m.cfg.HTTPClient, m.cfg.NodeID)
		m.remotes[addr] = b
	}
	return b
}

// target returns the backend that serves partition id: its coordinator if
// this node serves it, else its owner's API. It waits up to AssignWait for
// a partition without an owner, or assigned to this node and opening. A
// forwarded request is served here or refused, never forwarded again.
func (m *Member) target(ctx context.Context, id uint64) (server.Backend, error) {
	fw := forwarded(ctx)
	var deadline time.Time
	reread := false
	for tries := 0; ; tries++ {
		if !m.trusted() {
			return nil, ErrUntrusted
		}
		if c := m.local(id); c != nil {
			return c, nil
		}
		r := m.routes.Load()
		a, known := r.byID[id]
		if !known && tries == 0 {
			if err := m.refresh(ctx); err != nil {
				return nil, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
			}
			continue
		}
		if !known {
			return nil, fmt.Errorf("%w: partition %d does not exist in this cluster", coordinator.ErrNotFound, id)
		}
		if fw && a.Owner != m.cfg.NodeID {
			// The sender's map says this node owns the partition; this
			// node's map may be the stale one.
			if !reread {
				reread = true
				if err := m.refresh(ctx); err != nil {
					return nil, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
				}
				continue
			}
			return nil, errNotServed(a, m.cfg.NodeID)
		}
		if a.Owner != "" && a.Owner != m.cfg.NodeID {
			if addr := r.addrs[a.Owner]; addr != "" {
				return m.forwarder(addr), nil
			}
		}
		// No owner yet, an owner that is not active (it left or went
		// silent; the coordinator moves its partitions), or this node's
		// and opening: wait for the map to move.
		now := m.cfg.Clock.Now()
		if deadline.IsZero() {
			deadline = now.Add(m.cfg.AssignWait)
		}
		if !now.Before(deadline) {
			return nil, fmt.Errorf("%w: partition %s has no serving owner yet (owner %q); retry", coordinator.ErrUnavailable, a.Key, a.Owner)
		}
		if err := clock.Sleep(ctx, m.cfg.Clock, min(m.cfg.AssignInterval/4+time.Millisecond, 50*time.Millisecond)); err != nil {
			return nil, err
		}
		if tries%4 == 3 {
			if err := m.refresh(ctx); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
}

// routed runs op on the backend that serves the task's partition. An
// unavailable answer from another node prompts a fresh reading of the map
// (the partition may have moved); the caller's retry then finds it. A
// read served here is confirmed afterwards (see confirm).
func routed[T any](m *Member, ctx context.Context, taskID string, read bool, op func(server.Backend) (T, error)) (T, error) {
	var zero T
	id, err := partitionOf(taskID)
	if err != nil {
		return zero, err
	}
	b, err := m.target(ctx, id)
	if err != nil {
		return zero, err
	}
	v, err := op(b)
	if m.moved(ctx, b, id, err) {
		if b, err = m.target(ctx, id); err != nil {
			return zero, err
		}
		v, err = op(b)
	}
	m.afterRemote(b, err)
	if err == nil && read {
		if c, isLocal := b.(*coordinator.Coordinator); isLocal {
			err = m.confirm(ctx, id, c)
		}
	}
	if err != nil {
		return zero, err
	}
	return v, nil
}

// confirm checks, after a read from partition id's coordinator c, that
// the partition's epoch is still the one this node serves it at. Writes
// are fenced by the log itself, but a read needs no write: without this,
// a node that lost a partition to a rebalance could answer reads from its
// stale copy until it noticed. The epoch only grows, so if it is still
// ours now, no other owner existed when the read was served.
func (m *Member) confirm(ctx context.Context, id uint64, c *coordinator.Coordinator) error {
	m.mu.Lock()
	o := m.owned[id]
	m.mu.Unlock()
	if o == nil || o.c != c {
		return fmt.Errorf("%w: partition %d stopped being served here during the read; retry", coordinator.ErrUnavailable, id)
	}
	var epoch uint64
	if err := m.cfg.DB.QueryRowContext(ctx, "SELECT epoch FROM partitions WHERE id = ?", id).Scan(&epoch); err != nil {
		return fmt.Errorf("%w: confirming partition %s is still served here: %v", coordinator.ErrUnavailable, o.a.Key, err)
	}
	if epoch != o.a.Epoch {
		m.kick()
		return errNotServed(o.a, m.cfg.NodeID)
	}
	return nil
}

// moved reports whether err is another node's unavailable answer for
// partition id and a fresh reading of the map names a new owner: the
// request never took effect there (the owner that refused it does not
// serve the partition any more), so it may go to the new one.
func (m *Member) moved(ctx context.Context, b server.Backend, id uint64, err error) bool {
	rb, ok := b.(*remote.Backend)
	if !ok || !errors.Is(err, coordinator.ErrUnavailable) {
		return false
	}
	before := m.routes.Load().byID[id]
	if m.refresh(ctx) != nil {
		return false
	}
	after := m.routes.Load()
	a := after.byID[id]
	return a.Owner != before.Owner && "http://"+after.addrs[a.Owner] != rb.Node()
}

func (m *Member) afterRemote(b server.Backend, err error) {
	if _, isLocal := b.(*coordinator.Coordinator); isLocal || !errors.Is(err, coordinator.ErrUnavailable) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		m.refresh(ctx)
	}()
}

// Get implements server.Backend.
func (m *Member) Get(ctx context.Context, taskID string) (*state.Task, error) {
	return routed(m, ctx, taskID, true, func(b server.Backend) (*state.Task, error) { return b.Get(ctx, taskID) })
}

// Kill implements server.Backend.
func (m *Member) Kill(ctx context.Context, taskID, reason string) error {
	_, err := routed(m, ctx, taskID, false, func(b server.Backend) (struct{}, error) { return struct{}{}, b.Kill(ctx, taskID, reason) })
	return err
}

// History implements server.Backend.
func (m *Member) History(ctx context.Context, taskID string) ([]coordinator.HistoryEntry, error) {
	return routed(m, ctx, taskID, true, func(b server.Backend) ([]coordinator.HistoryEntry, error) { return b.History(ctx, taskID) })
}

// Start implements server.Backend.
func (m *Member) Start(ctx context.Context, taskID, leaseID string) error {
	_, err := routed(m, ctx, taskID, false, func(b server.Backend) (struct{}, error) { return struct{}{}, b.Start(ctx, taskID, leaseID) })
	return err
}

// Heartbeat implements server.Backend.
func (m *Member) Heartbeat(ctx context.Context, taskID, leaseID string) (time.Time, error) {
	return routed(m, ctx, taskID, false, func(b server.Backend) (time.Time, error) { return b.Heartbeat(ctx, taskID, leaseID) })
}

// Commit implements server.Backend.
func (m *Member) Commit(ctx context.Context, taskID, leaseID string, result []byte) (coordinator.FencingToken, error) {
	return routed(m, ctx, taskID, false, func(b server.Backend) (coordinator.FencingToken, error) {
		return b.Commit(ctx, taskID, leaseID, result)
	})
}

// Complete implements server.Backend.
func (m *Member) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := routed(m, ctx, taskID, false, func(b server.Backend) (struct{}, error) {
		return struct{}{}, b.Complete(ctx, taskID, leaseID, result)
	})
	return err
}

// Fail implements server.Backend.
func (m *Member) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (coordinator.FailResult, error) {
	return routed(m, ctx, taskID, false, func(b server.Backend) (coordinator.FailResult, error) {
		return b.Fail(ctx, taskID, leaseID, reason, permanent)
	})
}

// CompleteBatch implements server.Backend: items go to their partitions'
// owners, one call per partition, concurrently. A part whose call fails as
// a whole answers that error for each of its items.
func (m *Member) CompleteBatch(ctx context.Context, items []coordinator.CompleteItem) ([]error, error) {
	if err := m.cfg.Coordinator.Limits.CheckCompleteBatch(len(items)); err != nil {
		return nil, err
	}
	errs := make([]error, len(items))
	groups := make(map[uint64][]int)
	for i, it := range items {
		id, err := partitionOf(it.TaskID)
		if err != nil {
			errs[i] = err
			continue
		}
		groups[id] = append(groups[id], i)
	}
	var wg sync.WaitGroup
	for id, idx := range groups {
		wg.Go(func() {
			part := make([]coordinator.CompleteItem, len(idx))
			for j, i := range idx {
				part[j] = items[i]
			}
			b, err := m.target(ctx, id)
			var perr []error
			if err == nil {
				perr, err = b.CompleteBatch(ctx, part)
				m.afterRemote(b, err)
			}
			for j, i := range idx {
				switch {
				case err != nil:
					errs[i] = err
				case j < len(perr):
					errs[i] = perr[j]
				default:
					errs[i] = fmt.Errorf("%w: the owner answered %d results for %d completions", coordinator.ErrUnavailable, len(perr), len(part))
				}
			}
		})
	}
	wg.Wait()
	return errs, nil
}

// queuePartitions returns the partitions of a queue, creating the queue
// (with Config.Partitions partitions) unless create is false.
func (m *Member) queuePartitions(ctx context.Context, namespace, queue string, create bool) ([]partition.Assignment, error) {
	k := queueKey{namespace, queue}
	if ps := m.routes.Load().byQueue[k]; len(ps) > 0 || !create {
		return ps, nil
	}
	// One creation at a time from this node: concurrent submits to a new
	// queue wait for the first.
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	if ps := m.routes.Load().byQueue[k]; len(ps) > 0 {
		return ps, nil
	}
	if err := m.store.EnsureQueue(ctx, namespace, queue, m.cfg.Partitions); err != nil {
		return nil, fmt.Errorf("%w: creating queue %s/%s: %v", coordinator.ErrUnavailable, namespace, queue, err)
	}
	for range 3 {
		if err := m.refresh(ctx); err != nil {
			return nil, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
		}
		if ps := m.routes.Load().byQueue[k]; len(ps) > 0 {
			return ps, nil
		}
	}
	return nil, fmt.Errorf("%w: queue %s/%s was created but is not in the partition map yet; retry", coordinator.ErrUnavailable, namespace, queue)
}

// pick chooses the partition of a submit: by the hash of its request id,
// so that a retry meets the first try's deduplication, else round robin.
// A forwarded submit without a request id takes one of this node's
// partitions of the queue.
func (m *Member) pick(ctx context.Context, ps []partition.Assignment, req *coordinator.SubmitRequest) (uint64, error) {
	if req.RequestID != "" {
		h := fnv.New64a()
		h.Write([]byte(req.Namespace))
		h.Write([]byte{0})
		h.Write([]byte(req.RequestID))
		return ps[h.Sum64()%uint64(len(ps))].ID, nil
	}
	n := m.rr.Add(1)
	if !forwarded(ctx) {
		return ps[n%uint64(len(ps))].ID, nil
	}
	// The sender chose this node for one of its partitions: take one it
	// serves, else one assigned to it (target waits while it opens),
	// reading the map again if this node's looks stale.
	for reread := false; ; reread = true {
		var mine []uint64
		for i := range ps {
			p := ps[(n+uint64(i))%uint64(len(ps))]
			if m.local(p.ID) != nil {
				return p.ID, nil
			}
			if p.Owner == m.cfg.NodeID {
				mine = append(mine, p.ID)
			}
		}
		if len(mine) > 0 {
			return mine[0], nil
		}
		if reread {
			return 0, errNotServed(ps[0], m.cfg.NodeID)
		}
		if err := m.refresh(ctx); err != nil {
			return 0, fmt.Errorf("%w: reading the partition map: %v", coordinator.ErrUnavailable, err)
		}
		if fresh := m.routes.Load().byQueue[queueKey{req.Namespace, req.Queue}]; len(fresh) > 0 {
			ps = fresh
		}
	}
}

func defaultNamespace(ns string) string {
	if ns == "" {
		return coordinator.DefaultNamespace
	}
	return ns
}

// Submit implements server.Backend.
func (m *Member) Submit(ctx context.Context, req coordinator.SubmitRequest) (coordinator.SubmitResult, error) {
	if err := m.cfg.Coordinator.Limits.CheckSubmit(req, m.cfg.Clock.Now()); err != nil {
		return coordinator.SubmitResult{}, err
	}
	req.Namespace = defaultNamespace(req.Namespace)
	ps, err := m.queuePartitions(ctx, req.Namespace, req.Queue, true)
	if err != nil {
		return coordinator.SubmitResult{}, err
	}
	id, err := m.pick(ctx, ps, &req)
	if err != nil {
		return coordinator.SubmitResult{}, err
	}
	b, err := m.target(ctx, id)
	if err != nil {
		return coordinator.SubmitResult{}, err
	}
	res, err := b.Submit(ctx, req)
	m.afterRemote(b, err)
	return res, err
}

// SubmitBatch implements server.Backend. The batch is checked as a whole
// first (a bad item creates nothing), then each partition's items are
// submitted in one call, the partitions concurrently. If a part fails the
// call fails, though other parts may have been created: a retry with the
// same request ids (the SDK always sets them) creates each task once.
func (m *Member) SubmitBatch(ctx context.Context, reqs []coordinator.SubmitRequest) ([]coordinator.SubmitResult, error) {
	if err := m.cfg.Coordinator.Limits.CheckBatch(reqs, m.cfg.Clock.Now()); err != nil {
		return nil, err
	}
	groups := make(map[uint64][]int)
	var order []uint64
	for i := range reqs {
		req := &reqs[i]
		req.Namespace = defaultNamespace(req.Namespace)
		ps, err := m.queuePartitions(ctx, req.Namespace, req.Queue, true)
		if err != nil {
			return nil, err
		}
		id, err := m.pick(ctx, ps, req)
		if err != nil {
			return nil, err
		}
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], i)
	}
	out := make([]coordinator.SubmitResult, len(reqs))
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for g, id := range order {
		wg.Go(func() {
			idx := groups[id]
			part := make([]coordinator.SubmitRequest, len(idx))
			for j, i := range idx {
				part[j] = reqs[i]
			}
			b, err := m.target(ctx, id)
			if err != nil {
				errs[g] = err
				return
			}
			res, err := b.SubmitBatch(ctx, part)
			m.afterRemote(b, err)
			if err == nil && len(res) != len(part) {
				err = fmt.Errorf("%w: the owner answered %d results for %d tasks", coordinator.ErrUnavailable, len(res), len(part))
			}
			if err != nil {
				errs[g] = err
				return
			}
			for j, i := range idx {
				out[i] = res[j]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, e := range errs {
			if e != nil {
				return nil, e
			}
		}
	}
	return out, nil
}

// Lease implements server.Backend: it leases from this node's partitions of
// the queue and, unless the request was forwarded, from the other owners'.
// With nothing ready it waits for its own partitions' signals and polls the
// others at a growing interval, up to the request's wait.
func (m *Member) Lease(ctx context.Context, req coordinator.LeaseRequest) ([]coordinator.Lease, error) {
	if err := m.cfg.Coordinator.Limits.CheckLease(&req); err != nil {
		return nil, err
	}
	if !m.trusted() {
		return nil, ErrUntrusted
	}
	fw := forwarded(ctx)
	deadline := m.cfg.Clock.Now().Add(req.Wait)
	poll := minRemotePoll
	for {
		got, signals, err := m.leaseOnce(ctx, req, fw)
		if len(got) > 0 || err != nil {
			return got, err
		}
		now := m.cfg.Clock.Now()
		if !now.Before(deadline) {
			return nil, nil
		}
		wait := min(deadline.Sub(now), poll)
		poll = min(2*poll, m.cfg.MaxRemotePoll)
		if err := m.waitAny(ctx, signals, wait); err != nil {
			return nil, err
		}
	}
}

// leaseOnce leases without waiting: this node's partitions first, in an
// order that rotates from call to call, then the other owners'. Leases
// granted are always returned, with a later error dropped.
func (m *Member) leaseOnce(ctx context.Context, req coordinator.LeaseRequest, fw bool) ([]coordinator.Lease, []<-chan struct{}, error) {
	ps, _ := m.queuePartitions(ctx, req.Namespace, req.Queue, false)
	var got []coordinator.Lease
	var signals []<-chan struct{}
	remoteOwners := make(map[string]bool)
	r := m.routes.Load()
	start := int(m.rr.Add(1))
	for i := range ps {
		a := ps[(start+i)%len(ps)]
		c := m.local(a.ID)
		if c == nil {
			if a.Owner != "" && a.Owner != m.cfg.NodeID {
				remoteOwners[a.Owner] = true
			}
			continue
		}
		if len(got) == req.MaxTasks {
			continue
		}
		signals = append(signals, c.Signal(req.Namespace, req.Queue))
		sub := req
		sub.MaxTasks, sub.Wait = req.MaxTasks-len(got), 0
		ls, err := c.Lease(ctx, sub)
		if err != nil {
			if len(got) > 0 || errors.Is(err, coordinator.ErrUnavailable) {
				continue
			}
			return nil, nil, err
		}
		got = append(got, ls...)
	}
	if fw {
		return got, signals, nil
	}
	for owner := range remoteOwners {
		if len(got) == req.MaxTasks {
			break
		}
		addr := r.addrs[owner]
		if addr == "" {
			continue
		}
		b := m.forwarder(addr)
		sub := req
		sub.MaxTasks, sub.Wait = req.MaxTasks-len(got), 0
		ls, err := b.Lease(ctx, sub)
		m.afterRemote(b, err)
		if err != nil {
			if len(got) > 0 || errors.Is(err, coordinator.ErrUnavailable) {
				continue
			}
			return nil, nil, err
		}
		got = append(got, ls...)
	}
	return got, signals, nil
}

// waitAny waits for d, a signal, or the end of ctx.
func (m *Member) waitAny(ctx context.Context, signals []<-chan struct{}, d time.Duration) error {
	t := m.cfg.Clock.NewTimer(d)
	defer t.Stop()
	cases := make([]reflect.SelectCase, 0, len(signals)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C())})
	for _, s := range signals {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s)})
	}
	if i, _, _ := reflect.Select(cases); i == 0 {
		return ctx.Err()
	}
	return nil
}

// List implements server.Backend. It walks the partitions of the filter's
// namespace and queue (all, where empty) in key order; f.After and the
// returned cursor name a partition and a position in it. A forwarded
// listing covers exactly the partition its cursor names.
func (m *Member) List(ctx context.Context, f coordinator.ListFilter) ([]*state.Task, uint64, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if !m.trusted() {
		return nil, 0, ErrUntrusted
	}
	startID, after := splitCursor(f.After)
	if forwarded(ctx) {
		c := m.local(startID)
		if c == nil {
			return nil, 0, fmt.Errorf("%w: partition %d is not served by node %q; retry", coordinator.ErrUnavailable, startID, m.cfg.NodeID)
		}
		sub := f
		sub.After = after
		tasks, next, err := c.List(ctx, sub)
		if err == nil {
			err = m.confirm(ctx, startID, c)
		}
		if err != nil {
			return nil, 0, err
		}
		if next == 0 {
			return tasks, 0, nil
		}
		cur, err := cursor(startID, next)
		return tasks, cur, err
	}
	var scope []partition.Assignment
	for _, a := range m.routes.Load().all {
		if (f.Namespace == "" || a.Key.Namespace == f.Namespace) && (f.Queue == "" || a.Key.Queue == f.Queue) {
			scope = append(scope, a)
		}
	}
	i := 0
	if f.After != 0 {
		i = len(scope)
		for j, a := range scope {
			if a.ID == startID {
				i = j
				break
			}
		}
		if i == len(scope) {
			return nil, 0, &coordinator.FieldError{Field: "page_token", Problem: "names a partition this listing does not cover; pass next_page_token from the previous page"}
		}
	}
	var out []*state.Task
	for ; i < len(scope); i, after = i+1, 0 {
		a := scope[i]
		b, err := m.target(ctx, a.ID)
		if err != nil {
			return nil, 0, err
		}
		sub := f
		sub.Limit = f.Limit - len(out)
		if _, isLocal := b.(*coordinator.Coordinator); isLocal {
			sub.After = after
		} else if sub.After, err = cursor(a.ID, after); err != nil {
			return nil, 0, err
		}
		tasks, next, err := b.List(ctx, sub)
		m.afterRemote(b, err)
		if c, isLocal := b.(*coordinator.Coordinator); isLocal && err == nil {
			err = m.confirm(ctx, a.ID, c)
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, tasks...)
		if _, isLocal := b.(*coordinator.Coordinator); !isLocal && next != 0 {
			_, next = splitCursor(next)
		}
		if next != 0 {
			cur, err := cursor(a.ID, next)
			return out, cur, err
		}
		if len(out) == f.Limit {
			if i+1 < len(scope) {
				cur, err := cursor(scope[i+1].ID, 0)
				return out, cur, err
			}
			return out, 0, nil
		}
	}
	return out, 0, nil
}
