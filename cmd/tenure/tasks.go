package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/clock"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func init() {
	register(command{name: "submit", summary: "submit a task (payload from an argument, --file or stdin)", run: runSubmit})
	register(command{name: "task get", summary: "show a task and its executions", run: runTaskGet})
	register(command{name: "task history", summary: "show every record that touched a task", run: runTaskHistory})
	register(command{name: "task kill", summary: "kill a task (DEAD, no further attempts)", run: runTaskKill})
	register(command{name: "tasks list", summary: "list tasks, filtered by namespace, queue and state", run: runTasksList})
}

// clientFlags are the flags every client command shares.
type clientFlags struct {
	addr *string
	json *bool
}

func addClientFlags(fs *flag.FlagSet) clientFlags {
	return clientFlags{
		addr: fs.String("addr", envOr("TENURE_ADDR", "http://127.0.0.1:7070"), "server address (env TENURE_ADDR)"),
		json: fs.Bool("json", false, "print JSON (for scripts) instead of text"),
	}
}

func (f clientFlags) client() (*client.Client, error) {
	addr := *f.addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return client.New(addr, client.Options{})
}

// printJSON prints a message as indented protojson.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// oneArg parses flags and returns the single positional argument.
func oneArg(fs *flag.FlagSet, args []string, what string) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", usageError{fmt.Sprintf("expected one %s, got %d arguments", what, fs.NArg())}
	}
	return fs.Arg(0), nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("submit", "--queue Q [flags] [PAYLOAD | -]", stderr)
	cf := addClientFlags(fs)
	ns := fs.String("namespace", "default", "namespace of the task")
	queue := fs.String("queue", "", "queue of the task (required)")
	file := fs.String("file", "", "read the payload from this file")
	requestID := fs.String("request-id", "", "idempotency key: a second submit with the same id returns the first task")
	window := fs.Duration("window", 0, "execution window: how long each lease lasts without a heartbeat, 100ms..24h (default 30s)")
	attempts := fs.Uint("max-attempts", 0, "attempts before the task fails for good, 1..1000 (default 3)")
	delay := fs.Duration("delay", 0, "do not run before this much time from now")
	priority := fs.Int("priority", 0, "higher runs first within the queue")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *queue == "" {
		return usageError{"--queue is required"}
	}
	if *delay < 0 {
		return usageError{"--delay must not be negative"}
	}
	if *attempts > 1<<31 {
		return usageError{"--max-attempts is too large"}
	}
	// The API takes zero as "unset"; an explicit zero must not quietly
	// become the default.
	if flagSet(fs, "max-attempts") && *attempts == 0 {
		return usageError{"--max-attempts 0 is outside 1..1000; omit the flag for the server's default of 3 attempts"}
	}
	if flagSet(fs, "window") && *window == 0 {
		return usageError{"--window 0 is outside 100ms..24h; omit the flag for the server's default of 30s"}
	}
	payload, err := readPayload(fs.Args(), *file)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	req := client.SubmitRequest{
		Namespace: *ns, Queue: *queue, Payload: payload, RequestID: *requestID,
		ExecutionWindow: *window, Priority: int32(*priority),
	}
	if *attempts > 0 {
		req.Retry = &client.RetryPolicy{MaxAttempts: uint32(*attempts)}
	}
	if *delay > 0 {
		req.NotBefore = clock.Real.Now().Add(*delay)
	}
	res, err := c.Submit(ctx, req)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, submitJSON{Task: taskToJSON(res.Task), Duplicate: res.Duplicate})
	}
	if res.Duplicate {
		fmt.Fprintf(stdout, "%s (duplicate: request id %q was submitted before; nothing new was created)\n", res.TaskID, *requestID)
		return nil
	}
	fmt.Fprintln(stdout, res.TaskID)
	return nil
}

// readPayload takes the payload from the one argument ("-" for stdin), a
// file, or stdin when it is not a terminal; no payload is an empty one.
func readPayload(args []string, file string) ([]byte, error) {
	switch {
	case len(args) > 1:
		return nil, usageError{fmt.Sprintf("expected at most one payload argument, got %d (quote a payload with spaces)", len(args))}
	case len(args) == 1 && file != "":
		return nil, usageError{"give the payload as an argument or with --file, not both"}
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the payload: %w", err)
		}
		return b, nil
	case len(args) == 1 && args[0] != "-":
		return []byte(args[0]), nil
	case len(args) == 1 || !isTerminal(os.Stdin):
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("reading the payload from stdin: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func runTaskGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("task get", "[flags] TASK_ID", stderr)
	cf := addClientFlags(fs)
	id, err := oneArg(fs, args, "task id")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	t, err := c.GetTask(ctx, id)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, taskToJSON(t))
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("task", t.ID)
	row("queue", t.Namespace+"/"+t.Queue)
	row("state", t.State.String())
	row("attempt", fmt.Sprintf("%d of %d", t.Attempt, t.RetryPolicy.MaxAttempts))
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
	if t.LeaseID != "" {
		row("lease", fmt.Sprintf("%s by %s until %s", t.LeaseID, t.WorkerID, fmtTime(t.LeaseExpiry)))
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
		fmt.Fprintln(stdout, "\nexecutions:")
		w = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ATTEMPT\tSTATUS\tWORKER\tLEASE\tLEASED\tFINISHED\tREASON")
		for _, e := range t.Executions {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Attempt, e.Status,
				e.WorkerID, e.LeaseID, fmtTime(e.LeasedAt), fmtTime(e.FinishedAt), e.Reason)
		}
		w.Flush()
	}
	return nil
}

func runTaskHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("task history", "[flags] TASK_ID", stderr)
	cf := addClientFlags(fs)
	id, err := oneArg(fs, args, "task id")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	entries, err := c.GetTaskHistory(ctx, id)
	if err != nil {
		return err
	}
	if *cf.json {
		return writeJSON(stdout, historyToJSON(entries))
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LSN\tTIME\tRECORD\tATTEMPT\tLEASE\tDETAIL")
	for _, e := range entries {
		attempt := ""
		if e.Attempt > 0 {
			attempt = fmt.Sprint(e.Attempt)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", e.LSN, fmtTime(e.At), e.Type, attempt, e.LeaseID, e.Detail)
	}
	return w.Flush()
}

func runTaskKill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("task kill", "[flags] TASK_ID", stderr)
	cf := addClientFlags(fs)
	reason := fs.String("reason", "killed from the command line", "why (kept on the task)")
	id, err := oneArg(fs, args, "task id")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if err := c.KillTask(ctx, id, *reason); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s is DEAD\n", id)
	return nil
}

func runTasksList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tasks list", "[flags]", stderr)
	cf := addClientFlags(fs)
	ns := fs.String("namespace", "", "only this namespace (default: all)")
	queue := fs.String("queue", "", "only this queue (default: all)")
	stateFlag := fs.String("state", "", "only this state: waiting, leased, committed, completed, failed or dead")
	limit := fs.Int("limit", 100, "most tasks to show (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *limit < 0 {
		return usageError{"--limit must not be negative"}
	}
	st, ok := parseState(*stateFlag)
	if !ok {
		return usageError{fmt.Sprintf("--state %q: use waiting, leased, committed, completed, failed or dead", *stateFlag)}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var tasks []client.Task
	token := ""
	for {
		size := 1000
		if *limit > 0 {
			size = min(size, *limit-len(tasks))
		}
		page, next, err := c.ListTasks(ctx, client.ListTasksRequest{Namespace: *ns, Queue: *queue, State: st, PageSize: size, PageToken: token})
		if err != nil {
			return err
		}
		tasks = append(tasks, page...)
		if next == "" || (*limit > 0 && len(tasks) >= *limit) {
			break
		}
		token = next
	}
	if *cf.json {
		var out taskListJSON
		for i := range tasks {
			out.Tasks = append(out.Tasks, taskToJSON(&tasks[i]))
		}
		return writeJSON(stdout, out)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TASK\tNAMESPACE\tQUEUE\tSTATE\tATTEMPT\tCREATED\tPAYLOAD")
	for _, t := range tasks {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.ID, t.Namespace, t.Queue, t.State,
			t.Attempt, fmtTime(t.CreatedAt), preview(t.Payload))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(tasks) == 0 {
		fmt.Fprintln(stderr, "no tasks match")
	}
	return nil
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

func fmtTime(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
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
