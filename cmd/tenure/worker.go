package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/worker"
)

func init() {
	register(command{name: "worker", summary: "run a command for each task of a queue (payload on stdin)", run: runWorker})
}

// Limits of what the exec worker sends back: the server's defaults.
const (
	maxResultBytes = 1 << 20
	maxReasonBytes = 4 << 10
)

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("worker", "--queue Q --exec CMD [flags]", stderr)
	cf := addClientFlags(fs)
	ns := fs.String("namespace", "default", "namespace to lease from")
	queue := fs.String("queue", "", "queue to lease from (required)")
	cmdline := fs.String("exec", "", "command run with `sh -c` for each task (required); the payload is its stdin")
	concurrency := fs.Int("concurrency", 1, "tasks run at once, 1..10000")
	workerID := fs.String("worker-id", "", "name of this worker in leases (default host-pid-random)")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "on SIGTERM, how long running commands may finish before they are killed and their tasks failed (above 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *queue == "" || *cmdline == "" {
		return usageError{"--queue and --exec are required"}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (quote the whole --exec command)", fs.Arg(0))}
	}
	// worker.Options takes zero as "unset"; an explicit zero must not
	// quietly become the default.
	if *concurrency == 0 {
		return usageError{"--concurrency 0 is outside 1..10000; omit the flag for the default of 1"}
	}
	if *grace == 0 {
		return usageError{"--shutdown-grace 0 is not above 0 (pass a small value such as 1ms to kill running commands at once on SIGTERM); omit the flag for the default of 30s"}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	lg := slog.New(slog.NewTextHandler(stderr, nil))
	w, err := worker.New(c, *queue, execHandler(*cmdline, lg), worker.Options{
		Namespace:     *ns,
		WorkerID:      *workerID,
		Concurrency:   *concurrency,
		ShutdownGrace: *grace,
		Logger:        lg,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(stdout, "worker: running %q for tasks of %s/%s (concurrency %d)\n", *cmdline, *ns, *queue, *concurrency)
	return w.Run(ctx)
}

// execHandler runs cmdline once per task. The payload is the command's
// stdin; TENURE_TASK_ID, TENURE_ATTEMPT and TENURE_LEASE_ID are in its
// environment. Exit 0: the task completes with the command's stdout. Any
// other exit: the task fails with the end of its stderr (and is retried per
// its policy). When the lease is lost the handler's context ends, and the
// command's whole process group is killed.
func execHandler(cmdline string, lg *slog.Logger) worker.Handler {
	return func(ctx context.Context, t *worker.Task) ([]byte, error) {
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
		)
		// Its own process group, so a lost lease kills the children too.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		lg.Info("running task", "task", t.ID, "attempt", t.Attempt)
		err := cmd.Run()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("command killed: %w", ctx.Err())
		}
		if err != nil {
			var ee *exec.ExitError
			reason := err.Error()
			if errors.As(err, &ee) {
				reason = ee.String()
			}
			if tail := bytes.TrimSpace(errTail.Bytes()); len(tail) > 0 {
				reason += ": " + string(tail)
			}
			if len(reason) > maxReasonBytes {
				reason = reason[len(reason)-maxReasonBytes:]
			}
			return nil, errors.New(reason)
		}
		if out.Len() > maxResultBytes {
			return nil, worker.Permanent(fmt.Errorf("command wrote more than %d bytes to stdout; the result limit is %d bytes", maxResultBytes, maxResultBytes))
		}
		return out.Bytes(), nil
	}
}

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
