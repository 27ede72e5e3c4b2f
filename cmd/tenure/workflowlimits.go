package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// workflowLimits are the server's flags that bound dependencies,
// workflows and spawns (docs/guides/workflows.md, "Limits").
type workflowLimits struct {
	deps, tasks, depth, spawn, atomic int
}

func (w *workflowLimits) add(fs *pflag.FlagSet) {
	d := coordinator.DefaultLimits
	fs.IntVar(&w.deps, "max-dependencies", d.MaxDependencies, "dependencies one task may name (depends_on)")
	fs.IntVar(&w.tasks, "max-workflow-tasks", d.MaxWorkflowTasks, "tasks of one workflow (in cluster mode, in one partition)")
	fs.IntVar(&w.depth, "max-workflow-depth", d.MaxWorkflowDepth, "longest chain of dependencies ending at a new task")
	fs.IntVar(&w.spawn, "max-spawn", d.MaxSpawn, "tasks one commit or completion may spawn (at most 65536)")
	fs.IntVar(&w.atomic, "max-atomic-bytes", d.MaxAtomicBytes, "size of the one record that creates the tasks of a workflow batch or a spawn: their payloads, names and dependencies (at most 6 MiB, under the logs' record limit)")
}

// apply checks the flags and sets them in l.
func (w *workflowLimits) apply(l *coordinator.Limits) error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"max-dependencies", w.deps, 1_000_000}, {"max-workflow-tasks", w.tasks, 100_000_000},
		{"max-workflow-depth", w.depth, 1_000_000}, {"max-spawn", w.spawn, 65536}, {"max-atomic-bytes", w.atomic, 6 << 20},
	} {
		if f.v < 1 || f.v > f.max {
			return usageError{fmt.Sprintf("--%s %d is outside 1..%d", f.name, f.v, f.max)}
		}
	}
	l.MaxDependencies, l.MaxWorkflowTasks, l.MaxWorkflowDepth, l.MaxSpawn, l.MaxAtomicBytes = w.deps, w.tasks, w.depth, w.spawn, w.atomic
	return nil
}
