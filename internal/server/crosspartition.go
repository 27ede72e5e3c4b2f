package server

import (
	"cmp"
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// A record creates tasks in one partition (docs/design/workflows.md,
// "Cluster mode"). Until dependencies and spawns cross the partitions of a
// cluster, the server refuses what would need them, naming the field,
// rather than create a task that would wait forever or that no worker of
// its queue would find. In embedded mode every task is in the one
// partition, and nothing is refused here.

// notServedYet is the end of every such refusal.
const notServedYet = "which this release does not serve in cluster mode yet: keep a workflow's tasks in one queue of one partition"

// depsHere refuses a dependency, of a task that goes to partition p, on a
// task of another partition. field names the list (depends_on,
// requests[i].depends_on, spawn[i].depends_on). What is not a task id (a
// request id of the same batch) is left to the coordinator.
func (s *Server) depsHere(ctx context.Context, p route.Partition, field string, deps []string) error {
	for j, id := range deps {
		q, err := s.r.Task(ctx, id)
		if err != nil || q.ID() == p.ID() {
			continue
		}
		return &coordinator.FieldError{Field: fmt.Sprintf("%s[%d]", field, j), Problem: fmt.Sprintf(
			"task %s is in partition %d and this task goes to partition %d: a dependency across partitions, %s", id, q.ID(), p.ID(), notServedYet)}
	}
	return nil
}

// spawnHere refuses a task that a commit of task parent spawns into a
// queue that the parent's partition does not serve (its workers would
// never lease it there), and a dependency of one on a task of another
// partition.
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
		if err := s.depsHere(ctx, p, fmt.Sprintf("spawn[%d].depends_on", i), r.DependsOn); err != nil {
			return err
		}
	}
	return nil
}
