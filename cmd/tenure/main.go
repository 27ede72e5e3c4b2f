// Command tenure is the tenure server, its command-line client and a
// generic worker, in one binary. Run `tenure help` for the commands.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	// Every IANA time zone is compiled into the binary (about 450 KB), so
	// that a schedule's time zone is known on a machine without
	// /usr/share/zoneinfo (a scratch container): the server parses each
	// schedule's zone (docs/design/state-machine.md, "Schedules").
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/clock"
)

// newRoot returns tenure's command tree. Every command is listed here, in
// the group its help shows it under: a new command is a type that
// implements leaf (in the file of its group of commands), added below.
func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "tenure",
		Short: "tenure is a durable task scheduler",
		Long: `tenure is a durable task scheduler: one binary that serves the API, submits
and inspects tasks, runs a generic worker and reads a data directory offline.

Flags go anywhere after the command's name. Defaults of the server address,
listen address and data directory come from TENURE_ADDR, TENURE_LISTEN and
TENURE_DATA_DIR when set; each flag's help names its variable.`,
	}
	root.AddGroup(
		&cobra.Group{ID: "serve", Title: "Run a server:"},
		&cobra.Group{ID: "use", Title: "Use a server:"},
		&cobra.Group{ID: "cluster", Title: "Cluster mode:"},
		&cobra.Group{ID: "offline", Title: "Read a data directory (offline, changes nothing):"},
		&cobra.Group{ID: "other", Title: "Other commands:"},
	)
	add(root, "serve", a.leaf(&serverCmd{}),
		group("token", "create, list or revoke the bearer tokens of a server's --auth-file",
			a.leaf(&tokenCreateCmd{}), a.leaf(&tokenListCmd{}), a.leaf(&tokenRevokeCmd{})))
	add(root, "use",
		a.leaf(&submitCmd{}),
		group("task", "show a task, its history, or kill or retry it",
			a.leaf(&taskGetCmd{}), a.leaf(&taskHistoryCmd{}), a.leaf(&taskControlCmd{kill: true}), a.leaf(&taskControlCmd{})),
		group("tasks", "list tasks, or retry, kill or purge the tasks a filter selects",
			a.leaf(&tasksListCmd{}), a.leaf(&tasksBulkCmd{action: bulkRetry}), a.leaf(&tasksBulkCmd{action: bulkKill}),
			a.leaf(&tasksBulkCmd{action: bulkPurge})),
		a.leaf(&eventsCmd{}),
		a.leaf(&queuesCmd{}),
		group("queue", "show, pause, resume or limit a queue",
			a.leaf(&queueGetCmd{}), a.leaf(&queueControlCmd{pause: true}), a.leaf(&queueControlCmd{}), a.leaf(&queueLimitCmd{})),
		group("schedule", "create, list, show, change, pause, resume, delete or backfill a schedule",
			a.leaf(&scheduleCreateCmd{}), a.leaf(&scheduleListCmd{}), a.leaf(&scheduleGetCmd{}), a.leaf(&scheduleUpdateCmd{}),
			a.leaf(&scheduleControlCmd{action: "pause"}), a.leaf(&scheduleControlCmd{action: "resume"}),
			a.leaf(&scheduleControlCmd{action: "delete"}), a.leaf(&scheduleBackfillCmd{})),
		group("workflow", "show, list, cancel or retry a workflow",
			a.leaf(&workflowGetCmd{}), a.leaf(&workflowListCmd{}), a.leaf(&workflowControlCmd{cancel: true}), a.leaf(&workflowControlCmd{})),
		a.leaf(&workerCmd{}),
		group("outbox", "create an application database's outbox tables, relay its rows to a server, or show it",
			a.leaf(&outboxMigrateCmd{}), a.leaf(&outboxRelayCmd{}), a.leaf(&outboxStatusCmd{})),
		group("admin", "ask a running server for maintenance",
			a.leaf(&adminSnapshotCmd{})),
	)
	add(root, "cluster",
		a.leaf(&migrateCmd{}),
		group("cluster", "inspect a cluster through its database",
			a.leaf(&clusterStatusCmd{})),
	)
	add(root, "offline",
		group("wal", "verify, dump or replay a data directory's WAL and snapshots",
			a.leaf(&walVerifyCmd{}), a.leaf(&walDumpCmd{}), a.leaf(&walStateCmd{})),
	)
	add(root, "other", a.leaf(&benchCmd{}), a.leaf(&versionCmd{}))

	// Before the completion command is made: it takes its output from
	// the root then.
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "help about any command"
		case "completion":
			c.Short = "print a shell completion script: bash, zsh, fish or powershell"
		}
	}
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	groupsListTheirCommands(root)
	return root
}

// app is what every command shares: where it reads and writes, and its
// clock.
type app struct {
	stdin io.Reader
	// interactive says stdin is a terminal: a person may answer a prompt.
	// (isTerminal takes any character device for one, /dev/null too: a
	// prompt then reads the end of input and aborts.)
	interactive    bool
	stdout, stderr io.Writer
	clock          clock.Clock
}

// leaf is a command that does something, as opposed to a group that only
// holds commands.
type leaf interface {
	// spec is the command's usage line (its name first), help texts and,
	// if it takes positional arguments, the Args that checks them
	// (oneArg); without, the command takes none (noArgs).
	spec() *cobra.Command
	// define defines every flag of the command, into the leaf's fields.
	define(fs *pflag.FlagSet)
	// run does the command with the flags parsed (fs tells which were
	// given) and its positional arguments, checked by spec's Args.
	run(ctx context.Context, a *app, fs *pflag.FlagSet, args []string) error
}

// choices is implemented by a leaf whose flags take one of a few values,
// for shell completion: flag name → values.
type choices interface{ choices() map[string][]string }

// leaf returns the cobra command of l.
func (a *app) leaf(l leaf) *cobra.Command {
	cmd := l.spec()
	if cmd.Args == nil {
		cmd.Args = noArgs
	}
	l.define(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return l.run(cmd.Context(), a, cmd.Flags(), args)
	}
	if c, ok := l.(choices); ok {
		for name, values := range c.choices() {
			if err := cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
				panic(fmt.Sprintf("tenure %s: completion of --%s: %v", cmd.Name(), name, err))
			}
		}
	}
	return cmd
}

// group returns a command that holds the commands subs.
func group(name, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: name, Short: short}
	g.AddCommand(subs...)
	return g
}

// add adds cmds to parent under the help group id.
func add(parent *cobra.Command, id string, cmds ...*cobra.Command) {
	for _, c := range cmds {
		c.GroupID = id
		parent.AddCommand(c)
	}
}

// groupsListTheirCommands makes every group in the tree (the root, the
// groups, cobra's completion) list its commands when run alone, and refuse
// an unknown one as a usage error; cobra would print the help and exit 0.
func groupsListTheirCommands(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.DisableFlagsInUseLine = true
		c.SuggestionsMinimumDistance = 2
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += `; did you mean "` + strings.Join(s, `" or "`) + `"?`
			}
			return usageError{msg}
		}
	}
	for _, sub := range c.Commands() {
		groupsListTheirCommands(sub)
	}
}

// usageError is a mistake in the command line: exit 2, with the usage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError ends the process with a chosen code after printing nothing more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one command line with the process's stdin and returns the exit
// code (see runApp).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runApp(ctx, args, &app{stdin: os.Stdin, interactive: isTerminal(os.Stdin), stdout: stdout, stderr: stderr, clock: clock.Real})
}

// runApp runs one command line and returns the exit code: 0 done, 1 the
// command failed (the error is printed), 2 a usage mistake (printed with
// the command's usage), or what the command chose (exitError).
func runApp(ctx context.Context, args []string, a *app) int {
	stderr := a.stderr
	root := newRoot(a)
	root.SetArgs(oneDashLongFlags(root, append([]string{}, args...)))
	cmd, err := root.ExecuteContextC(ctx)
	if cmd == nil {
		cmd = root
	}
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), ue.msg)
		if cmd.HasAvailableSubCommands() {
			fmt.Fprintf(stderr, "Run `%s --help` for its commands.\n", cmd.CommandPath())
		} else {
			fmt.Fprintf(stderr, "Usage: %s\nRun `%s --help` for its flags.\n", cmd.UseLine(), cmd.CommandPath())
		}
		return 2
	default:
		msg := errorText(cmd, err)
		if hint := cmp.Or(tlsHint(err), addrHint(cmd.Flags(), err)); hint != "" {
			fmt.Fprintf(stderr, "%s: %s\n%s\n", cmd.CommandPath(), msg, hint)
			return 1
		}
		fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), msg)
		return 1
	}
}

// oneDashLongFlags rewrites -name to --name where name is a long flag of
// the command args call: tenure's flags were once parsed by the standard
// library's flag package, which takes both, and command lines written
// then keep working. Values of flags and everything after "--" are left
// alone.
func oneDashLongFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	cmd.InitDefaultHelpFlag() // so that -help is known, as it was
	fs := cmd.Flags()
	// takesValue reports whether flag name is followed by its value as the
	// next argument.
	takesValue := func(name string, inline bool) bool {
		f := fs.Lookup(name)
		return f != nil && !inline && f.NoOptDefVal == ""
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return args
		case strings.HasPrefix(a, "--"):
			name, _, inline := strings.Cut(a[2:], "=")
			if takesValue(name, inline) {
				i++
			}
		case len(a) > 2 && a[0] == '-':
			name, _, inline := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				args[i] = "-" + a
				if takesValue(name, inline) {
					i++
				}
			}
		}
	}
	return args
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// noArgs refuses positional arguments: the Args of a command whose spec
// sets none.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[0])}
	}
	return nil
}

// oneArg is the Args of a command that takes one positional argument, a
// what; run finds it in args[0].
func oneArg(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{fmt.Sprintf("expected one %s, got %d arguments", what, len(args))}
		}
		return nil
	}
}
