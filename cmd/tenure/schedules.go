package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/sdk/client"
)

// The schedule commands: `tenure schedule
// create|list|get|update|pause|resume|delete|backfill`.

// scheduleArgs are the namespace and queue flags of the commands about one
// schedule (its name is their argument).
type scheduleArgs struct{ namespace, queue string }

func (s *scheduleArgs) add(fs *pflag.FlagSet) {
	fs.StringVar(&s.namespace, "namespace", "default", "namespace of the schedule")
	fs.StringVar(&s.queue, "queue", "", "queue of the schedule: the queue its tasks go to (required)")
}

// name returns the schedule's name, the one argument (the commands' Args
// is oneArg), once --queue is checked.
func (s *scheduleArgs) name(args []string) (string, error) {
	if s.queue == "" {
		return "", usageError{"--queue is required: a schedule is named within its queue"}
	}
	return args[0], nil
}

// overlapFlags are the values of --overlap.
var overlapFlags = map[string]client.OverlapPolicy{
	"skip":       client.OverlapSkip,
	"allow":      client.OverlapAllow,
	"buffer-one": client.OverlapBufferOne,
}

// scheduleDefFlags are the flags of a schedule's definition, shared by
// create and update.
type scheduleDefFlags struct {
	cron        string
	timeZone    string
	overlap     string
	catchUp     time.Duration
	payload     string
	payloadFile string
	window      time.Duration
	attempts    uint
	priority    int
	kind        string
}

func (f *scheduleDefFlags) add(fs *pflag.FlagSet, required string) {
	fs.StringVar(&f.cron, "cron", "", "when it fires"+required+`: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or @yearly, @monthly, @weekly, @daily, @hourly, "@every 90s"`)
	fs.StringVar(&f.timeZone, "time-zone", "", "IANA time zone the expression is read in, e.g. Europe/Berlin (default UTC)")
	fs.StringVar(&f.overlap, "overlap", "", "while the previous fire's task is not finished: skip the tick, allow it, or buffer-one (hold one tick until it finishes) (default skip)")
	fs.DurationVar(&f.catchUp, "catch-up", 0, "how late a tick may still fire after the server was down; older ticks are skipped, 1s..8784h (default 1h)")
	fs.StringVar(&f.payload, "payload", "", "payload of each task")
	fs.StringVar(&f.payloadFile, "payload-file", "", `read the payload of each task from this file ("-": stdin)`)
	fs.DurationVar(&f.window, "window", 0, "execution window of each task: how long each lease lasts without a heartbeat, 100ms..24h (default 30s)")
	fs.UintVar(&f.attempts, "max-attempts", 0, "attempts before a task fails for good, 1..1000 (default 3)")
	fs.IntVar(&f.priority, "priority", 0, "priority of each task: higher runs first within the queue")
	fs.StringVar(&f.kind, "kind", "", "kind of each task, for a worker to route it by (a typed task's Kind(), e.g. nightly_report)")
}

func (*scheduleDefFlags) choices() map[string][]string {
	return map[string][]string{"overlap": {"skip", "allow", "buffer-one"}}
}

// apply sets the fields of req that a flag given sets: create starts from
// an empty request (the server's defaults), update from the schedule as it
// is.
func (f *scheduleDefFlags) apply(a *app, fs *pflag.FlagSet, req *client.ScheduleRequest) error {
	// The API takes zero as "unset"; an explicit zero must not quietly
	// become the default.
	for _, z := range []struct {
		flag string
		zero bool
		want string
	}{
		{"max-attempts", f.attempts == 0, "1..1000"},
		{"window", f.window == 0, "100ms..24h"},
		{"catch-up", f.catchUp == 0, "1s..8784h"},
	} {
		if fs.Changed(z.flag) && z.zero {
			return usageError{fmt.Sprintf("--%s 0 is outside %s; omit the flag for the server's default", z.flag, z.want)}
		}
	}
	if f.attempts > 1<<31 {
		return usageError{"--max-attempts is too large"}
	}
	if fs.Changed("cron") {
		req.Cron = f.cron
	}
	if fs.Changed("time-zone") {
		req.TimeZone = f.timeZone
	}
	if fs.Changed("overlap") {
		o, ok := overlapFlags[strings.ToLower(f.overlap)]
		if !ok {
			return usageError{fmt.Sprintf("--overlap %q: use skip, allow or buffer-one", f.overlap)}
		}
		req.Overlap = o
	}
	if fs.Changed("catch-up") {
		req.CatchUpWindow = f.catchUp
	}
	switch {
	case fs.Changed("payload") && fs.Changed("payload-file"):
		return usageError{"give the payload with --payload or --payload-file, not both"}
	case fs.Changed("payload"):
		req.Payload = []byte(f.payload)
	case f.payloadFile != "":
		var err error
		if f.payloadFile == "-" {
			req.Payload, err = a.stdinPayload()
		} else {
			req.Payload, err = payloadFile(f.payloadFile)
		}
		if err != nil {
			return err
		}
	}
	if fs.Changed("window") {
		req.ExecutionWindow = f.window
	}
	if fs.Changed("max-attempts") {
		r := client.RetryPolicy{}
		if req.Retry != nil {
			r = *req.Retry
		}
		r.MaxAttempts = uint32(f.attempts)
		req.Retry = &r
	}
	if fs.Changed("priority") {
		req.Priority = int32(f.priority)
	}
	if fs.Changed("kind") {
		req.Kind = f.kind
	}
	return nil
}

// scheduleCreateCmd is `tenure schedule create`.
type scheduleCreateCmd struct {
	control  controlFlags
	schedule scheduleArgs
	def      scheduleDefFlags
}

func (*scheduleCreateCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME --queue Q --cron EXPR [flags]",
		Args:  oneArg("schedule name"),
		Short: "create a schedule: a task submitted to a queue at each tick of a cron expression",
		Long: `Create a schedule: at each tick of --cron (read in --time-zone) it submits a
task to --queue with the payload, window, attempts and priority given. Its
first tick is the first after now; the command prints the next fire times.

Each tick fires once and only once: its task's request id is derived from
the schedule and the tick ("schedule QUEUE/NAME <tick in Unix ns>").
--overlap says what a tick does while the previous task is not finished;
--catch-up how late a tick may still fire after the server was down (older
ones are recorded as skipped).

Creating it again with the same definition changes nothing; with another
definition it is refused (use ` + "`tenure schedule update`" + `). An expression that
does not parse or an unknown time zone is refused naming the field, and
nothing is created. With --json it prints the API's CreateScheduleResponse.`,
		Example: `  tenure schedule create nightly-report --queue reports --cron '0 2 * * *' --time-zone Europe/Berlin --payload '{"kind":"daily"}'
  tenure schedule create heartbeat --queue pings --cron '@every 30s' --overlap allow --catch-up 5m`,
	}
}

func (c *scheduleCreateCmd) define(fs *pflag.FlagSet) {
	c.control.addWho(fs)
	c.schedule.add(fs)
	c.def.add(fs, " (required)")
}

func (c *scheduleCreateCmd) choices() map[string][]string { return c.def.choices() }

func (c *scheduleCreateCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, args []string) error {
	name, err := c.schedule.name(args)
	if err != nil {
		return err
	}
	if c.def.cron == "" {
		return usageError{"--cron is required"}
	}
	req := client.ScheduleRequest{Namespace: c.schedule.namespace, Queue: c.schedule.queue, Name: name}
	if err := c.def.apply(a, fs, &req); err != nil {
		return err
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.CreateScheduleResult, error) {
		return cl.CreateSchedule(ctx, req)
	}, func(res client.CreateScheduleResult) error {
		sc := &res.Schedule
		if res.Created {
			fmt.Fprintf(a.stdout, "created schedule %s\n", schedulePath(sc))
		} else {
			fmt.Fprintf(a.stdout, "schedule %s exists already with this definition; nothing changed\n", schedulePath(sc))
		}
		printNextFires(a.stdout, sc)
		return nil
	})
}

// schedulePath is namespace/queue/name.
func schedulePath(sc *client.Schedule) string { return sc.Namespace + "/" + sc.Queue + "/" + sc.Name }

// printNextFires prints the next fire times, one a line: in the
// schedule's zone, the one its expression speaks, and in UTC beside it.
func printNextFires(out io.Writer, sc *client.Schedule) {
	if len(sc.NextFires) == 0 {
		fmt.Fprintln(out, "next fires: none (paused, or the expression never fires again)")
		return
	}
	loc := scheduleLoc(sc)
	cond := ""
	if sc.WaitingForTask != "" {
		cond = ", if task " + sc.WaitingForTask + " has finished by then"
	}
	if loc == time.UTC {
		fmt.Fprintf(out, "next fires (UTC%s):\n", cond)
		for _, t := range sc.NextFires {
			fmt.Fprintf(out, "  %s\n", fmtTimeIn(t, time.UTC))
		}
		return
	}
	fmt.Fprintf(out, "next fires (%s, and UTC%s):\n", loc, cond)
	for _, t := range sc.NextFires {
		fmt.Fprintf(out, "  %s   %s\n", fmtTimeIn(t, loc), fmtTimeIn(t, time.UTC))
	}
}

// waitingText says why a schedule's due ticks are not decided: they wait
// for the task of its last fire, as its overlap policy says, and what
// becomes of them when it finishes.
func waitingText(sc *client.Schedule) string {
	state := ""
	for _, f := range sc.Recent {
		if f.TaskID == sc.WaitingForTask && f.TaskState != client.TaskStateUnspecified {
			state = " (" + f.TaskState.String() + ")"
		}
	}
	then := "the ticks due until it finishes are skipped then"
	if !sc.HeldTick.IsZero() {
		then = "the held tick fires when it finishes, and the ticks due after it until then are skipped"
	}
	return fmt.Sprintf("since %s for task %s%s of the last fire (overlap %s): %s",
		fmtTimeIn(sc.WaitingSince, scheduleLoc(sc)), sc.WaitingForTask, state, sc.Overlap, then)
}

// scheduleLoc is the time zone of a schedule: the zone its ticks are
// written in. UTC when none is set (or, should a zone be unknown to this
// binary, which embeds every IANA zone, rather than fail).
func scheduleLoc(sc *client.Schedule) *time.Location {
	if sc.TimeZone == "" || sc.TimeZone == "UTC" {
		return time.UTC
	}
	loc, err := time.LoadLocation(sc.TimeZone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// scheduleUpdateCmd is `tenure schedule update`.
type scheduleUpdateCmd struct {
	control  controlFlags
	schedule scheduleArgs
	def      scheduleDefFlags
}

func (*scheduleUpdateCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "update NAME --queue Q [flags]",
		Args:  oneArg("schedule name"),
		Short: "change a schedule's expression, time zone, policies or task",
		Long: `Change a schedule's definition: it takes the flags of create, and what no
flag sets keeps its value (the command reads the schedule first, then
writes it whole). The old definition's ticks that are due are decided
first; the new one's start after now. It prints the next fire times; with
--json the API's UpdateScheduleResponse.`,
		Example: `  tenure schedule update nightly-report --queue reports --cron '30 2 * * *' --reason 'after the backup'`,
	}
}

func (c *scheduleUpdateCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, "")
	c.schedule.add(fs)
	c.def.add(fs, "")
}

func (c *scheduleUpdateCmd) choices() map[string][]string { return c.def.choices() }

func (c *scheduleUpdateCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, args []string) error {
	name, err := c.schedule.name(args)
	if err != nil {
		return err
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(captured context.Context, cl *client.Client) (*client.Schedule, error) {
		// The read is made with ctx, not captured: the update's answer is
		// the command's.
		sc, err := cl.GetSchedule(ctx, client.GetScheduleRequest{Namespace: c.schedule.namespace, Queue: c.schedule.queue, Name: name})
		if err != nil {
			return nil, err
		}
		retry := sc.RetryPolicy
		req := client.ScheduleRequest{Namespace: sc.Namespace, Queue: sc.Queue, Name: sc.Name, Cron: sc.Cron, TimeZone: sc.TimeZone,
			Overlap: sc.Overlap, CatchUpWindow: sc.CatchUpWindow, Payload: sc.Payload, ExecutionWindow: sc.ExecutionWindow,
			Retry: &retry, Priority: sc.Priority, Kind: sc.Kind, Reason: c.control.reason}
		if err := c.def.apply(a, fs, &req); err != nil {
			return nil, err
		}
		return cl.UpdateSchedule(captured, req)
	}, func(sc *client.Schedule) error {
		fmt.Fprintf(a.stdout, "updated schedule %s\n", schedulePath(sc))
		printNextFires(a.stdout, sc)
		return nil
	})
}

// scheduleListCmd is `tenure schedule list`.
type scheduleListCmd struct {
	client    clientFlags
	namespace string
	queue     string
}

func (*scheduleListCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "list [flags]",
		Short: "list the schedules: expression, zone, next fire, last decision",
		Long: `List the schedules, ordered by namespace, queue and name, one line each:

  NAME     the schedule's name
  QUEUE    namespace/queue: where its tasks go
  CRON     its expression
  ZONE     the time zone it is read in
  NEXT     its next fire time ("-": paused, or none)
  LAST     its latest decision: the outcome and the tick ("-": none yet)
  PAUSED   yes or no

With --json it prints the API's ListSchedulesResponse, with every
schedule's definition and recent decisions.`,
		Example: `  tenure schedule list
  tenure schedule list --namespace billing --queue invoices --json`,
	}
}

func (c *scheduleListCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.StringVar(&c.namespace, "namespace", "", "only the schedules of this namespace (default: all)")
	fs.StringVar(&c.queue, "queue", "", "only the schedules of this queue (default: all)")
}

func (c *scheduleListCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) ([]*client.Schedule, error) {
		return client.Collect(cl.ListSchedules(ctx, client.ListSchedulesRequest{Namespace: c.namespace, Queue: c.queue}))
	}, func(ss []*client.Schedule) error {
		if len(ss) == 0 {
			fmt.Fprintln(a.stderr, "no schedules")
			return nil
		}
		w := table(a.stdout)
		fmt.Fprintln(w, "NAME\tQUEUE\tCRON\tZONE\tNEXT\tLAST\tPAUSED")
		for _, sc := range ss {
			next, last, paused := "-", "-", "no"
			// Ticks in the schedule's zone, the one its expression speaks.
			loc := scheduleLoc(sc)
			switch {
			case sc.WaitingForTask != "":
				next = "waiting for task " + sc.WaitingForTask
			case len(sc.NextFires) > 0:
				next = fmtTimeIn(sc.NextFires[0], loc)
			}
			if n := len(sc.Recent); n > 0 {
				last = sc.Recent[n-1].Outcome.String() + " " + fmtTimeIn(sc.Recent[n-1].Tick, loc)
			}
			if sc.Paused {
				paused = "yes"
			}
			fmt.Fprintf(w, "%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\n", sc.Name, sc.Namespace, sc.Queue, sc.Cron, zone(sc.TimeZone), next, last, paused)
		}
		return w.Flush()
	})
}

// zone is a schedule's time zone as shown: UTC when none is set.
func zone(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

// scheduleGetCmd is `tenure schedule get`.
type scheduleGetCmd struct {
	client   clientFlags
	schedule scheduleArgs
}

func (*scheduleGetCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME --queue Q [flags]",
		Args:  oneArg("schedule name"),
		Short: "show a schedule: definition, next fire times, recent decisions",
		Long: `Show one schedule: its expression, time zone, overlap policy, catch-up
window and task; whether it is paused (since when, by whom, why); its next
5 fire times; and its recent decisions (up to 20), oldest first: each
tick, its outcome (FIRED, SKIPPED, HELD, BACKFILLED), why ticks were
skipped (and until when), and the task submitted with its state now. With
--json it prints the API's GetScheduleResponse.`,
		Example: `  tenure schedule get nightly-report --queue reports`,
	}
}

func (c *scheduleGetCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	c.schedule.add(fs)
}

func (c *scheduleGetCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	name, err := c.schedule.name(args)
	if err != nil {
		return err
	}
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) (*client.Schedule, error) {
		return cl.GetSchedule(ctx, client.GetScheduleRequest{Namespace: c.schedule.namespace, Queue: c.schedule.queue, Name: name})
	}, func(sc *client.Schedule) error {
		printSchedule(a.stdout, sc)
		return nil
	})
}

// printSchedule prints a schedule as `tenure schedule get` shows it.
func printSchedule(out io.Writer, sc *client.Schedule) {
	w, row := fieldTable(out)
	row("schedule", schedulePath(sc))
	row("cron", sc.Cron+" ("+zone(sc.TimeZone)+")")
	row("overlap", sc.Overlap.String())
	row("catch-up", sc.CatchUpWindow.String())
	kind := ""
	if sc.Kind != "" {
		kind = "kind " + sc.Kind + ", "
	}
	row("task", fmt.Sprintf("%spayload %s, window %v, up to %d attempts, priority %d",
		kind, preview(sc.Payload), sc.ExecutionWindow, sc.RetryPolicy.MaxAttempts, sc.Priority))
	state := "running"
	if sc.Paused {
		state = "paused " + pauseText(sc.Pause)
	}
	row("state", state)
	if !sc.HeldTick.IsZero() {
		row("held tick", fmtTimeIn(sc.HeldTick, scheduleLoc(sc))+" (fires when the previous task finishes)")
	}
	if sc.WaitingForTask != "" {
		row("waiting", waitingText(sc))
	}
	created := fmtTime(sc.CreatedAt)
	if sc.CreatedBy != "" {
		created += " by " + sc.CreatedBy
	}
	row("created", created)
	row("updated", fmtTime(sc.UpdatedAt))
	w.Flush()
	fmt.Fprintln(out)
	printNextFires(out, sc)
	if len(sc.Recent) == 0 {
		fmt.Fprintln(out, "\nrecent decisions: none yet")
		return
	}
	fmt.Fprintf(out, "\nrecent decisions (ticks in %s):\n", scheduleLoc(sc))
	w = table(out)
	fmt.Fprintln(w, "TICK\tOUTCOME\tREASON\tUNTIL\tTASK\tSTATE\tAT")
	for _, f := range sc.Recent {
		st := ""
		if f.TaskID != "" {
			st = "gone"
			if f.TaskState != client.TaskStateUnspecified {
				st = f.TaskState.String()
			}
		}
		loc := scheduleLoc(sc)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTimeIn(f.Tick, loc), f.Outcome, f.Reason, fmtTimeIn(f.Until, loc), f.TaskID, st, fmtTime(f.At))
	}
	w.Flush()
}

// scheduleControlCmd is `tenure schedule pause`, `resume` and `delete`.
type scheduleControlCmd struct {
	action   string // "pause", "resume" or "delete"
	control  controlFlags
	schedule scheduleArgs
	yes      bool
}

func (c *scheduleControlCmd) spec() *cobra.Command {
	switch c.action {
	case "pause":
		return &cobra.Command{
			Use:   "pause NAME --queue Q [flags]",
			Args:  oneArg("schedule name"),
			Short: "pause a schedule: no tick fires until resume",
			Long: `Pause a schedule: none of its ticks is decided until ` + "`tenure schedule resume`" + `.
The pause is a WAL record, with who asked (--requested-by) and why
(--reason): it holds across restarts. Pausing a paused schedule changes
nothing. With --json it prints the API's PauseScheduleResponse.`,
			Example: `  tenure schedule pause nightly-report --queue reports --reason 'quarter close'`,
		}
	case "resume":
		return &cobra.Command{
			Use:   "resume NAME --queue Q [flags]",
			Args:  oneArg("schedule name"),
			Short: "resume a paused schedule; the ticks it missed are skipped",
			Long: `Resume a paused schedule: the ticks that passed while it was paused are
recorded as skipped (reason "paused"), and the next is the first after
now (` + "`tenure schedule backfill`" + ` fires missed ticks). Resuming a running schedule
changes nothing. With --json it prints the API's ResumeScheduleResponse.`,
			Example: `  tenure schedule resume nightly-report --queue reports`,
		}
	}
	return &cobra.Command{
		Use:   "delete NAME --queue Q [flags]",
		Args:  oneArg("schedule name"),
		Short: "delete a schedule (the tasks it submitted stay)",
		Long: `Delete a schedule: it fires no more; the tasks it submitted stay. It asks
first and reads y or yes from stdin; --yes skips the question, and is
required when stdin is not a terminal. With --json it prints the API's
DeleteScheduleResponse ({}).`,
		Example: `  tenure schedule delete nightly-report --queue reports --reason 'replaced' --yes`,
	}
}

func (c *scheduleControlCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, "")
	c.schedule.add(fs)
	if c.action == "delete" {
		fs.BoolVar(&c.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	}
}

func (c *scheduleControlCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	name, err := c.schedule.name(args)
	if err != nil {
		return err
	}
	req := client.ScheduleControlRequest{Namespace: c.schedule.namespace, Queue: c.schedule.queue, Name: name, Reason: c.control.reason}
	path := c.schedule.namespace + "/" + c.schedule.queue + "/" + name
	if c.action == "delete" {
		if err := confirm(a, c.yes, "delete schedule "+path); err != nil {
			return err
		}
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.ScheduleControlResult, error) {
		switch c.action {
		case "delete":
			return client.ScheduleControlResult{}, cl.DeleteSchedule(ctx, req)
		case "pause":
			return cl.PauseSchedule(ctx, req)
		}
		return cl.ResumeSchedule(ctx, req)
	}, func(res client.ScheduleControlResult) error {
		sc := &res.Schedule
		switch {
		case c.action == "delete":
			fmt.Fprintf(a.stdout, "deleted schedule %s\n", path)
		case c.action == "pause" && res.Changed:
			fmt.Fprintf(a.stdout, "paused schedule %s\n", schedulePath(sc))
		case c.action == "pause":
			fmt.Fprintf(a.stdout, "schedule %s was already paused %s\n", schedulePath(sc), pauseText(sc.Pause))
		case res.Changed:
			fmt.Fprintf(a.stdout, "resumed schedule %s\n", schedulePath(sc))
			printNextFires(a.stdout, sc)
		default:
			fmt.Fprintf(a.stdout, "schedule %s was not paused\n", schedulePath(sc))
		}
		return nil
	})
}

// scheduleBackfillCmd is `tenure schedule backfill`.
type scheduleBackfillCmd struct {
	control  controlFlags
	schedule scheduleArgs
	from, to string
}

func (*scheduleBackfillCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "backfill NAME --queue Q --from T --to T [flags]",
		Args:  oneArg("schedule name"),
		Short: "fire the ticks of a past range that never fired",
		Long: `Fire every tick of the schedule from --from to --to (RFC 3339 times, both
included) that never fired — skipped while the server was down or the
schedule paused — one task each, whatever the overlap policy. A tick that
fired before is counted, not fired again (its task's request id is the
tick's), so running it twice is safe. --to must not be in the future, and
must be before the schedule's next fire time; at most 1000 ticks per run.
It prints how many ticks it fired and how many had fired already; with
--json the API's BackfillScheduleResponse.`,
		Example: `  tenure schedule backfill nightly-report --queue reports --from 2026-03-01T00:00:00Z --to 2026-03-07T23:59:59Z`,
	}
}

func (c *scheduleBackfillCmd) define(fs *pflag.FlagSet) {
	c.control.addWho(fs)
	c.schedule.add(fs)
	fs.StringVar(&c.from, "from", "", "start of the range, RFC 3339 (2026-03-01T00:00:00Z) (required)")
	fs.StringVar(&c.to, "to", "", "end of the range, RFC 3339, included (required)")
}

func (c *scheduleBackfillCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	name, err := c.schedule.name(args)
	if err != nil {
		return err
	}
	var bounds [2]time.Time
	for i, f := range []struct{ flag, v string }{{"from", c.from}, {"to", c.to}} {
		if f.v == "" {
			return usageError{"--" + f.flag + " is required"}
		}
		if bounds[i], err = time.Parse(time.RFC3339Nano, f.v); err != nil {
			return usageError{fmt.Sprintf("--%s %q is not an RFC 3339 time (2026-03-01T00:00:00Z)", f.flag, f.v)}
		}
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.BackfillResult, error) {
		return cl.BackfillSchedule(ctx, client.BackfillRequest{Namespace: c.schedule.namespace, Queue: c.schedule.queue, Name: name,
			Start: bounds[0], End: bounds[1]})
	}, func(res client.BackfillResult) error {
		fmt.Fprintf(a.stdout, "fired %s; %s had fired already\n", plural(uint64(len(res.Fired)), "tick"), plural(uint64(res.AlreadyFired), "tick"))
		for _, f := range res.Fired {
			fmt.Fprintf(a.stdout, "  %s  %s\n", fmtTime(f.Tick), f.TaskID)
		}
		return nil
	})
}
