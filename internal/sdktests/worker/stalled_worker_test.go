package worker_test

// The stalled worker, the duplicate execution the commit boundary prevents
// (docs/design/state-machine.md), with real worker processes: worker A leases a
// task and stalls (SIGSTOP) past its lease; worker B leases the same task
// and completes it; A resumes. Without the commit boundary both apply the
// task's effect (the baseline below shows it); with it exactly one does.
// And a worker killed (SIGKILL) between its commit and its effect is
// finalised by another worker without running the work again and with one
// effect.
//
// The workers are this test binary re-executed in a child mode (TestMain
// dispatches on stallModeEnv). Each effect is one O_APPEND write of the line
// "taskID attempt pid" to a shared ledger file, so the ledger counts effects
// across processes. Children report on stdout, one line per event:
//
//	handler <task> <attempt>   the handler (the work) began
//	effect <task> <attempt>    an effect line was appended to the ledger
//	committed <task> <attempt> (commit-hang) the commit won; now hanging
//	commit <answer>            (sdk-boundary) what Commit answered
//	complete <answer>          (naive) what Complete answered
//	log <slog text record>     the worker runtime's log

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

const (
	stallModeEnv   = "TENURE_STALL_MODE"
	stallURLEnv    = "TENURE_STALL_URL"
	stallQueueEnv  = "TENURE_STALL_QUEUE"
	stallLedgerEnv = "TENURE_STALL_LEDGER"
	stallGateEnv   = "TENURE_STALL_GATE" // optional: the handler waits for this file
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(stallModeEnv); mode != "" {
		os.Exit(stallChild(mode))
	}
	os.Exit(m.Run())
}

// stallChild is the worker process. Modes:
//
//	worker        the worker runtime with an Effects hook (the commit boundary)
//	commit-hang   the worker runtime whose Effects hook hangs: it reports
//	              "committed" and waits to be killed
//	sdk-boundary  one task by hand with the SDK: work, Commit, and only if
//	              the commit won, the effect and Complete
//	naive         one task by hand without the boundary: work, effect,
//	              Complete (errors ignored) — the baseline that shows the
//	              stalled worker's duplicate effect
func stallChild(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	url, queue, ledgerPath, gate := os.Getenv(stallURLEnv), os.Getenv(stallQueueEnv), os.Getenv(stallLedgerEnv), os.Getenv(stallGateEnv)
	pid := os.Getpid()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) } // one write per line
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "stall child:", err)
		return 2
	}
	c, err := client.New(url, client.Options{})
	if err != nil {
		return fail(err)
	}
	effect := func(taskID string, attempt uint32) error {
		f, err := os.OpenFile(ledgerPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(fmt.Sprintf("%s %d %d\n", taskID, attempt, pid))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			say("effect %s %d", taskID, attempt)
		}
		return err
	}
	// work is the task's work: it waits for the gate file, if any.
	work := func(ctx context.Context, taskID string, attempt uint32) ([]byte, error) {
		say("handler %s %d", taskID, attempt)
		for gate != "" {
			if _, err := os.Stat(gate); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return fmt.Appendf(nil, "result-from-%d", pid), nil
	}
	leaseOne := func() (*client.LeasedTask, error) {
		for ctx.Err() == nil {
			lts, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "stall-" + strconv.Itoa(pid), Queue: queue, Wait: 10 * time.Second}))
			if err != nil {
				return nil, err
			}
			if len(lts) > 0 {
				return &lts[0], nil
			}
		}
		return nil, ctx.Err()
	}
	// answer names the reason of a refusal (LEASE_LOST, ...).
	answer := func(err error) string {
		var e *client.Error
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &e):
			return e.Reason.String()
		}
		return err.Error()
	}

	switch mode {
	case "worker", "commit-hang":
		effects := func(ctx context.Context, t *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
			return effect(tok.TaskID, tok.Attempt)
		}
		if mode == "commit-hang" {
			effects = func(ctx context.Context, t *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
				say("committed %s %d", tok.TaskID, tok.Attempt)
				<-ctx.Done() // the test kills the process here
				return ctx.Err()
			}
		}
		w, err := newWorker(c, queue, func(ctx context.Context, t *worker.Task[[]byte]) ([]byte, error) {
			return work(ctx, t.ID, t.Attempt)
		}, opts{Options: worker.Options{WorkerID: "stall-" + strconv.Itoa(pid), Logger: slog.New(slog.NewTextHandler(prefixWriter{prefix: "log ", w: os.Stdout}, nil))}, Effects: effects})
		if err != nil {
			return fail(err)
		}
		if err := w.Run(ctx); err != nil {
			return fail(err)
		}
		return 0
	case "sdk-boundary", "naive":
		lt, err := leaseOne()
		if err != nil {
			return fail(err)
		}
		result, err := work(ctx, lt.ID, lt.Attempt)
		if err != nil {
			return fail(err)
		}
		if mode == "naive" {
			// No commit boundary: the effect goes out whatever the lease's
			// state, then Complete, whose answer changes nothing.
			if err := effect(lt.ID, lt.Attempt); err != nil {
				return fail(err)
			}
			err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result})
			say("complete %s", answer(err))
			return 0
		}
		tok, err := c.Commit(ctx, client.CommitRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result})
		say("commit %s", answer(err))
		if err != nil {
			return 0 // refused (or unknown): apply no effect
		}
		if err := effect(tok.TaskID, tok.Attempt); err != nil {
			return fail(err)
		}
		if err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
			return fail(err)
		}
		return 0
	}
	return fail(fmt.Errorf("unknown mode %q", mode))
}

// prefixWriter prefixes each Write (one slog record) with prefix, in one
// write.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// proc is a running child worker process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	stderr bytes.Buffer // written by exec's copier until Wait returns
	exited chan struct{}
	err    error // Wait's answer, once exited is closed
}

// stallScenario is one scenario: a server, a queue and a ledger.
type stallScenario struct {
	t      *testing.T
	url    string
	c      *client.Client
	ledger string
	gate   string
}

func newStallScenario(t *testing.T) *stallScenario {
	url := startServer(t, nil)
	dir := t.TempDir()
	return &stallScenario{t: t, url: url, c: newClient(t, url), ledger: filepath.Join(dir, "ledger"), gate: filepath.Join(dir, "gate")}
}

const stallQueue = "stall"

// submit creates the task: a 500ms window, three attempts, retried at once.
func (f *stallScenario) submit() string {
	return submit(f.t, f.c, client.SubmitRequest{
		Queue:           stallQueue,
		Payload:         []byte("charge card 42"),
		ExecutionWindow: 500 * time.Millisecond,
		Retry:           &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	})
}

// start runs a child worker in mode; gated children wait for the gate file
// before finishing their work.
func (f *stallScenario) start(name, mode string, gated bool) *proc {
	t := f.t
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		stallModeEnv+"="+mode,
		stallURLEnv+"="+f.url,
		stallQueueEnv+"="+stallQueue,
		stallLedgerEnv+"="+f.ledger,
	)
	if gated {
		cmd.Env = append(cmd.Env, stallGateEnv+"="+f.gate)
	}
	p := &proc{t: t, name: name, cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = &syncWriter{mu: &p.mu, w: &p.stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, out)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill() // also ends a stopped process
			<-p.exited
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("worker %s (pid %d) stdout:\n%s\nstderr:\n%s", name, cmd.Process.Pid, strings.Join(p.lines, "\n"), p.stderr.String())
			p.mu.Unlock()
		}
	})
	return p
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine waits for an output line that satisfies match and returns it;
// the test fails if the process exits without printing one.
func (p *proc) waitLine(what string, match func(string) bool) string {
	p.t.Helper()
	var line string
	eventually.NoError(p.t, "worker "+p.name+" to print "+what, func() error {
		exited := p.hasExited() // before the lines: those read before the exit count
		for _, l := range p.output() {
			if match(l) {
				line = l
				return nil
			}
		}
		if exited {
			return eventually.Stop(fmt.Errorf("worker %s exited (%v) without printing it", p.name, p.err))
		}
		return eventually.ErrNotYet
	})
	return line
}

// hasExited reports whether the process has exited (and p.err is set).
func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *proc) waitPrefix(prefix string) string {
	p.t.Helper()
	return p.waitLine(strconv.Quote(prefix), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to worker %s: %v", sig, p.name, err)
	}
}

// wait waits (30s at most) for the process to exit and returns Wait's
// answer.
func (p *proc) wait() error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(30 * time.Second):
		p.t.Fatalf("worker %s did not exit", p.name)
		return nil
	}
}

// stop ends a worker-runtime child gracefully and checks it exited cleanly.
func (p *proc) stop() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		p.t.Errorf("worker %s exited with %v", p.name, err)
	}
}

func (p *proc) printed(prefix string) []string {
	var out []string
	for _, l := range p.output() {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func (f *stallScenario) ledgerLines() []string {
	f.t.Helper()
	b, err := os.ReadFile(f.ledger)
	if err != nil && !os.IsNotExist(err) {
		f.t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// openGate lets gated handlers finish their work.
func (f *stallScenario) openGate() {
	f.t.Helper()
	if err := os.WriteFile(f.gate, nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// stallA runs the first half of the scenario: A (in modeA, gated) leases the task
// and starts its work; it is then stopped (SIGSTOP) until the server has
// expired its lease.
func (f *stallScenario) stallA(id, modeA string) *proc {
	a := f.start("A", modeA, true)
	a.waitPrefix(fmt.Sprintf("handler %s 1", id))
	a.signal(syscall.SIGSTOP)
	waitFor(f.t, f.c, id, "attempt 1 aborted by expiry", func(task *client.Task) bool {
		ex := task.Executions
		return len(ex) >= 1 && ex[0].Status == client.ExecutionStatusAborted
	})
	return a
}

// takeOver runs a new scenario up to the takeover: a task, A stalled on
// it (stallA, in modeA), and B started in modeB.
func takeOver(t *testing.T, modeA, modeB string) (f *stallScenario, id string, a, b *proc) {
	t.Helper()
	f = newStallScenario(t)
	id = f.submit()
	a = f.stallA(id, modeA)
	return f, id, a, f.start("B", modeB, false)
}

// resume lets the stalled A go on: its work's gate opens and it gets
// SIGCONT.
func (f *stallScenario) resume(a *proc) {
	f.t.Helper()
	f.openGate()
	a.signal(syscall.SIGCONT)
}

func ledgerLine(id string, attempt int, p *proc) string {
	return fmt.Sprintf("%s %d %d", id, attempt, p.pid())
}

func (f *stallScenario) checkLedger(want ...string) {
	f.t.Helper()
	got := f.ledgerLines()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		f.t.Errorf("effects ledger:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestStalledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}

	// The worker runtime: after A resumes, it either notices locally that
	// its lease is gone, or commits and is refused. Either way it applies
	// no effect: the ledger has B's line only.
	t.Run("boundary/worker-runtime", func(t *testing.T) {
		t.Parallel()
		f, id, a, b := takeOver(t, "worker", "worker")
		task := waitState(t, f.c, id, client.TaskStateCompleted)
		b.waitPrefix(fmt.Sprintf("effect %s 2", id))
		f.resume(a)
		outcome := a.waitLine("the runtime's verdict on its stale attempt", func(l string) bool {
			return strings.Contains(l, `msg="lease lost while the handler ran`) || strings.Contains(l, `msg="commit refused`) ||
				strings.HasPrefix(l, "effect ")
		})
		t.Logf("A after resuming: %s", outcome)
		a.stop()
		b.stop()
		f.checkLedger(ledgerLine(id, 2, b))
		if got := a.printed("effect "); len(got) != 0 {
			t.Errorf("A applied effects %v after losing its lease", got)
		}
		if want := fmt.Sprintf("result-from-%d", b.pid()); string(task.Result) != want {
			t.Errorf("task result %q, want %q (B's)", task.Result, want)
		}
	})

	// The same stall with the SDK by hand: A's Commit itself is refused,
	// because B's attempt committed first; A applies no effect.
	t.Run("boundary/sdk-commit-refused", func(t *testing.T) {
		t.Parallel()
		f, id, a, b := takeOver(t, "sdk-boundary", "worker")
		waitState(t, f.c, id, client.TaskStateCompleted)
		b.waitPrefix(fmt.Sprintf("effect %s 2", id))
		f.resume(a)
		answer := a.waitPrefix("commit ")
		if err := a.wait(); err != nil {
			t.Errorf("A exited with %v", err)
		}
		b.stop()
		if answer != "commit ALREADY_COMMITTED" && answer != "commit LEASE_LOST" {
			t.Errorf("A's stale Commit answered %q; want it refused (ALREADY_COMMITTED or LEASE_LOST)", answer)
		}
		f.checkLedger(ledgerLine(id, 2, b))
	})

	// Baseline: the same scenario without the commit boundary reproduces
	// the duplicate execution: A and B both apply the effect.
	t.Run("baseline/naive-double-applies", func(t *testing.T) {
		t.Parallel()
		f, id, a, b := takeOver(t, "naive", "naive")
		if err := b.wait(); err != nil {
			t.Fatalf("B exited with %v", err)
		}
		if got := b.printed("complete "); len(got) != 1 || got[0] != "complete ok" {
			t.Errorf("B's Complete answered %v, want ok", got)
		}
		waitState(t, f.c, id, client.TaskStateCompleted)
		f.resume(a)
		if err := a.wait(); err != nil {
			t.Fatalf("A exited with %v", err)
		}
		if got := a.printed("complete "); len(got) != 1 || got[0] == "complete ok" {
			t.Errorf("A's stale Complete answered %v; want it refused", got)
		}
		// Two effects for one task: the duplicate the boundary prevents.
		f.checkLedger(ledgerLine(id, 2, b), ledgerLine(id, 1, a))
	})

	// Crash after commit: A commits and is killed before its effect; B gets
	// a finalisation lease, applies the effect once (with A's committed
	// result and fencing token) and completes, without running the work.
	t.Run("crash-after-commit", func(t *testing.T) {
		t.Parallel()
		f := newStallScenario(t)
		id := f.submit()
		a := f.start("A", "commit-hang", false)
		a.waitPrefix(fmt.Sprintf("committed %s 1", id))
		a.signal(syscall.SIGKILL)
		a.wait()
		if task, err := f.c.GetTask(t.Context(), client.GetTaskRequest{TaskID: id}); err != nil || task.State != client.TaskStateCommitted {
			t.Fatalf("after A's crash: %v, %v; want COMMITTED", task, err)
		}
		b := f.start("B", "worker", false)
		task := waitState(t, f.c, id, client.TaskStateCompleted)
		b.waitPrefix(fmt.Sprintf("effect %s 1", id))
		b.stop()
		f.checkLedger(ledgerLine(id, 1, b))
		if got := b.printed("handler "); len(got) != 0 {
			t.Errorf("B ran the handler (%v) on a committed task", got)
		}
		if got := a.printed("handler "); len(got) != 1 {
			t.Errorf("A ran the handler %d times, want 1", len(got))
		}
		if want := fmt.Sprintf("result-from-%d", a.pid()); string(task.Result) != want {
			t.Errorf("task result %q, want A's committed %q", task.Result, want)
		}
	})
}
