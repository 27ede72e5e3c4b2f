package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// The workflow commands: `tenure workflow get|list|cancel|retry`.

// workflowGetCmd is `tenure workflow get`.
type workflowGetCmd struct {
	client    clientFlags
	ns        namespaceFlag
	limit     int
	pageToken string
}

func (*workflowGetCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "get [flags] WORKFLOW_ID",
		Args:  oneArg("workflow id"),
		Short: "show a workflow: its state, its tasks by state, and its graph",
		Long: `Show a workflow (the tasks of one ` + "`SubmitBatch`" + ` with a workflow id, and those
they spawned): its state (RUNNING, COMPLETED, FAILED or CANCELLED), its
tasks by state, when it was submitted and last changed, and its graph: one
line per task, in creation order (each after the tasks it depends on),
numbered, with the numbers of the tasks it depends on (DEPENDS ON; a task
outside the workflow by its id) and of the task that spawned it.

It shows up to --limit tasks (default 1000, the most one call returns);
when more follow, it says on stderr how to show the next ones. With
--json it prints the API's GetWorkflowResponse.`,
		Example: `  tenure workflow get nightly-etl-2026-03-01
  tenure workflow get order-1234 --namespace shop --json | jq '.tasks[] | {id, state}'`,
	}
}

func (c *workflowGetCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	c.ns.add(fs, "workflow")
	fs.IntVar(&c.limit, "limit", maxListPage, fmt.Sprintf("show at most this many tasks (1..%d)", maxListPage))
	fs.StringVar(&c.pageToken, "page-token", "", "show the tasks after those of an earlier call (the token it printed)")
}

func (c *workflowGetCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	id := args[0]
	if c.limit < 1 || c.limit > maxListPage {
		return usageError{fmt.Sprintf("--limit %d is outside 1..%d", c.limit, maxListPage)}
	}
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) (*client.WorkflowPage, error) {
		return cl.GetWorkflow(ctx, client.GetWorkflowRequest{Namespace: c.ns.namespace, WorkflowID: id, PageSize: c.limit, PageToken: c.pageToken})
	}, func(p *client.WorkflowPage) error {
		printWorkflow(a.stdout, &p.Workflow)
		fmt.Fprintln(a.stdout)
		if err := printGraph(a.stdout, p.Tasks); err != nil {
			return err
		}
		if p.NextPageToken != "" {
			fmt.Fprintf(a.stderr, "more tasks follow: tenure workflow get %s --namespace %s --page-token %s\n",
				shellQuote(id), shellQuote(c.ns.namespace), shellQuote(p.NextPageToken))
		}
		return nil
	})
}

// printWorkflow prints what `tenure workflow get` shows of a workflow
// above its graph.
func printWorkflow(out io.Writer, wf *client.Workflow) {
	w, row := fieldTable(out)
	row("workflow", wf.Namespace+"/"+wf.ID)
	state := wf.State.String()
	if c := wf.Cancel; c != nil {
		state += " " + sinceText(c.At, c.RequestedBy, c.Reason)
	}
	row("state", state)
	row("tasks", fmt.Sprintf("%d: %s", wf.Total, countsText(wf.Tasks)))
	if wf.Delivering > 0 {
		row("delivering", fmt.Sprintf("%d (created by its record, on their way to their partitions)", wf.Delivering))
	}
	row("created", fmtTime(wf.CreatedAt))
	row("updated", fmtTime(wf.UpdatedAt))
	w.Flush()
}

// countsText says the non-zero counts of tasks by state: "2 completed, 1
// blocked", or "none".
func countsText(n client.TaskCounts) string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		name string
	}{{n.Blocked, "blocked"}, {n.Waiting, "waiting"}, {n.Leased, "leased"}, {n.Committed, "committed"},
		{n.Completed, "completed"}, {n.Failed, "failed"}, {n.Dead, "dead"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	return cmp.Or(strings.Join(parts, ", "), "none")
}

// printGraph prints a workflow's tasks, one line each, numbered: a
// dependency or parent among them by its number, one outside by its id.
func printGraph(out io.Writer, tasks []client.Task) error {
	num := make(map[string]int, len(tasks))
	for i, t := range tasks {
		num[t.ID] = i + 1
	}
	ref := func(id string) string {
		if n, ok := num[id]; ok {
			return fmt.Sprintf("#%d", n)
		}
		return id
	}
	w := table(out)
	fmt.Fprintln(w, "#\tTASK\tQUEUE\tSTATE\tATTEMPTS\tDEPENDS ON\tSPAWNED BY\tUPDATED")
	for i, t := range tasks {
		deps := make([]string, len(t.Dependencies))
		for j, d := range t.Dependencies {
			deps[j] = ref(d.TaskID)
		}
		if len(deps) > 0 && t.OnDependencyFailure == client.DependencyFailureRun {
			deps = append(deps, "(runs anyway)")
		}
		parent := "-"
		if t.SpawnedBy != "" {
			parent = ref(t.SpawnedBy)
		}
		fmt.Fprintf(w, "#%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", i+1, t.ID, t.Queue, t.State, t.AttemptsUsed, t.RetryPolicy.MaxAttempts,
			cmp.Or(strings.Join(deps, " "), "-"), parent, fmtTime(t.UpdatedAt))
	}
	return w.Flush()
}

// workflowListCmd is `tenure workflow list`.
type workflowListCmd struct {
	client    clientFlags
	namespace string
}

func (*workflowListCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "list [flags]",
		Short: "list the workflows: state and tasks by state",
		Long: `List the workflows whose tasks the server keeps, ordered by namespace and
id, one line each: its state, its tasks in all and by state, when it was
submitted and when a task of it last changed. A workflow leaves with its
last task (retention purges finished tasks one by one). With --json it
prints the API's ListWorkflowsResponse (the answers of every page as one).`,
		Example: `  tenure workflow list
  tenure workflow list --namespace shop --json | jq '.workflows[] | select(.state == "WORKFLOW_STATE_FAILED")'`,
	}
}

func (c *workflowListCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.StringVar(&c.namespace, "namespace", "", "only the workflows of this namespace (default: all)")
}

func (c *workflowListCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	cl, err := c.client.connect()
	if err != nil {
		return err
	}
	wfs, err := client.Collect(cl.ListWorkflows(c.client.capture(ctx), client.ListWorkflowsRequest{Namespace: c.namespace}))
	if err != nil {
		return err
	}
	if c.client.json {
		return printJSON(a.stdout, workflowPagesOf(c.client.answers.all()))
	}
	if len(wfs) == 0 {
		fmt.Fprintln(a.stderr, "no workflows")
		return nil
	}
	w := table(a.stdout)
	fmt.Fprintln(w, "NAMESPACE\tWORKFLOW\tSTATE\tTASKS\tBY STATE\tCREATED\tUPDATED")
	for _, wf := range wfs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", wf.Namespace, wf.ID, wf.State, wf.Total, countsText(wf.Tasks),
			fmtTime(wf.CreatedAt), fmtTime(wf.UpdatedAt))
	}
	return w.Flush()
}

// workflowPagesOf is the answers of a listing's ListWorkflows calls as
// one.
func workflowPagesOf(pages []proto.Message) *tenurev1.ListWorkflowsResponse {
	out := &tenurev1.ListWorkflowsResponse{}
	for _, m := range pages {
		out.Workflows = append(out.Workflows, m.(*tenurev1.ListWorkflowsResponse).GetWorkflows()...)
	}
	return out
}

// workflowControlCmd is `tenure workflow cancel` (cancel set) and
// `tenure workflow retry`.
type workflowControlCmd struct {
	cancel  bool
	control controlFlags
	ns      namespaceFlag
}

func (c *workflowControlCmd) spec() *cobra.Command {
	if c.cancel {
		return &cobra.Command{
			Use:   "cancel [flags] WORKFLOW_ID",
			Args:  oneArg("workflow id"),
			Short: "cancel a workflow: every task of it that has not ended ends DEAD",
			Long: `Cancel a workflow: every task of it that has not ended ends DEAD, with the
failure reason "workflow cancelled: <reason>", in one WAL record; a lease
held loses its authority at once (the worker's heartbeat, commit or
completion is refused), so no task of it runs again. Tasks outside the
workflow that depend on its tasks end by their own policy. The workflow
shows CANCELLED until ` + "`tenure workflow retry`" + `. It prints how many tasks it
ended; with --json the API's CancelWorkflowResponse.`,
			Example: `  tenure workflow cancel order-1234 --reason 'customer cancelled'`,
		}
	}
	return &cobra.Command{
		Use:   "retry [flags] WORKFLOW_ID",
		Args:  oneArg("workflow id"),
		Short: "run a failed or cancelled workflow again from its failed steps",
		Long: `Run a failed or cancelled workflow again from its failed steps: every
FAILED or DEAD task of it is retried (fresh attempts, as ` + "`tenure task retry`" + `),
dependencies first, in one WAL record; a task whose dependencies have not
all completed waits BLOCKED for them again. Tasks that completed do not run
again, and a task that committed before it was killed is left as it is (its
effect may have been applied), with the tasks that need it. It is an error
when no task of the workflow can be retried. It prints how many tasks it
retried; with --json the API's RetryWorkflowResponse.`,
		Example: `  tenure workflow retry order-1234 --reason 'payment provider back'`,
	}
}

func (c *workflowControlCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, "")
	c.ns.add(fs, "workflow")
}

func (c *workflowControlCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	id := args[0]
	req := client.WorkflowControlRequest{Namespace: c.ns.namespace, WorkflowID: id, Reason: c.control.reason}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.WorkflowControlResult, error) {
		if c.cancel {
			return cl.CancelWorkflow(ctx, req)
		}
		return cl.RetryWorkflow(ctx, req)
	}, func(res client.WorkflowControlResult) error {
		verb := "retried"
		if c.cancel {
			verb = "cancelled"
		}
		wf := &res.Workflow
		fmt.Fprintf(a.stdout, "workflow %s/%s %s: %d tasks; now %s, %s\n", wf.Namespace, wf.ID, verb, res.Tasks, wf.State, countsText(wf.Tasks))
		return nil
	})
}
