package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// clientFlags are the flags every client command shares, and the API's
// answers that --json prints (answers.go).
type clientFlags struct {
	addr    string
	json    bool
	token   string
	tls     tlsClientFlags
	answers answers
}

// add adds the flags of a command that prints the API's answer: the
// connection's and --json.
func (f *clientFlags) add(fs *pflag.FlagSet) {
	f.addConnection(fs)
	fs.BoolVar(&f.json, "json", false, "print the API's answer as JSON (for scripts; as curl shows it) instead of text")
}

// addConnection adds the flags of the connection to the server: its
// address, the token and TLS.
func (f *clientFlags) addConnection(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", envOr("TENURE_ADDR", "http://127.0.0.1:7070"), "server address: http://host:port, or https://host:port for a server with TLS (env TENURE_ADDR)")
	// Not envOr: help would print the token as the flag's default.
	fs.StringVar(&f.token, "token", "", "bearer token, for a server started with --auth-file (default: env TENURE_TOKEN, which keeps it out of the process list)")
	f.tls.add(fs)
}

// capture returns ctx for the calls whose answers --json prints.
func (f *clientFlags) capture(ctx context.Context) context.Context { return f.answers.capture(ctx) }

// url is the server's address with a scheme: https if a TLS flag is given.
func (f *clientFlags) url() string {
	if !strings.Contains(f.addr, "://") {
		if f.tls.on() {
			return "https://" + f.addr
		}
		return "http://" + f.addr
	}
	return f.addr
}

// options are the client's options of the flags: TLS and the token.
// With --json they keep the API's answers (keepAnswers).
func (f *clientFlags) options() (client.Options, error) {
	cfg, err := f.tls.config()
	opts := client.Options{TLSConfig: cfg, Token: cmp.Or(f.token, os.Getenv("TENURE_TOKEN"))}
	if f.json {
		opts.Interceptors = []client.Interceptor{keepAnswers}
	}
	return opts, err
}

func (f *clientFlags) connect() (*client.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	return client.New(f.url(), opts)
}

// namespaceFlag is the --namespace of the commands about one queue or
// workflow: "default" unless given.
type namespaceFlag struct{ namespace string }

// add defines --namespace, the namespace of the thing of says.
func (f *namespaceFlag) add(fs *pflag.FlagSet, of string) {
	fs.StringVar(&f.namespace, "namespace", "default", "namespace of the "+of)
}

// controlFlags are the flags of the commands that change something on an
// operator's behalf: the client's, why, and who asks. Why and who are kept
// in the records the action writes (the task's history, the queue's
// pause).
type controlFlags struct {
	client      clientFlags
	reason      string
	requestedBy string
}

func (f *controlFlags) add(fs *pflag.FlagSet, defaultReason string) {
	f.addWho(fs)
	fs.StringVar(&f.reason, "reason", defaultReason, "why, kept in the record")
}

// addWho adds the client's flags and --requested-by, without --reason:
// for a command whose record keeps no reason.
func (f *controlFlags) addWho(fs *pflag.FlagSet) {
	f.client.add(fs)
	fs.StringVar(&f.requestedBy, "requested-by", "", "who asks, kept in the record (default: $USER@hostname); self-declared: a server without --auth-file takes it as given; one with it records the token's name instead")
}

// connect returns a client whose operator's actions say by() asked.
func (f *controlFlags) connect() (*client.Client, error) {
	opts, err := f.client.options()
	if err != nil {
		return nil, err
	}
	opts.RequestedBy = f.by()
	return client.New(f.client.url(), opts)
}

// by is who asks: --requested-by, or $USER@hostname.
func (f *controlFlags) by() string {
	if f.requestedBy != "" {
		return f.requestedBy
	}
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return cmp.Or(name, "unknown-user") + "@" + host
}

// submitCmd is `tenure submit`.
type submitCmd struct {
	client    clientFlags
	namespace string
	queue     string
	kind      string
	key       string
	file      string
	requestID string
	window    time.Duration
	attempts  uint
	delay     time.Duration
	priority  int
	deadline  string
	timeout   time.Duration
	dependsOn []string
	onFailure string
	wait      bool
	waitFor   time.Duration
}

func (*submitCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use: "submit --queue Q [flags] [PAYLOAD | -]",
		// readPayload checks the argument, after the flags.
		Args:  cobra.ArbitraryArgs,
		Short: "submit a task (payload from an argument, --file or stdin)",
		Long: `Submit a task and print its id. The payload is the one argument, the file
given with --file, or stdin ("-", or when stdin is not a terminal); with
none it is empty.

With --depends-on the task is BLOCKED until every task named has
completed (docs/guides/workflows.md). With --wait it waits until the task
has ended and prints its result instead (its id goes to stderr): exit 0
when it completed, 1 when it failed or is dead.`,
		Example: `  tenure submit --queue emails 'hello alice'
  echo '{"to":"bob"}' | tenure submit --queue emails --request-id order-42 -
  tenure submit --queue reports --deadline 2026-07-01T09:00:00Z 'q2 report'
  tenure submit --queue thumbnails --timeout 5m photo-42.jpg
  tenure submit --queue notify --depends-on "$resize_id" --wait 'all done?'
  tenure submit --queue payments --key customer-42 '{"charge":1200}'`,
	}
}

func (c *submitCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.StringVar(&c.namespace, "namespace", "default", "namespace of the task")
	fs.StringVar(&c.queue, "queue", "", "queue of the task (required)")
	fs.StringVar(&c.kind, "kind", "", "what kind of work the task is, for a worker to route it by (a typed task's Kind(), e.g. send_email)")
	fs.StringVar(&c.key, "key", "", "the task's key, such as a customer id: the queue's key limits hold each key's tasks (tenure queue limit --key-max-concurrency, --key-rate, --key-ordered, --fair)")
	fs.StringVar(&c.file, "file", "", "read the payload from this file")
	fs.StringVar(&c.requestID, "request-id", "", "idempotency key: a second submit with the same id returns the first task")
	fs.DurationVar(&c.window, "window", 0, "execution window: how long each lease lasts without a heartbeat, 100ms..24h (default 30s)")
	fs.UintVar(&c.attempts, "max-attempts", 0, "attempts before the task fails for good, 1..1000 (default 3)")
	fs.DurationVar(&c.delay, "delay", 0, "do not run before this much time from now")
	fs.IntVar(&c.priority, "priority", 0, "higher runs first within the queue")
	fs.StringVar(&c.deadline, "deadline", "", "fail the task (deadline_exceeded) unless committed by this time, RFC 3339 (2026-07-01T09:00:00Z); no lease outlives it")
	fs.DurationVar(&c.timeout, "timeout", 0, "as --deadline, this much time after the submit")
	fs.StringArrayVar(&c.dependsOn, "depends-on", nil, "a task this one depends on (repeat the flag for several): it is BLOCKED until all of them completed")
	fs.StringVar(&c.onFailure, "on-dependency-failure", "dead", "what a dependency that fails does to the task: dead (it ends DEAD, dependency_failed) or run (it runs anyway)")
	fs.BoolVar(&c.wait, "wait", false, "wait until the task has ended and print its result (exit 1 if it failed or is dead)")
	fs.DurationVar(&c.waitFor, "wait-timeout", 0, "with --wait, give up after this long (exit 1; default: wait as long as it takes)")
}

func (*submitCmd) choices() map[string][]string {
	return map[string][]string{"on-dependency-failure": {"dead", "run"}}
}

func (c *submitCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, args []string) error {
	if c.queue == "" {
		return usageError{"--queue is required"}
	}
	onFailure, ok := map[string]client.DependencyFailure{"dead": client.DependencyFailureDead, "run": client.DependencyFailureRun}[c.onFailure]
	switch {
	case !ok:
		return usageError{fmt.Sprintf("--on-dependency-failure %q is not dead or run", c.onFailure)}
	case fs.Changed("wait-timeout") && (!c.wait || c.waitFor <= 0):
		return usageError{"--wait-timeout needs --wait and a positive duration"}
	case c.wait && c.client.json:
		return usageError{"--wait prints the task's result, not the API's answers: leave out --json (tenure task get --json shows the task)"}
	}
	if c.delay < 0 {
		return usageError{"--delay must not be negative"}
	}
	if c.attempts > 1<<31 {
		return usageError{"--max-attempts is too large"}
	}
	// The API takes zero as "unset"; an explicit zero must not quietly
	// become the default.
	if fs.Changed("max-attempts") && c.attempts == 0 {
		return usageError{"--max-attempts 0 is outside 1..1000; omit the flag for the server's default of 3 attempts"}
	}
	if fs.Changed("window") && c.window == 0 {
		return usageError{"--window 0 is outside 100ms..24h; omit the flag for the server's default of 30s"}
	}
	var deadline time.Time
	if c.deadline != "" {
		var err error
		if deadline, err = time.Parse(time.RFC3339Nano, c.deadline); err != nil {
			return usageError{fmt.Sprintf("--deadline %q is not an RFC 3339 time, such as 2026-07-01T09:00:00Z", c.deadline)}
		}
	}
	switch {
	case fs.Changed("timeout") && c.timeout <= 0:
		return usageError{fmt.Sprintf("--timeout %v is not positive; omit the flag for no deadline", c.timeout)}
	case c.deadline != "" && fs.Changed("timeout"):
		return usageError{"--deadline and --timeout exclude each other: give one"}
	}
	payload, err := readPayload(a, args, c.file)
	if err != nil {
		return err
	}
	req := client.SubmitRequest{
		Namespace: c.namespace, Queue: c.queue, Kind: c.kind, Payload: payload, RequestID: c.requestID,
		ExecutionWindow: c.window, Priority: int32(c.priority), Deadline: deadline, Timeout: c.timeout,
		DependsOn: c.dependsOn, OnDependencyFailure: onFailure, Key: c.key,
	}
	if c.attempts > 0 {
		req.Retry = &client.RetryPolicy{MaxAttempts: uint32(c.attempts)}
	}
	if c.delay > 0 {
		req.NotBefore = a.clock.Now().Add(c.delay)
	}
	if c.wait {
		return c.submitAndWait(ctx, a, req)
	}
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) (client.SubmitResult, error) {
		return cl.Submit(ctx, req)
	}, func(res client.SubmitResult) error {
		if res.Duplicate {
			fmt.Fprintf(a.stdout, "%s (duplicate: request id %q was submitted before; nothing new was created)\n", res.TaskID, c.requestID)
		} else {
			fmt.Fprintln(a.stdout, res.TaskID)
		}
		return nil
	})
}

// submitAndWait submits req, waits until its task has ended and prints its
// result (its id to stderr): an error, exit 1, when it did not complete.
func (c *submitCmd) submitAndWait(ctx context.Context, a *app, req client.SubmitRequest) error {
	cl, err := c.client.connect()
	if err != nil {
		return err
	}
	res, err := cl.Submit(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "submitted %s; waiting until it has ended\n", res.TaskID)
	if c.waitFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.waitFor)
		defer cancel()
	}
	t, err := cl.Wait(ctx, res.TaskID)
	switch {
	case err != nil && t != nil:
		return fmt.Errorf("task %s is still %s after --wait-timeout %v: %w", res.TaskID, t.State, c.waitFor, err)
	case err != nil:
		return err
	case t.State != client.TaskStateCompleted:
		return fmt.Errorf("task %s ended %s: %s", t.ID, t.State, t.FailureReason)
	}
	_, err = a.stdout.Write(t.Result)
	return err
}

// readPayload takes the payload from the one argument ("-" for stdin), a
// file, or stdin when it is not a terminal; no payload is an empty one.
func readPayload(a *app, args []string, file string) ([]byte, error) {
	switch {
	case len(args) > 1:
		return nil, usageError{fmt.Sprintf("expected at most one payload argument, got %d (quote a payload with spaces)", len(args))}
	case len(args) == 1 && file != "":
		return nil, usageError{"give the payload as an argument or with --file, not both"}
	case file != "":
		return payloadFile(file)
	case len(args) == 1 && args[0] != "-":
		return []byte(args[0]), nil
	case len(args) == 1 || !a.interactive:
		return a.stdinPayload()
	}
	return nil, nil
}

// payloadFile reads a payload from a file.
func payloadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the payload: %w", err)
	}
	return b, nil
}

// stdinPayload reads a payload from stdin, up to 64 MiB.
func (a *app) stdinPayload() ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(a.stdin, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the payload from stdin: %w", err)
	}
	return b, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// taskGetCmd is `tenure task get`.
type taskGetCmd struct{ client clientFlags }

func (*taskGetCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "get [flags] TASK_ID", Args: oneArg("task id"), Short: "show a task and its executions"}
}

func (c *taskGetCmd) define(fs *pflag.FlagSet) { c.client.add(fs) }

func (c *taskGetCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	id := args[0]
	var cl *client.Client
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, got *client.Client) (*client.Task, error) {
		cl = got
		return cl.GetTask(ctx, client.GetTaskRequest{TaskID: id})
	}, func(t *client.Task) error { return printTask(ctx, a.stdout, cl, t) })
}

// printTask prints a task as `tenure task get` shows it, asking cl for
// its history when an attempt of it was aborted (to say how it ended).
func printTask(ctx context.Context, out io.Writer, cl *client.Client, t *client.Task) error {
	w, row := fieldTable(out)
	row("task", t.ID)
	row("queue", t.Namespace+"/"+t.Queue)
	if t.Kind != "" {
		row("kind", t.Kind)
	}
	if t.Key != "" {
		row("key", t.Key)
	}
	row("state", t.State.String())
	if t.WorkflowID != "" {
		row("workflow", t.WorkflowID)
	}
	if t.SpawnedBy != "" {
		row("spawned by", t.SpawnedBy)
	}
	if len(t.Dependencies) > 0 {
		deps := make([]string, len(t.Dependencies))
		for i, d := range t.Dependencies {
			deps[i] = d.TaskID + " " + d.State.String()
		}
		policy := "dead"
		if t.OnDependencyFailure == client.DependencyFailureRun {
			policy = "run"
		}
		row("depends on", strings.Join(deps, ", ")+" (if one fails: "+policy+")")
	}
	row("attempt", attemptText(t))
	row("priority", fmt.Sprint(t.Priority))
	if t.RequestID != "" {
		row("request id", t.RequestID)
	}
	row("window", t.ExecutionWindow.String())
	row("created", fmtTime(t.CreatedAt))
	row("updated", fmtTime(t.UpdatedAt))
	if !t.NotBefore.IsZero() {
		row("not before", fmtTime(t.NotBefore))
	}
	if !t.Deadline.IsZero() {
		row("deadline", fmtTime(t.Deadline))
	}
	if t.LeaseID != "" {
		row("lease", fmt.Sprintf("%s by %s until %s", t.LeaseID, t.WorkerID, fmtTime(t.LeaseExpiry)))
	}
	if p := t.Progress; p != nil {
		row("progress", fmt.Sprintf("%s (reported %s)", p, fmtTime(p.ReportedAt)))
	}
	if tc := t.TraceContext; tc.Traceparent != "" {
		row("traceparent", tc.Traceparent)
		if tc.Tracestate != "" {
			row("tracestate", tc.Tracestate)
		}
	}
	row("payload", preview(t.Payload))
	if t.Result != nil {
		row("result", preview(t.Result))
	}
	if t.FailureReason != "" {
		row("failure", t.FailureReason)
	}
	w.Flush()
	if len(t.Executions) > 0 {
		var hist []client.HistoryEntry
		if slices.ContainsFunc(t.Executions, func(e client.Execution) bool { return e.Status == client.ExecutionStatusAborted }) {
			// How an aborted attempt ended is the record that ended it.
			var err error
			if hist, err = cl.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: t.ID}); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "\nexecutions:")
		w = table(out)
		fmt.Fprintln(w, "ATTEMPT\tENDED\tWORKER\tLEASE\tLEASED\tFINISHED\tREASON")
		for _, e := range t.Executions {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Attempt, attemptEnd(e, hist),
				e.WorkerID, e.LeaseID, fmtTime(e.LeasedAt), fmtTime(e.FinishedAt), e.Reason)
		}
		w.Flush()
	}
	return nil
}

// attemptEnd says how an attempt ended, in the words of the dashboard's
// timeline: completed; failed (its worker failed it), expired (its lease
// ran out), killed, deadline (the task's deadline passed), each read
// from the record of the task's history that ended it; snoozed;
// committed (to be finalised); running. The API calls the unsuccessful
// ones ABORTED.
func attemptEnd(e client.Execution, hist []client.HistoryEntry) string {
	switch e.Status {
	case client.ExecutionStatusDone:
		return "completed"
	case client.ExecutionStatusCommitted:
		return "committed"
	case client.ExecutionStatusSnoozed:
		return "snoozed"
	case client.ExecutionStatusLeased, client.ExecutionStatusInProgress:
		return "running"
	case client.ExecutionStatusAborted:
		for _, h := range hist {
			switch {
			case h.Type == "LeaseExpired" && h.LeaseID == e.LeaseID:
				return "expired"
			case h.Type == "TaskFailed" && h.LeaseID == e.LeaseID:
				return "failed"
			// A kill and a deadline name no lease: they end the attempt
			// that runs at their time.
			case h.Type == "TaskDead" && h.At.Equal(e.FinishedAt):
				return "killed"
			case h.Type == "TaskDeadlineExceeded" && h.At.Equal(e.FinishedAt):
				return "deadline"
			}
		}
		return "aborted"
	}
	return strings.ToLower(e.Status.String())
}

// attemptText is a task's attempts as its retry policy counts them: those
// used of its budget, "of" the policy's maximum; for a task an operator
// retried, also every attempt of its life, which the executions and the
// history number.
func attemptText(t *client.Task) string {
	s := fmt.Sprintf("%d of %d", t.AttemptsUsed, t.RetryPolicy.MaxAttempts)
	if t.Attempt != t.AttemptsUsed {
		s += fmt.Sprintf(" since an operator's retry (%d in all)", t.Attempt)
	}
	return s
}

// taskHistoryCmd is `tenure task history`.
type taskHistoryCmd struct{ client clientFlags }

func (*taskHistoryCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "history [flags] TASK_ID", Args: oneArg("task id"), Short: "show every record that touched a task"}
}

func (c *taskHistoryCmd) define(fs *pflag.FlagSet) { c.client.add(fs) }

func (c *taskHistoryCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	id := args[0]
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) ([]client.HistoryEntry, error) {
		return cl.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: id})
	}, func(entries []client.HistoryEntry) error {
		w := table(a.stdout)
		fmt.Fprintln(w, "LSN\tTIME\tRECORD\tATTEMPT\tLEASE\tBY\tDETAIL")
		for _, e := range entries {
			attempt := ""
			if e.Attempt > 0 {
				attempt = fmt.Sprint(e.Attempt)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.LSN, fmtTime(e.At), e.Type, attempt, e.LeaseID, e.RequestedBy, e.Detail)
		}
		return w.Flush()
	})
}

// taskControlCmd is `tenure task kill` (kill set) and `tenure task
// retry`.
type taskControlCmd struct {
	kill    bool
	control controlFlags
}

func (c *taskControlCmd) spec() *cobra.Command {
	if c.kill {
		return &cobra.Command{
			Use:   "kill [flags] TASK_ID",
			Args:  oneArg("task id"),
			Short: "kill a task (DEAD, no further attempts)",
			Long: `Kill a task that is not finished: it becomes DEAD with --reason as its
failure reason, and a worker holding its lease loses it at once. A task
already COMPLETED, FAILED or DEAD is refused. Its history keeps who asked
(--requested-by) and why.`,
			Example: `  tenure task kill 01JH8ZQ5T0W9Q3V6M2X4C7B1NA --reason 'bad payload'`,
		}
	}
	return &cobra.Command{
		Use:   "retry [flags] TASK_ID",
		Args:  oneArg("task id"),
		Short: "retry a FAILED or DEAD task (WAITING again, with fresh attempts)",
		Long: `Return a FAILED or DEAD task to WAITING, due at once, with a fresh budget of
attempts, and print its id and new state. Its earlier executions stay in
its history, with who asked (--requested-by) and why (--reason).

Refused for a COMPLETED task (submit a new one to run it again), a task not
finished, and a task an attempt committed before it was killed (its effect
may have been applied: a retry could apply it twice).

With --json it prints the API's RetryTaskResponse: the task, as "task".`,
		Example: `  tenure task retry 01JH8ZQ5T0W9Q3V6M2X4C7B1NA --reason 'downstream fixed'`,
	}
}

func (c *taskControlCmd) define(fs *pflag.FlagSet) {
	reason := ""
	if c.kill {
		reason = "killed from the command line"
	}
	c.control.add(fs, reason)
}

// run asks for the action on the task and prints the task's new state.
func (c *taskControlCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	id := args[0]
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (*client.Task, error) {
		if c.kill {
			return cl.KillTask(ctx, client.KillTaskRequest{TaskID: id, Reason: c.control.reason})
		}
		return cl.RetryTask(ctx, client.RetryTaskRequest{TaskID: id, Reason: c.control.reason})
	}, func(t *client.Task) error {
		fmt.Fprintf(a.stdout, "%s is %s\n", t.ID, t.State)
		return nil
	})
}

// tasksListCmd is `tenure tasks list`.
type tasksListCmd struct {
	client    clientFlags
	namespace string
	queue     string
	state     string
	limit     int
	pageToken string
	all       bool
}

// maxListPage is the most tasks one ListTasks call asks for: the server's
// default limit on a page.
const maxListPage = 1000

func (*tasksListCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "list [flags]",
		Short: "list tasks, filtered by namespace, queue and state",
		Long: `List tasks in creation order, at most --limit of them (default 100). When
more match, it says so on stderr with the command that lists the next page
(--page-token), or list them all with --all.

With --json it prints the API's ListTasksResponse: the answers of the
ListTasks calls that made the listing (page_size --limit, or less where
an answer stopped early), as one: their "tasks", and the last one's
"nextPageToken" when more may follow (pass it to --page-token). With --all
--json it holds every task, without a token.`,
		Example: `  tenure tasks list --queue emails --state failed
  tenure tasks list --all --json | jq -r '.tasks[].taskId'`,
	}
}

func (c *tasksListCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.StringVar(&c.namespace, "namespace", "", "only this namespace (default: all)")
	fs.StringVar(&c.queue, "queue", "", "only this queue (default: all)")
	fs.StringVar(&c.state, "state", "", "only this state: waiting, leased, committed, completed, failed or dead")
	fs.IntVar(&c.limit, "limit", 100, "most tasks to show (0: all)")
	fs.StringVar(&c.pageToken, "page-token", "", "start after the previous page: the token a listing printed")
	fs.BoolVar(&c.all, "all", false, "list every task, page after page, to the end")
}

func (*tasksListCmd) choices() map[string][]string {
	return map[string][]string{"state": {"waiting", "leased", "committed", "completed", "failed", "dead"}}
}

func (c *tasksListCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, _ []string) error {
	if c.limit < 0 {
		return usageError{"--limit must not be negative"}
	}
	if c.all && fs.Changed("limit") {
		return usageError{"--all lists every task; give --all or --limit, not both"}
	}
	st, ok := parseState(c.state)
	if !ok {
		return usageError{fmt.Sprintf("--state %q: use waiting, leased, committed, completed, failed or dead", c.state)}
	}
	cl, err := c.client.connect()
	if err != nil {
		return err
	}
	req := client.ListTasksRequest{Namespace: c.namespace, Queue: c.queue, State: st, PageToken: c.pageToken}
	unlimited := c.all || c.limit == 0
	var tasks []client.Task
	for {
		req.PageSize = maxListPage
		if !unlimited {
			req.PageSize = min(maxListPage, c.limit-len(tasks))
		}
		page, err := cl.ListTasksPage(c.client.capture(ctx), req)
		if err != nil {
			return err
		}
		tasks = append(tasks, page.Tasks...)
		// A page never holds more than asked for, so its next page token
		// continues right after the last task kept.
		req.PageToken = page.NextPageToken
		if req.PageToken == "" || (!unlimited && len(tasks) >= c.limit) {
			break
		}
	}
	next := req.PageToken
	if c.client.json {
		if err := printJSON(a.stdout, pagesOf(c.client.answers.all())); err != nil {
			return err
		}
	} else {
		w := table(a.stdout)
		fmt.Fprintln(w, "TASK\tNAMESPACE\tQUEUE\tKIND\tSTATE\tATTEMPTS\tCREATED\tPAYLOAD")
		for _, t := range tasks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", t.ID, t.Namespace, t.Queue, cmp.Or(t.Kind, "-"), t.State,
				t.AttemptsUsed, t.RetryPolicy.MaxAttempts, fmtTime(t.CreatedAt), preview(t.Payload))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(tasks) == 0 {
			fmt.Fprintln(a.stderr, "no tasks match")
		}
	}
	if next != "" {
		return c.hintNextPage(ctx, cl, fs, req, a.stderr)
	}
	return nil
}

// pagesOf is the answers of ListTasks calls, one page after the other, as
// one answer: their tasks in order, and the last one's next page token.
func pagesOf(pages []proto.Message) *tenurev1.ListTasksResponse {
	out := &tenurev1.ListTasksResponse{}
	for _, m := range pages {
		p := m.(*tenurev1.ListTasksResponse)
		out.Tasks = append(out.Tasks, p.GetTasks()...)
		out.NextPageToken = p.GetNextPageToken()
	}
	return out
}

// hintNextPage says on stderr that more tasks follow the page req.PageToken
// continues, with the command that lists them. A token says only that the
// server stopped early (a full page, the end of a partition): one look at
// the next task tells whether any matches.
func (c *tasksListCmd) hintNextPage(ctx context.Context, cl *client.Client, fs *pflag.FlagSet, req client.ListTasksRequest, stderr io.Writer) error {
	req.PageSize = 1
	peek, err := cl.ListTasksPage(ctx, req)
	if err != nil {
		return err
	}
	if len(peek.Tasks) == 0 && peek.NextPageToken == "" {
		return nil
	}
	more := "more tasks exist"
	if len(peek.Tasks) == 0 {
		more = "more tasks may exist"
	}
	cmdline := []string{"tenure tasks list"}
	fs.Visit(func(f *pflag.Flag) {
		switch {
		case f.Name == "page-token" || f.Name == "all":
		case f.Value.Type() == "bool" && f.Value.String() == "true":
			cmdline = append(cmdline, "--"+f.Name)
		case f.Value.Type() == "bool":
			cmdline = append(cmdline, "--"+f.Name+"="+f.Value.String())
		default:
			cmdline = append(cmdline, "--"+f.Name+" "+shellQuote(f.Value.String()))
		}
	})
	cmdline = append(cmdline, "--page-token "+shellQuote(req.PageToken))
	fmt.Fprintf(stderr, "%s: %s (or --all)\n", more, strings.Join(cmdline, " "))
	return nil
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell, if it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// parseState reads a --state flag: a state's name in any case, or "" for
// any state.
func parseState(name string) (client.TaskState, bool) {
	if name == "" {
		return client.TaskStateUnspecified, true
	}
	for s := client.TaskStateUnspecified; s <= client.TaskStateDead; s++ {
		if strings.EqualFold(name, s.String()) {
			return s, true
		}
	}
	return 0, false
}

// timeLayout is how the CLI writes a time for people: to the millisecond,
// with its zone's abbreviation (CET, UTC), or its offset where the zone
// has none (+03).
const timeLayout = "2006-01-02 15:04:05.000 MST"

// fmtTime writes t in the local zone (TZ), with the zone: "" for no time.
func fmtTime(t time.Time) string {
	return fmtTimeIn(t, time.Local)
}

// fmtTimeIn writes t in loc, with the zone: "" for no time.
func fmtTimeIn(t time.Time, loc *time.Location) string {
	if t.IsZero() || t.Unix() == 0 {
		return ""
	}
	return t.In(loc).Format(timeLayout)
}

// preview shows a payload or result on one line: text as text, binary as a
// byte count.
func preview(b []byte) string {
	const maxShown = 60
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return fmt.Sprintf("(%d bytes of binary)", len(b))
		}
	}
	s := string(b)
	if len(s) > maxShown {
		s = s[:maxShown] + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return fmt.Sprintf("%q", s)
}
