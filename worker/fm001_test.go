package worker_test

// FM_001 (DESIGN.md §3) with real worker processes: worker A leases a task
// and stalls (SIGSTOP) past its lease; worker B leases the same task and
// completes it; A resumes. Without the commit boundary both apply the
// task's effect (the baseline below shows it); with it exactly one does.
// And a worker killed (SIGKILL) between its commit and its effect is
// finalised by another worker without running the work again and with one
// effect.
//
// The workers are this test binary re-executed in a child mode (TestMain
// dispatches on fm001ModeEnv). Each effect is one O_APPEND write of the line
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

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/worker"
)

const (
	fm001ModeEnv   = "TENURE_FM001_MODE"
	fm001URLEnv    = "TENURE_FM001_URL"
	fm001QueueEnv  = "TENURE_FM001_QUEUE"
	fm001LedgerEnv = "TENURE_FM001_LEDGER"
	fm001GateEnv   = "TENURE_FM001_GATE" // optional: the handler waits for this file
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fm001ModeEnv); mode != "" {
		os.Exit(fm001Child(mode))
	}
	os.Exit(m.Run())
}

// fm001Child is the worker process. Modes:
//
//	worker        the worker runtime with an Effects hook (the commit boundary)
//	commit-hang   the worker runtime whose Effects hook hangs: it reports
//	              "committed" and waits to be killed
//	sdk-boundary  one task by hand with the SDK: work, Commit, and only if
//	              the commit won, the effect and Complete
//	naive         one task by hand without the boundary: work, effect,
//	              Complete (errors ignored) — the baseline that shows FM_001
func fm001Child(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	url, queue, ledgerPath, gate := os.Getenv(fm001URLEnv), os.Getenv(fm001QueueEnv), os.Getenv(fm001LedgerEnv), os.Getenv(fm001GateEnv)
	pid := os.Getpid()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) } // one write per line
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fm001 child:", err)
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
	leaseOne := func() (*tenurev1.LeasedTask, error) {
		for ctx.Err() == nil {
			lts, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "fm001-" + strconv.Itoa(pid), Queue: queue, Wait: 10 * time.Second})
			if err != nil {
				return nil, err
			}
			if len(lts) > 0 {
				return lts[0], nil
			}
		}
		return nil, ctx.Err()
	}
	code := func(err error) string {
		if err == nil {
			return "ok"
		}
		return connect.CodeOf(err).String()
	}

	switch mode {
	case "worker", "commit-hang":
		effects := func(ctx context.Context, t *worker.Task, result []byte, tok worker.FencingToken) error {
			return effect(tok.TaskID, tok.Attempt)
		}
		if mode == "commit-hang" {
			effects = func(ctx context.Context, t *worker.Task, result []byte, tok worker.FencingToken) error {
				say("committed %s %d", tok.TaskID, tok.Attempt)
				<-ctx.Done() // the test kills the process here
				return ctx.Err()
			}
		}
		w, err := worker.New(c, queue, func(ctx context.Context, t *worker.Task) ([]byte, error) {
			return work(ctx, t.ID, t.Attempt)
		}, worker.Options{
			WorkerID: "fm001-" + strconv.Itoa(pid),
			Effects:  effects,
			Logger:   slog.New(slog.NewTextHandler(prefixWriter{prefix: "log ", w: os.Stdout}, nil)),
		})
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
		result, err := work(ctx, lt.GetTaskId(), lt.GetAttempt())
		if err != nil {
			return fail(err)
		}
		if mode == "naive" {
			// No commit boundary: the effect goes out whatever the lease's
			// state, then Complete, whose answer changes nothing.
			if err := effect(lt.GetTaskId(), lt.GetAttempt()); err != nil {
				return fail(err)
			}
			err := c.Complete(ctx, lt.GetTaskId(), lt.GetLeaseId(), result)
			say("complete %s", code(err))
			return 0
		}
		tok, err := c.Commit(ctx, lt.GetTaskId(), lt.GetLeaseId(), result)
		say("commit %s", code(err))
		if err != nil {
			return 0 // refused (or unknown): apply no effect
		}
		if err := effect(tok.GetTaskId(), tok.GetAttempt()); err != nil {
			return fail(err)
		}
		if err := c.Complete(ctx, lt.GetTaskId(), lt.GetLeaseId(), nil); err != nil {
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

// fm001 is one scenario: a server, a queue and a ledger.
type fm001 struct {
	t      *testing.T
	url    string
	c      *client.Client
	ledger string
	gate   string
}

func newFM001(t *testing.T) *fm001 {
	url := startServer(t, nil)
	dir := t.TempDir()
	return &fm001{t: t, url: url, c: newClient(t, url), ledger: filepath.Join(dir, "ledger"), gate: filepath.Join(dir, "gate")}
}

const fm001Queue = "fm001"

// submit creates the task: a 500ms window, three attempts, retried at once.
func (f *fm001) submit() string {
	return submit(f.t, f.c, client.SubmitRequest{
		Queue:           fm001Queue,
		Payload:         []byte("charge card 42"),
		ExecutionWindow: 500 * time.Millisecond,
		Retry:           &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	})
}

// start runs a child worker in mode; gated children wait for the gate file
// before finishing their work.
func (f *fm001) start(name, mode string, gated bool) *proc {
	t := f.t
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		fm001ModeEnv+"="+mode,
		fm001URLEnv+"="+f.url,
		fm001QueueEnv+"="+fm001Queue,
		fm001LedgerEnv+"="+f.ledger,
	)
	if gated {
		cmd.Env = append(cmd.Env, fm001GateEnv+"="+f.gate)
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

// waitLine waits (30s at most) for an output line that satisfies match and
// returns it.
func (p *proc) waitLine(what string, match func(string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, l := range p.output() {
			if match(l) {
				return l
			}
		}
		select {
		case <-p.exited:
			for _, l := range p.output() { // lines read before the exit
				if match(l) {
					return l
				}
			}
			p.t.Fatalf("worker %s exited (%v) without printing %s", p.name, p.err, what)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("worker %s: gave up waiting for %s", p.name, what)
		}
		time.Sleep(5 * time.Millisecond)
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

func (f *fm001) ledgerLines() []string {
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
func (f *fm001) openGate() {
	f.t.Helper()
	if err := os.WriteFile(f.gate, nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// stallA runs the first half of FM_001: A (in modeA, gated) leases the task
// and starts its work; it is then stopped (SIGSTOP) until the server has
// expired its lease.
func (f *fm001) stallA(id, modeA string) *proc {
	a := f.start("A", modeA, true)
	a.waitPrefix(fmt.Sprintf("handler %s 1", id))
	a.signal(syscall.SIGSTOP)
	waitFor(f.t, f.c, id, "attempt 1 aborted by expiry", func(task *tenurev1.Task) bool {
		ex := task.GetExecutions()
		return len(ex) >= 1 && ex[0].GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_ABORTED
	})
	return a
}

func ledgerLine(id string, attempt int, p *proc) string {
	return fmt.Sprintf("%s %d %d", id, attempt, p.pid())
}

func (f *fm001) checkLedger(want ...string) {
	f.t.Helper()
	got := f.ledgerLines()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		f.t.Errorf("effects ledger:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestFM001(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}

	// The worker runtime: after A resumes, it either notices locally that
	// its lease is gone, or commits and is refused. Either way it applies
	// no effect: the ledger has B's line only.
	t.Run("boundary/worker-runtime", func(t *testing.T) {
		t.Parallel()
		f := newFM001(t)
		id := f.submit()
		a := f.stallA(id, "worker")
		b := f.start("B", "worker", false)
		task := waitState(t, f.c, id, tenurev1.TaskState_TASK_STATE_COMPLETED)
		b.waitPrefix(fmt.Sprintf("effect %s 2", id))
		f.openGate()
		a.signal(syscall.SIGCONT)
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
		if want := fmt.Sprintf("result-from-%d", b.pid()); string(task.GetResult()) != want {
			t.Errorf("task result %q, want %q (B's)", task.GetResult(), want)
		}
	})

	// The same stall with the SDK by hand: A's Commit itself is refused,
	// because B's attempt committed first; A applies no effect.
	t.Run("boundary/sdk-commit-refused", func(t *testing.T) {
		t.Parallel()
		f := newFM001(t)
		id := f.submit()
		a := f.stallA(id, "sdk-boundary")
		b := f.start("B", "worker", false)
		waitState(t, f.c, id, tenurev1.TaskState_TASK_STATE_COMPLETED)
		b.waitPrefix(fmt.Sprintf("effect %s 2", id))
		f.openGate()
		a.signal(syscall.SIGCONT)
		answer := a.waitPrefix("commit ")
		if err := a.wait(); err != nil {
			t.Errorf("A exited with %v", err)
		}
		b.stop()
		if answer != "commit already_exists" && answer != "commit failed_precondition" {
			t.Errorf("A's stale Commit answered %q; want it refused (already_exists or failed_precondition)", answer)
		}
		f.checkLedger(ledgerLine(id, 2, b))
	})

	// Baseline: the same scenario without the commit boundary reproduces
	// FM_001: A and B both apply the effect.
	t.Run("baseline/naive-double-applies", func(t *testing.T) {
		t.Parallel()
		f := newFM001(t)
		id := f.submit()
		a := f.stallA(id, "naive")
		b := f.start("B", "naive", false)
		if err := b.wait(); err != nil {
			t.Fatalf("B exited with %v", err)
		}
		if got := b.printed("complete "); len(got) != 1 || got[0] != "complete ok" {
			t.Errorf("B's Complete answered %v, want ok", got)
		}
		waitState(t, f.c, id, tenurev1.TaskState_TASK_STATE_COMPLETED)
		f.openGate()
		a.signal(syscall.SIGCONT)
		if err := a.wait(); err != nil {
			t.Fatalf("A exited with %v", err)
		}
		if got := a.printed("complete "); len(got) != 1 || got[0] == "complete ok" {
			t.Errorf("A's stale Complete answered %v; want it refused", got)
		}
		// Two effects for one task: the duplicate FM_001 describes.
		f.checkLedger(ledgerLine(id, 2, b), ledgerLine(id, 1, a))
	})

	// Crash after commit: A commits and is killed before its effect; B gets
	// a finalisation lease, applies the effect once (with A's committed
	// result and fencing token) and completes, without running the work.
	t.Run("crash-after-commit", func(t *testing.T) {
		t.Parallel()
		f := newFM001(t)
		id := f.submit()
		a := f.start("A", "commit-hang", false)
		a.waitPrefix(fmt.Sprintf("committed %s 1", id))
		a.signal(syscall.SIGKILL)
		a.wait()
		if task, err := f.c.GetTask(t.Context(), id); err != nil || task.GetState() != tenurev1.TaskState_TASK_STATE_COMMITTED {
			t.Fatalf("after A's crash: %v, %v; want COMMITTED", task, err)
		}
		b := f.start("B", "worker", false)
		task := waitState(t, f.c, id, tenurev1.TaskState_TASK_STATE_COMPLETED)
		b.waitPrefix(fmt.Sprintf("effect %s 1", id))
		b.stop()
		f.checkLedger(ledgerLine(id, 1, b))
		if got := b.printed("handler "); len(got) != 0 {
			t.Errorf("B ran the handler (%v) on a committed task", got)
		}
		if got := a.printed("handler "); len(got) != 1 {
			t.Errorf("A ran the handler %d times, want 1", len(got))
		}
		if want := fmt.Sprintf("result-from-%d", a.pid()); string(task.GetResult()) != want {
			t.Errorf("task result %q, want A's committed %q", task.GetResult(), want)
		}
	})
}
