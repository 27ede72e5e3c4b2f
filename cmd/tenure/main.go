// Command tenure is the tenure server, its command-line client and a
// generic worker, in one binary. Run `tenure help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the command's
// name and returns an error to print; a usageError also prints the usage.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

// usageError is a mistake in the command line.
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	name := args[0]
	// Two-word commands: "task get", "tasks list".
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		if c := find(name + " " + args[1]); c != nil {
			return runCommand(ctx, c, args[2:], stdout, stderr)
		}
	}
	if c := find(name); c != nil {
		return runCommand(ctx, c, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "tenure: unknown command %q\n\n", strings.Join(args[:min(2, len(args))], " "))
	usage(stderr)
	return 2
}

func find(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func runCommand(ctx context.Context, c *command, args []string, stdout, stderr io.Writer) int {
	err := c.run(ctx, args, stdout, stderr)
	var ee exitError
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "tenure %s: %s\nRun `tenure %s -h` for its flags.\n", c.name, ue.msg, c.name)
		return 2
	default:
		fmt.Fprintf(stderr, "tenure %s: %v\n", c.name, err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, "tenure is a durable task scheduler.\n\nUsage: tenure <command> [flags]\n\nCommands:\n")
	sorted := append([]command(nil), commands...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun `tenure <command> -h` for a command's flags.\n")
}

// newFlags returns a flag set for a command that prints its usage to
// stderr and reports mistakes as errors instead of exiting.
func newFlags(name, usageLine string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tenure "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tenure %s %s\n\nFlags:\n", name, usageLine)
		fs.PrintDefaults()
	}
	return fs
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
