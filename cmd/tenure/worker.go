package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// Limits of what the exec worker sends back: the server's defaults.
const (
	maxResultBytes = 1 << 20
	maxReasonBytes = 4 << 10
)

// permanentFailureExit is the exit status with which an exec worker's
// command fails its task for good, without retries: high enough that no
// shell or common tool returns it by accident (they use 1, 2, 126, 127
// and 128+signal).
const permanentFailureExit = 100

// workerCmd is `tenure worker`.
type workerCmd struct {
	client      clientFlags
	namespace   string
	queues      []string
	cmdline     string
	concurrency int
	workerID    string
	grace       time.Duration
	stopEmpty   bool
}

func (*workerCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use: "worker --queue Q --exec CMD [flags]",
		// run refuses an argument, after the flags, with a hint.
		Args:  cobra.ArbitraryArgs,
		Short: "run a command for each task of a queue (payload on stdin)",
		Long: fmt.Sprintf(`Lease the tasks of a queue (or of several: --queue again for each, one
pool of --concurrency for all) and run CMD with sh -c for each, whatever
its kind, up to --concurrency at once, heartbeating while it runs.

The command's stdin is the task's payload. Its environment is the worker's,
plus:
  TENURE_TASK_ID     the task's id
  TENURE_ATTEMPT     this attempt's number, from 1
  TENURE_LEASE_ID    this attempt's lease
  TENURE_NAMESPACE   the task's namespace
  TENURE_QUEUE       the task's queue
  TENURE_KIND        the task's kind ("" for none)
  TENURE_DEPENDENCY_RESULT_<i>
                     the result of the i-th task it depends on, from 0 (set
                     when that task completed with a result of UTF-8 text
                     without NUL; TENURE_DEPENDS_ON lists them all by id)

Its exit status decides the task:
  0      the task completes; its result is the command's stdout (at most 1 MiB)
  %d    the task fails permanently, with no retry; the reason is the end of
         its stderr
  other  the attempt fails with the end of its stderr as the reason; the task
         is retried per its retry policy (FAILED after its last attempt)

With --stop-when-empty the worker exits once nothing of the queue is left
to run now: no task is due and none runs (a task waiting for its retry's
backoff or its --delay is left), or the queue is paused. Without it, it
waits for tasks until stopped.

When the lease is lost (it expired, or the task was killed) the command's
whole process group is killed. On SIGTERM or Ctrl-C the worker leases no
more, lets running commands finish for --shutdown-grace, then kills them
and fails their tasks (retried).

The worker logs one line per finished task on stderr: "task finished" with
its outcome (completed; failed, will retry; failed permanently, when the
command exited %[1]d; failed, attempts used up; lease lost; not reported),
the task id, the attempt and how long it took. While the queue is paused
it leases nothing, and says so once (who paused it, why), and again when
the queue is resumed.`, permanentFailureExit),
		Example: fmt.Sprintf(`  tenure worker --queue emails --exec 'tr a-z A-Z'
  tenure worker --queue emails --exec 'tr a-z A-Z' --stop-when-empty   # work off what is due, then exit
  tenure worker --queue resize --concurrency 4 --exec ./resize.sh   # resize.sh exits %d on an image it can never resize`, permanentFailureExit),
	}
}

func (c *workerCmd) define(fs *pflag.FlagSet) {
	c.client.addConnection(fs)
	fs.StringVar(&c.namespace, "namespace", "default", "namespace to lease from")
	fs.StringArrayVar(&c.queues, "queue", nil, "queue to lease from (required); again for each further queue, up to 32")
	fs.StringVar(&c.cmdline, "exec", "", "command run with sh -c for each task (required); the payload is its stdin")
	fs.IntVar(&c.concurrency, "concurrency", 1, "tasks run at once, 1..10000")
	fs.StringVar(&c.workerID, "worker-id", "", "name of this worker in leases (default host-pid-random)")
	fs.DurationVar(&c.grace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long running commands may finish before they are killed and their tasks failed (above 0)")
	fs.BoolVar(&c.stopEmpty, "stop-when-empty", false, "exit once no task of the queue is due and none runs (tasks waiting for a retry's backoff or a --delay are left)")
}

func (c *workerCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	if len(c.queues) == 0 || c.cmdline == "" {
		return usageError{"--queue and --exec are required"}
	}
	if len(args) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (quote the whole --exec command)", args[0])}
	}
	// worker.Options takes zero as "unset"; an explicit zero must not
	// quietly become the default.
	if c.concurrency == 0 {
		return usageError{"--concurrency 0 is outside 1..10000; omit the flag for the default of 1"}
	}
	if c.grace == 0 {
		return usageError{"--shutdown-grace 0 is not above 0 (pass a small value such as 1ms to kill running commands at once on SIGTERM); omit the flag for the default of 30s"}
	}
	cl, err := c.client.connect()
	if err != nil {
		return err
	}
	lg := slog.New(slog.NewTextHandler(a.stderr, nil))
	w, err := worker.New(cl, worker.Options{
		Queues:        c.queues,
		Namespace:     c.namespace,
		WorkerID:      c.workerID,
		Concurrency:   c.concurrency,
		ShutdownGrace: c.grace,
		Logger:        lg,
		Middleware:    []worker.Middleware{logFinish(lg)},
		StopWhenEmpty: c.stopEmpty,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	worker.HandleOther(w, execHandler(c.cmdline, lg), nil)
	fmt.Fprintf(a.stdout, "worker: running %q for tasks of %s/%s (concurrency %d)\n", c.cmdline, c.namespace, strings.Join(c.queues, ","), c.concurrency)
	return w.Run(ctx)
}

// logFinish logs one line per finished task: its outcome, the task, its
// kind, the attempt and how long it took. A failed task says why no retry
// follows: its command asked for none (failed permanently), or its
// attempts are used up.
func logFinish(lg *slog.Logger) worker.Middleware {
	outcomes := map[worker.Outcome]string{
		worker.OutcomeCompleted:  "completed",
		worker.OutcomeRetrying:   "failed, will retry",
		worker.OutcomeFailed:     "failed, attempts used up",
		worker.OutcomeLost:       "lease lost",
		worker.OutcomeUnreported: "not reported",
	}
	return func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
		f := next(ctx)
		outcome := outcomes[f.Outcome]
		if f.Outcome == worker.OutcomeFailed && errors.As(f.Err, new(forGood)) {
			outcome = "failed permanently"
		}
		attrs := []any{"outcome", outcome, "task_id", t.ID, "attempt", t.Attempt, "took", f.Took}
		if t.Kind != "" {
			attrs = append(attrs, "kind", t.Kind)
		}
		if !f.RetryAt.IsZero() {
			attrs = append(attrs, "retry_at", f.RetryAt)
		}
		if f.Err != nil {
			attrs = append(attrs, "err", f.Err)
		}
		level := slog.LevelInfo
		if f.Outcome != worker.OutcomeCompleted {
			level = slog.LevelWarn
		}
		lg.Log(ctx, level, "task finished", attrs...)
		return f
	}
}

// execHandler runs cmdline once per task, as the worker command's help
// says: the payload on stdin, the task in TENURE_* variables, the exit
// status deciding the task. When the lease is lost the handler's context
// ends, and the command's whole process group is killed.
func execHandler(cmdline string, lg *slog.Logger) worker.Handler {
	return func(ctx context.Context, t *worker.Task[[]byte]) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
		cmd.Stdin = bytes.NewReader(t.Payload)
		var out bytes.Buffer
		errTail := &tailBuffer{max: maxReasonBytes}
		cmd.Stdout = &limitedBuffer{buf: &out, max: maxResultBytes}
		cmd.Stderr = errTail
		cmd.Env = append(os.Environ(),
			"TENURE_TASK_ID="+t.ID,
			"TENURE_ATTEMPT="+strconv.FormatUint(uint64(t.Attempt), 10),
			"TENURE_LEASE_ID="+t.LeaseID,
			"TENURE_NAMESPACE="+t.Namespace,
			"TENURE_QUEUE="+t.Queue,
			"TENURE_KIND="+t.Kind,
		)
		cmd.Env = append(cmd.Env, dependencyEnv(t.Dependencies)...)
		// Its own process group, so a lost lease kills the children too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		lg.Info("running task", "task_id", t.ID, "attempt", t.Attempt)
		err := cmd.Run()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("command killed: %w", ctx.Err())
		}
		if err != nil {
			reason := err.Error()
			ee, exited := errors.AsType[*exec.ExitError](err)
			if exited {
				reason = ee.String()
			}
			if tail := bytes.TrimSpace(errTail.Bytes()); len(tail) > 0 {
				reason += ": " + string(tail)
			}
			if len(reason) > maxReasonBytes {
				reason = reason[len(reason)-maxReasonBytes:]
			}
			if exited && ee.ExitCode() == permanentFailureExit {
				return nil, worker.Permanent(forGood{errors.New(reason)})
			}
			return nil, errors.New(reason)
		}
		if out.Len() > maxResultBytes {
			return nil, worker.Permanent(forGood{fmt.Errorf("command wrote more than %d bytes to stdout; the result limit is %d bytes", maxResultBytes, maxResultBytes)})
		}
		return out.Bytes(), nil
	}
}

// forGood is an error with which the exec worker fails a task for good
// (its command exited 100, or wrote a result over the limit), so that its
// log tells it from a task whose attempts are used up.
type forGood struct{ error }

func (e forGood) Unwrap() error { return e.error }

// limitedBuffer keeps up to max+1 bytes (one more, to tell that the output
// was too long) and discards the rest, so a chatty command cannot exhaust
// memory.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max + 1 - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written: the end of stderr is where
// the error usually is.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte { return t.b }

// dependencyEnv is what the exec worker's command learns of the tasks its
// task depends on: their ids, and the result of each that completed with
// text an environment variable can hold.
func dependencyEnv(ds []client.DependencyResult) []string {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]string, len(ds))
	var out []string
	for i, d := range ds {
		ids[i] = d.TaskID
		if d.State == client.TaskStateCompleted && !d.ResultOmitted && utf8.Valid(d.Result) && !bytes.ContainsRune(d.Result, 0) {
			out = append(out, fmt.Sprintf("TENURE_DEPENDENCY_RESULT_%d=%s", i, d.Result))
		}
	}
	return append(out, "TENURE_DEPENDS_ON="+strings.Join(ids, " "))
}
