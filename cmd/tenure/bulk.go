package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/sdk/client"
)

// The bulk actions: `tenure tasks retry|kill|purge`.

// bulkAction is what one of `tenure tasks retry|kill|purge` does.
type bulkAction struct {
	name string // the command: "retry"
	verb string // in the prompt: "retry"
	done string // in the report: "retried"
	// applies names the tasks it applies to, in the singular: "FAILED or
	// DEAD task"; states are their states.
	applies string
	states  []client.TaskState
	// skipped says why the selected tasks it did not change were left:
	// "not finished" (after "3 selected tasks were").
	skipped       string
	defaultReason string
	call          func(*client.Client, context.Context, client.BulkRequest) (client.BulkResult, error)
	short, long   string
	example       string
}

var (
	bulkRetry = &bulkAction{
		name: "retry", verb: "retry", done: "retried",
		applies: "FAILED or DEAD task", states: []client.TaskState{client.TaskStateFailed, client.TaskStateDead},
		skipped: "not retryable (COMPLETED, not finished, or committed before they were killed)",
		call:    (*client.Client).RetryTasks,
		short:   "retry the FAILED and DEAD tasks a filter selects",
		long: `Retry every FAILED or DEAD task the filter selects, as ` + "`tenure task retry`" + ` would:
WAITING again, due at once, with fresh attempts. Tasks an attempt committed
before they were killed are left alone (a retry could apply their effect
twice), and counted as not retryable.`,
		example: `  tenure tasks retry --queue emails --state failed --yes
  tenure tasks retry --namespace billing --created-before 2h --reason 'gateway fixed'`,
	}
	bulkKill = &bulkAction{
		name: "kill", verb: "kill", done: "killed",
		applies: "unfinished task", states: []client.TaskState{client.TaskStateWaiting, client.TaskStateLeased, client.TaskStateCommitted},
		skipped:       "already finished",
		defaultReason: "killed from the command line",
		call:          (*client.Client).KillTasks,
		short:         "kill the unfinished tasks a filter selects",
		long: `Kill every unfinished task the filter selects, as ` + "`tenure task kill`" + ` would:
DEAD with --reason as its failure reason; a worker holding its lease loses
it at once. A COMMITTED task is killed too: its effect may have been
applied, and is not undone.`,
		example: `  tenure tasks kill --queue emails --state waiting --reason 'bad template'
  tenure tasks kill --queue emails --created-before 2025-06-01T00:00:00Z --yes`,
	}
	bulkPurge = &bulkAction{
		name: "purge", verb: "delete", done: "purged",
		applies: "finished task (COMPLETED, FAILED or DEAD)",
		states:  []client.TaskState{client.TaskStateCompleted, client.TaskStateFailed, client.TaskStateDead},
		skipped: "not finished, and left alone",
		call:    (*client.Client).PurgeTasks,
		short:   "delete the finished tasks a filter selects now",
		long: `Delete every finished (COMPLETED, FAILED or DEAD) task the filter selects
now rather than at the server's retention period: ` + "`tenure task get`" + ` then
answers not found for them, and their request ids may be used again.
Unfinished tasks are left alone.`,
		example: `  tenure tasks purge --queue emails --state completed --created-before 24h --yes`,
	}
)

// tasksBulkCmd is `tenure tasks retry`, `kill` or `purge`.
type tasksBulkCmd struct {
	action        *bulkAction
	control       controlFlags
	namespace     string
	queue         string
	state         string
	createdBefore string
	all           bool
	yes           bool
}

func (c *tasksBulkCmd) spec() *cobra.Command {
	a := c.action
	return &cobra.Command{
		Use:   a.name + " [flags]",
		Short: a.short,
		Long: a.long + `

Which tasks: every filter given must match. --namespace, --queue, --state
and --created-before select; with none of them the command is refused,
unless --all says: every ` + a.applies + ` of every queue (--all only alone).
--created-before takes an RFC 3339 time (2025-06-01T00:00:00Z) or a
duration ago (24h: created more than a day ago). Tasks created after the
command starts are not selected.

It asks first, saying what it will do, and reads y or yes from stdin;
anything else aborts with nothing changed. --yes skips the question; when
stdin is not a terminal (a script) --yes is required. It prints how many
tasks it changed, and how many it selected but left; with --json the API's
response. --requested-by and --reason are kept in each task's history.

If it fails part way, the tasks it changed stay changed: run it again to
continue.`,
		Example: a.example,
	}
}

func (c *tasksBulkCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, c.action.defaultReason)
	fs.StringVar(&c.namespace, "namespace", "", "only tasks of this namespace (default: all)")
	fs.StringVar(&c.queue, "queue", "", "only tasks of this queue (with --namespace, or in every namespace)")
	fs.StringVar(&c.state, "state", "", "only tasks in this state: "+strings.ToLower(stateList(c.action.states, ", ", " or ")))
	fs.StringVar(&c.createdBefore, "created-before", "", "only tasks created before this RFC 3339 time, or this long ago (24h)")
	fs.BoolVar(&c.all, "all", false, "every "+c.action.applies+" of every queue; only without the other filters")
	fs.BoolVar(&c.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
}

func (c *tasksBulkCmd) choices() map[string][]string {
	var states []string
	for _, s := range c.action.states {
		states = append(states, strings.ToLower(s.String()))
	}
	return map[string][]string{"state": states}
}

func (c *tasksBulkCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	act := c.action
	f, err := c.filter(a.clock.Now())
	if err != nil {
		return err
	}
	if err := confirm(a, c.yes, fmt.Sprintf("%s every %s", act.verb, describeFilter(act, f))); err != nil {
		return err
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.BulkResult, error) {
		return act.call(cl, ctx, client.BulkRequest{Filter: f, Reason: c.control.reason})
	}, func(res client.BulkResult) error {
		fmt.Fprintf(a.stdout, "%s %s", act.done, plural(res.Changed, "task"))
		if res.Skipped > 0 {
			were := "were"
			if res.Skipped == 1 {
				were = "was"
			}
			fmt.Fprintf(a.stdout, " (%s %s %s)", plural(res.Skipped, "selected task"), were, act.skipped)
		}
		fmt.Fprintln(a.stdout)
		return nil
	})
}

// confirm asks whether to do what (a sentence without its question mark)
// unless yes, and reads y or yes from stdin; anything else aborts with an
// error. Without a terminal no one can answer: --yes is required.
func confirm(a *app, yes bool, what string) error {
	if yes {
		return nil
	}
	if !a.interactive {
		return usageError{fmt.Sprintf("stdin is not a terminal, so no one can confirm: pass --yes to %s", what)}
	}
	fmt.Fprintf(a.stderr, "%s? [y/N] ", what)
	answer, err := bufio.NewReader(a.stdin).ReadString('\n')
	if answer = strings.ToLower(strings.TrimSpace(answer)); answer != "y" && answer != "yes" {
		if err != nil && answer == "" {
			fmt.Fprintln(a.stderr)
			return errors.New("aborted: nothing changed (no answer on stdin; pass --yes to skip the question)")
		}
		return errors.New("aborted: nothing changed")
	}
	return nil
}

// filter checks the filter flags and returns the filter they give; now is
// the time --created-before counts back from.
func (c *tasksBulkCmd) filter(now time.Time) (client.TaskFilter, error) {
	act := c.action
	f := client.TaskFilter{Namespace: c.namespace, Queue: c.queue, All: c.all}
	st, ok := parseState(c.state)
	if !ok {
		return f, usageError{fmt.Sprintf("--state %q: use %s", c.state, strings.ToLower(stateList(act.states, ", ", " or ")))}
	}
	if st != client.TaskStateUnspecified && !slices.Contains(act.states, st) {
		return f, usageError{fmt.Sprintf("--state %s: %s applies only to %s tasks; use one of those, or omit --state for all of them",
			c.state, act.name, stateList(act.states, ", ", " and "))}
	}
	f.State = st
	if c.createdBefore != "" {
		t, err := parseCreatedBefore(c.createdBefore, now)
		if err != nil {
			return f, err
		}
		f.CreatedBefore = t
	}
	filtered := f.Namespace != "" || f.Queue != "" || f.State != client.TaskStateUnspecified || !f.CreatedBefore.IsZero()
	switch {
	case f.All && filtered:
		return f, usageError{fmt.Sprintf("--all means every %s of every queue: give it alone, without --namespace, --queue, --state or --created-before (or drop --all to use those)", act.applies)}
	case !f.All && !filtered:
		return f, usageError{fmt.Sprintf("no filter given: select the tasks with --namespace, --queue, --state or --created-before, or pass --all to %s every %s", act.verb, act.applies)}
	}
	return f, nil
}

// parseCreatedBefore reads --created-before: an RFC 3339 time, or a
// duration before now.
func parseCreatedBefore(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError{fmt.Sprintf("--created-before %q: give an RFC 3339 time (2025-06-01T00:00:00Z) or a duration ago (24h, 90m)", s)}
}

// describeFilter says which tasks f selects for act, for the prompt:
// "unfinished task of queue default/emails created before …".
func describeFilter(act *bulkAction, f client.TaskFilter) string {
	s := act.applies
	if f.State != client.TaskStateUnspecified {
		s = f.State.String() + " task"
	}
	switch {
	case f.Namespace != "" && f.Queue != "":
		s += " of queue " + f.Namespace + "/" + f.Queue
	case f.Queue != "":
		s += " of the queues named " + f.Queue + " in every namespace"
	case f.Namespace != "":
		s += " of namespace " + f.Namespace
	default:
		s += " of every queue in every namespace"
	}
	if !f.CreatedBefore.IsZero() {
		s += " created before " + f.CreatedBefore.UTC().Format(time.RFC3339)
	}
	return s
}

// stateList names states: "WAITING, LEASED or COMMITTED" (sep ", ", last
// " or ").
func stateList(states []client.TaskState, sep, last string) string {
	var names []string
	for _, s := range states {
		names = append(names, s.String())
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], sep) + last + names[len(names)-1]
}

// plural is "1 task" or "n tasks".
func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
