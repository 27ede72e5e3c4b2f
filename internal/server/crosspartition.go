package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// A record creates tasks in one partition (docs/design/workflows.md,
// "Cluster mode"). A dependency on a task of another partition is served:
// its edge is remote, resolved by the partition's host
// (internal/remoteedges). Until spawns cross the partitions of a cluster,
// the server refuses one into a queue the partition does not serve,
// naming the field, rather than create a task that no worker of its queue
// would find. In embedded mode every task is in the one partition, and
// nothing is refused or marked here.

// notServedYet is the end of every such refusal.
const notServedYet = "which this release does not serve in cluster mode yet: keep a workflow's tasks in one queue of one partition"

// remoteDeps returns the entries of deps, the dependencies of a task of
// namespace ns that goes to partition p, that are tasks of other
// partitions: each is checked to exist there, in namespace ns, and is
// then resolved by p's host when it ends (docs/design/workflows.md,
// "Cluster mode"). field names the list (depends_on,
// requests[i].depends_on, spawn[i].depends_on). What is not a task id (a
// request id of the same batch), or is one of p, is left to the
// coordinator. In embedded mode every task is in p.
func (s *Server) remoteDeps(ctx context.Context, p route.Partition, ns, field string, deps []string) ([]string, error) {
	var out []string
	for j, id := range deps {
		q, err := s.r.Task(ctx, id)
		if err != nil || q.ID() == p.ID() {
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
		out = append(out, id)
	}
	return out, nil
}

// spawnHere refuses a task that a commit of task parent spawns into a
// queue that the parent's partition does not serve (its workers would
// never lease it there), and marks the dependencies of each on tasks of
// other partitions (remoteDeps).
func (s *Server) spawnHere(ctx context.Context, parent, namespace string, spawn []coordinator.SubmitRequest) error {
	p, err := s.r.Task(ctx, parent)
	if err != nil {
		return err
	}
	for i := range spawn {
		r := &spawn[i]
		scope, err := s.r.Scope(ctx, cmp.Or(r.Namespace, namespace), r.Queue)
		if err != nil {
			return err
		}
		here := false
		for _, q := range scope {
			here = here || q.ID() == p.ID()
		}
		if !here {
			return &coordinator.FieldError{Field: fmt.Sprintf("spawn[%d].queue", i), Problem: fmt.Sprintf(
				"queue %q is not served by partition %d, the committing task's: a spawn into another partition, %s (spawn into the task's own queue)", r.Queue, p.ID(), notServedYet)}
		}
		if r.Remote, err = s.remoteDeps(ctx, p, cmp.Or(r.Namespace, namespace), fmt.Sprintf("spawn[%d].depends_on", i), r.DependsOn); err != nil {
			return err
		}
	}
	return nil
}
