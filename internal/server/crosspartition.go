package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// Records that create tasks in several partitions of a cluster
// (docs/design/workflows.md, "Cluster mode"): a workflow batch, or a batch
// whose tasks depend on each other, whose tasks the router places in
// several partitions is written whole in one, its home (the first task's);
// so is a spawn into a queue the committing task's partition does not
// serve, in the task's partition. The home's coordinator keeps the tasks
// of the other partitions as deliveries, and its host delivers them
// (route.DeliverPath). A dependency on a task of another partition than
// the task's own is remote, resolved by that partition's host
// (internal/remoteedges). In embedded mode every task is in the one
// partition, and nothing is placed or marked here.

// remoteDeps returns the entries of deps, the dependencies of a task of
// namespace ns that goes to partition p, that are tasks of other
// partitions: each is checked to exist there, in namespace ns, and is
// then resolved by p's host when it ends (docs/design/workflows.md,
// "Cluster mode"). field names the list (depends_on,
// requests[i].depends_on, spawn[i].depends_on). What is not a task id (a
// request id of the same batch), or is one of p, is left to the
// coordinator, and so is a task of p unless checkHere (a task that
// another partition's record creates: its dependencies in p are checked
// to exist too, as they cannot be where the record is written). In
// embedded mode every task is in p.
func (s *Server) remoteDeps(ctx context.Context, p route.Partition, ns, field string, deps []string, checkHere bool) ([]string, error) {
	var out []string
	for j, id := range deps {
		q, err := s.r.Task(ctx, id)
		if err != nil || (q.ID() == p.ID() && !checkHere) {
			continue
		}
		var dns string
		err = q.Do(ctx, true, func(c *coordinator.Coordinator) error {
			t, err := c.Get(ctx, id)
			if err == nil {
				dns = t.Namespace
			}
			return err
		}, func(peer route.Peer) error {
			resp, err := peer.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
			if connect.CodeOf(err) == connect.CodeNotFound {
				return coordinator.ErrNotFound
			}
			if err == nil {
				dns = resp.Msg.GetTask().GetNamespace()
			}
			return err
		})
		f := fmt.Sprintf("%s[%d]", field, j)
		switch {
		case errors.Is(err, coordinator.ErrNotFound):
			return nil, &coordinator.FieldError{Field: f, Problem: fmt.Sprintf("task %s does not exist (its id names partition %d; finished tasks leave after the retention period)", id, q.ID())}
		case err != nil:
			return nil, err
		case dns != cmp.Or(ns, coordinator.DefaultNamespace):
			return nil, &coordinator.FieldError{Field: f, Problem: fmt.Sprintf("task %s is in namespace %q, not %q: a task depends only on tasks of its namespace", id, dns, cmp.Or(ns, coordinator.DefaultNamespace))}
		}
		if q.ID() != p.ID() {
			out = append(out, id)
		}
	}
	return out, nil
}

// placeSpawn places the tasks that a commit of task parent spawns: in
// the parent's partition if it serves the spawned task's queue, else
// where the router places it (by request id, or key), which the request's
// Place then names; and marks the dependencies of each on tasks of other
// partitions than its own (remoteDeps).
func (s *Server) placeSpawn(ctx context.Context, parent, namespace string, spawn []coordinator.SubmitRequest) error {
	p, err := s.r.Task(ctx, parent)
	if err != nil {
		return err
	}
	for i := range spawn {
		r := &spawn[i]
		ns := cmp.Or(r.Namespace, namespace)
		scope, err := s.r.Scope(ctx, ns, r.Queue)
		if err != nil {
			return err
		}
		to := p
		here := false
		for _, q := range scope {
			here = here || q.ID() == p.ID()
		}
		if !here {
			if to, err = s.r.Place(ctx, ns, r.Queue, taskPlacement(r)); err != nil {
				return coordinator.ItemError(err, i)
			}
			r.Place = route.TaskIDSuffix(to.ID())
		}
		if r.Remote, err = s.remoteDeps(ctx, to, ns, fmt.Sprintf("spawn[%d].depends_on", i), r.DependsOn, to.ID() != p.ID()); err != nil {
			return err
		}
	}
	return nil
}

// submitPlaced submits a workflow batch, or a batch with dependencies,
// whose tasks the router placed in several partitions (parts): all of it
// to the home, the first task's partition, each task's Place naming its
// partition when it is not the home.
func (s *Server) submitPlaced(ctx context.Context, workflow string, reqs []coordinator.SubmitRequest, in []*tenurev1.SubmitRequest, parts []fanout.Part) (*tenurev1.SubmitBatchResponse, error) {
	at := make([]route.Partition, len(reqs))
	for _, pt := range parts {
		for _, i := range pt.Items {
			at[i] = pt.P
		}
	}
	home := at[0]
	ids := make([]string, len(reqs))
	for i := range reqs {
		ids[i] = strconv.FormatUint(at[i].ID(), 10)
	}
	out, err := fanout.Call(ctx, home, false, func(c *coordinator.Coordinator) (submitted, error) {
		return s.submitHome(ctx, c, workflow, reqs, at)
	}, func(peer route.Peer) (submitted, error) {
		req := fanout.Request(&tenurev1.SubmitBatchRequest{Requests: in, WorkflowId: workflow}, home)
		req.Header().Set(route.PlacedHeader, strings.Join(ids, ","))
		return submittedBy(ctx, peer, req)
	})
	if err != nil {
		return nil, err
	}
	return &tenurev1.SubmitBatchResponse{TaskIds: out.ids, Duplicates: out.dups}, nil
}

// submitHome submits a batch placed in the partitions at (the first one
// its home) to c, the home's coordinator: each task placed elsewhere gets
// its partition's suffix as its Place, and each task's dependencies on
// tasks of other partitions than its own are marked remote (those of a
// task placed elsewhere on tasks of its own partition checked to exist).
func (s *Server) submitHome(ctx context.Context, c *coordinator.Coordinator, workflow string, reqs []coordinator.SubmitRequest, at []route.Partition) (submitted, error) {
	home := at[0]
	for i := range reqs {
		r := &reqs[i]
		elsewhere := at[i].ID() != home.ID()
		if elsewhere {
			r.Place = route.TaskIDSuffix(at[i].ID())
		}
		if len(r.DependsOn) > 0 {
			var err error
			if r.Remote, err = s.remoteDeps(ctx, at[i], r.Namespace, fmt.Sprintf("requests[%d].depends_on", i), r.DependsOn, elsewhere); err != nil {
				return submitted{}, err
			}
		}
	}
	return submitHere(ctx, c, workflow, reqs)
}

// submitForwardedPlaced serves a SubmitBatch forwarded with
// route.PlacedHeader: the batch goes whole to the home partition
// route.PartitionHeader names, which this node serves, each task to the
// partition the header gives it.
func (s *Server) submitForwardedPlaced(ctx context.Context, h interface{ Get(string) string }, workflow string, reqs []coordinator.SubmitRequest) (*tenurev1.SubmitBatchResponse, error) {
	homeID, err := strconv.ParseUint(h.Get(route.PartitionHeader), 10, 64)
	if err != nil {
		return nil, &coordinator.FieldError{Field: route.PartitionHeader, Problem: "not a partition id: a batch forwarded with " + route.PlacedHeader + " names its home"}
	}
	placed := strings.Split(h.Get(route.PlacedHeader), ",")
	if len(placed) != len(reqs) {
		return nil, &coordinator.FieldError{Field: route.PlacedHeader, Problem: fmt.Sprintf("%d partitions for %d tasks", len(placed), len(reqs))}
	}
	at := make([]route.Partition, len(reqs))
	for i, v := range placed {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, &coordinator.FieldError{Field: route.PlacedHeader, Problem: fmt.Sprintf("%q is not a partition id", v)}
		}
		if at[i], err = s.r.Partition(ctx, id); err != nil {
			return nil, err
		}
	}
	if at[0].ID() != homeID {
		return nil, &coordinator.FieldError{Field: route.PlacedHeader, Problem: fmt.Sprintf("the first task is placed in partition %d, not the home %d", at[0].ID(), homeID)}
	}
	out, err := fanout.Call(ctx, at[0], false, func(c *coordinator.Coordinator) (submitted, error) {
		return s.submitHome(ctx, c, workflow, reqs, at)
	}, func(route.Peer) (submitted, error) {
		return submitted{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("partition %d is not served here; retry", homeID))
	})
	if err != nil {
		return nil, err
	}
	return &tenurev1.SubmitBatchResponse{TaskIds: out.ids, Duplicates: out.dups}, nil
}
