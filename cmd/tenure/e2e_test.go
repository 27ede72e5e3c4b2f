package main

// End-to-end tests of the real binary: build it once, run it as a process,
// talk to it over HTTP/JSON and gRPC, kill -9 it under load, restart it on
// the same data directory and check that nothing acknowledged was lost.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// tenureBin is the binary TestMain built.
var tenureBin string

// afterTests run after every test, before the binary exits (they stop
// what tests shared, such as the Galera cluster).
var afterTests []func()

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	tenureBin = filepath.Join(dir, "tenure")
	build := exec.Command("go", "build", "-o", tenureBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build failed: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Bounds of the polls below. They only stop a hung test; nothing asserts
// how fast anything happens.
const (
	e2eStartTimeout = 30 * time.Second
	e2eExitTimeout  = 30 * time.Second
	e2eCallTimeout  = 10 * time.Second
)

// lockedBuffer collects a process's output; exec's copying goroutines write
// while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serverProc is one running `tenure server`.
type serverProc struct {
	addr    string
	dataDir string
	cmd     *exec.Cmd
	out     *lockedBuffer // stdout and stderr
	done    chan struct{} // closed once the process exited and was reaped
	waitErr error         // valid after done
	// clientTLS, if set, is how a client reaches the server over TLS
	// (https://). A transport changes the configuration it is given:
	// give each a Clone.
	clientTLS *tls.Config
}

func (p *serverProc) url() string {
	if p.clientTLS != nil {
		return "https://" + p.addr
	}
	return "http://" + p.addr
}

func (p *serverProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freeLoopbackAddr returns a loopback address with a port that was free a moment
// ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("picking a free port: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// spawnServerTLS starts `tenure server` on dataDir and a free port, with extra
// flags, without waiting for it to serve. Cleanup kills it if it still runs.
// Clients reach it with clientTLS (nil: plain HTTP).
func spawnServerTLS(t *testing.T, dataDir string, clientTLS *tls.Config, extra ...string) *serverProc {
	t.Helper()
	return spawnServerOn(t, "127.0.0.1", dataDir, clientTLS, extra...)
}

// spawnServerOn is spawnServerTLS listening on host (the port is free on
// loopback, where the test reaches it).
func spawnServerOn(t *testing.T, host, dataDir string, clientTLS *tls.Config, extra ...string) *serverProc {
	t.Helper()
	p := &serverProc{addr: freeLoopbackAddr(t), dataDir: dataDir, out: new(lockedBuffer), done: make(chan struct{}), clientTLS: clientTLS}
	_, port, _ := net.SplitHostPort(p.addr)
	p.cmd = exec.Command(tenureBin, append([]string{"server", "--data-dir", dataDir, "--listen", net.JoinHostPort(host, port), "--fsync", "always"}, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", tenureBin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			p.cmd.Process.Kill()
		}
		<-p.done
		if t.Failed() {
			t.Logf("output of the server on %s:\n%s", p.addr, p.out.String())
		}
	})
	return p
}

// startServerProc starts a server on dataDir, with extra flags, and waits
// until /readyz answers 200 (it has replayed its WAL). A port taken between picking and binding is
// retried on another.
func startServerProc(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	return startServerProcTLS(t, dataDir, nil, extra...)
}

// startServerProcTLS is startServerProc for a server that clients reach
// with clientTLS (nil: plain HTTP).
func startServerProcTLS(t *testing.T, dataDir string, clientTLS *tls.Config, extra ...string) *serverProc {
	t.Helper()
	for try := 0; ; try++ {
		p := spawnServerTLS(t, dataDir, clientTLS, extra...)
		err := waitReady(p)
		if err == nil {
			// os/exec copies the child's stdout in a goroutine that may
			// lag behind /readyz: wait (bounded) for the line to arrive.
			want := "tenure serving on " + p.url()
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.out.String(), want) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			if !strings.Contains(p.out.String(), want) {
				t.Fatalf("server is ready but did not print %q; output:\n%s", "tenure serving on "+p.url(), p.out.String())
			}
			return p
		}
		if try < 3 && p.exited() && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		t.Fatalf("server on %s did not become ready: %v\noutput:\n%s", p.addr, err, p.out.String())
	}
}

func waitReady(p *serverProc) error {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: p.clientTLS.Clone()}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(e2eStartTimeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("process exited: %v", p.waitErr)
		}
		resp, err := hc.Get(p.url() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from /readyz within %v", e2eStartTimeout)
}

// waitProcExit waits (bounded) for the process to end and returns its exit
// code.
func waitProcExit(t *testing.T, p *serverProc) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(e2eExitTimeout):
		t.Fatalf("server on %s did not exit within %v", p.addr, e2eExitTimeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *serverProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	waitProcExit(t, p)
}

// apiClients talks to one server over one protocol.
type apiClients struct {
	proto  string
	hc     *http.Client
	tasks  tenurev1connect.TaskServiceClient
	worker tenurev1connect.WorkerServiceClient
	queues tenurev1connect.QueueServiceClient
}

// newJSONClients use the Connect protocol with JSON bodies over HTTP/1.1.
func newJSONClients(p *serverProc) *apiClients {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: p.clientTLS.Clone()}}
	return &apiClients{
		proto:  "json",
		hc:     hc,
		tasks:  tenurev1connect.NewTaskServiceClient(hc, p.url(), connect.WithProtoJSON()),
		worker: tenurev1connect.NewWorkerServiceClient(hc, p.url(), connect.WithProtoJSON()),
		queues: tenurev1connect.NewQueueServiceClient(hc, p.url(), connect.WithProtoJSON()),
	}
}

// newGRPCClients use gRPC (binary protobuf) over unencrypted HTTP/2.
func newGRPCClients(p *serverProc) *apiClients {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	return &apiClients{
		proto:  "grpc",
		hc:     hc,
		tasks:  tenurev1connect.NewTaskServiceClient(hc, p.url(), connect.WithGRPC()),
		worker: tenurev1connect.NewWorkerServiceClient(hc, p.url(), connect.WithGRPC()),
		queues: tenurev1connect.NewQueueServiceClient(hc, p.url(), connect.WithGRPC()),
	}
}

func (c *apiClients) close() { c.hc.CloseIdleConnections() }

// listAllTasks pages through every task of a namespace.
func listAllTasks(t *testing.T, c *apiClients, namespace string) []*tenurev1.Task {
	t.Helper()
	var out []*tenurev1.Task
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatalf("ListTasks did not end after %d pages", page)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: namespace, PageSize: 1000, PageToken: token}))
		cancel()
		if err != nil {
			t.Fatalf("ListTasks(page %d): %v", page, err)
		}
		for _, task := range resp.Msg.GetTasks() {
			if seen[task.GetTaskId()] {
				t.Errorf("ListTasks returned task %s twice", task.GetTaskId())
			}
			seen[task.GetTaskId()] = true
			out = append(out, task)
		}
		token = resp.Msg.GetNextPageToken()
		if token == "" {
			return out
		}
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	c := newJSONClients(srv)
	defer c.close()

	// A long-poll on an empty queue is (most likely) in flight when the
	// signal arrives; it must not keep the server from stopping cleanly.
	polled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId: "poller", Namespace: "graceful", Queue: "empty", Wait: durationpb.New(25 * time.Second),
		}))
		polled <- err
	}()

	want := map[string][]byte{}
	for i := range 5 {
		payload := []byte(fmt.Sprintf("graceful-%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Namespace: "graceful", Queue: "q", Payload: payload}))
		cancel()
		if err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
		want[resp.Msg.GetTask().GetTaskId()] = payload
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := waitProcExit(t, srv); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0; output:\n%s", code, srv.out.String())
	}
	out := srv.out.String()
	if !strings.Contains(out, "stopped cleanly") {
		t.Errorf("log does not say the server stopped cleanly:\n%s", out)
	}
	if strings.Contains(out, "did not finish in time") {
		t.Errorf("the shutdown waited out in-flight requests (a long-poll was not drained):\n%s", out)
	}
	select {
	case <-polled: // an empty answer, or an error if it never reached the server
	case <-time.After(e2eExitTimeout):
		t.Fatal("the long-poll did not return after the server exited")
	}

	srv2 := startServerProc(t, dir)
	c2 := newJSONClients(srv2)
	defer c2.close()
	for id, payload := range want {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c2.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		cancel()
		if err != nil {
			t.Errorf("after restart, GetTask(%s): %v", id, err)
			continue
		}
		got := resp.Msg.GetTask()
		if !bytes.Equal(got.GetPayload(), payload) || got.GetState() != tenurev1.TaskState_TASK_STATE_WAITING {
			t.Errorf("after restart, task %s = payload %q state %v, want payload %q WAITING", id, got.GetPayload(), got.GetState(), payload)
		}
	}
	if n := len(listAllTasks(t, c2, "graceful")); n != len(want) {
		t.Errorf("after restart, namespace holds %d tasks, want %d", n, len(want))
	}
}

func TestSecondServerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServerProc(t, dir)

	ctx, cancel := context.WithTimeout(context.Background(), e2eExitTimeout)
	defer cancel()
	second := exec.CommandContext(ctx, tenureBin, "server", "--data-dir", dir, "--listen", freeLoopbackAddr(t), "--fsync", "always")
	out, err := second.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("a second server on the same data dir did not exit within %v; output:\n%s", e2eExitTimeout, out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second server: err = %v, want a non-zero exit; output:\n%s", err, out)
	}
	msg := strings.ToLower(string(out))
	if !strings.Contains(msg, "in use") && !strings.Contains(msg, "lock") {
		t.Errorf("second server's message does not mention the lock or \"in use\":\n%s", out)
	}
	if !strings.Contains(string(out), strconv.Itoa(first.cmd.Process.Pid)) {
		t.Logf("second server's message does not name the holder's pid %d:\n%s", first.cmd.Process.Pid, out)
	}
	if first.exited() {
		t.Fatalf("the first server exited: %v", first.waitErr)
	}
	hc := &http.Client{Timeout: e2eCallTimeout}
	resp, err := hc.Get(first.url() + "/readyz")
	if err != nil {
		t.Fatalf("first server /readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first server /readyz = %d, want 200", resp.StatusCode)
	}
}

// ackLedger is what the server acknowledged, across every round.
type ackLedger struct {
	mu        sync.Mutex
	submitted map[string][]byte // task id → payload
	committed map[string]string // task id → lease whose Commit was acknowledged
	completed map[string]string // task id → lease whose Complete was acknowledged
}

func newAckLedger() *ackLedger {
	return &ackLedger{submitted: map[string][]byte{}, committed: map[string]string{}, completed: map[string]string{}}
}

// loadRound drives one round of submitters and workers against one server.
type loadRound struct {
	t         *testing.T
	led       *ackLedger
	namespace string
	queue     string
	acks      atomic.Int64
	finalised atomic.Int64 // completions of finalisation leases
	target    int64
	reached   chan struct{}
	once      sync.Once

	mu     sync.Mutex
	errors map[string]int // "proto/method/code" → count
}

func (l *loadRound) ack() {
	if l.acks.Add(1) >= l.target {
		l.once.Do(func() { close(l.reached) })
	}
}

// failed notes an error of a call made while the server may be dying. An
// answer that cannot come from a dying server (bad input, a task that went
// missing) fails the test.
func (l *loadRound) failed(ctx context.Context, c *apiClients, method string, err error) {
	if ctx.Err() != nil {
		return
	}
	code := connect.CodeOf(err)
	l.mu.Lock()
	l.errors[c.proto+"/"+method+"/"+code.String()]++
	l.mu.Unlock()
	switch code {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeResourceExhausted:
		l.t.Errorf("%s %s: %v", c.proto, method, err)
	}
	time.Sleep(5 * time.Millisecond) // do not spin against a dead server
}

var e2eRetryPolicy = &tenurev1.RetryPolicy{
	MaxAttempts:    50,
	InitialBackoff: durationpb.New(10 * time.Millisecond),
	MaxBackoff:     durationpb.New(100 * time.Millisecond),
}

func (l *loadRound) submitter(ctx context.Context, c *apiClients, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := 1
		if rng.IntN(5) == 0 {
			n = 1 + rng.IntN(5)
		}
		reqs := make([]*tenurev1.SubmitRequest, n)
		for i := range reqs {
			payload := make([]byte, 8+rng.IntN(56))
			for j := range payload {
				payload[j] = byte(rng.Uint32())
			}
			reqs[i] = &tenurev1.SubmitRequest{
				Namespace:       l.namespace,
				Queue:           l.queue,
				Payload:         payload,
				ExecutionWindow: durationpb.New(time.Second),
				RetryPolicy:     e2eRetryPolicy,
			}
		}
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		if n == 1 {
			resp, err := c.tasks.Submit(callCtx, connect.NewRequest(reqs[0]))
			if err != nil {
				l.failed(ctx, c, "Submit", err)
			} else {
				l.submitted(resp.Msg.GetTask().GetTaskId(), reqs[0].Payload)
			}
		} else {
			resp, err := c.tasks.SubmitBatch(callCtx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs}))
			switch {
			case err != nil:
				l.failed(ctx, c, "SubmitBatch", err)
			case len(resp.Msg.GetTaskIds()) != n:
				l.t.Errorf("%s SubmitBatch of %d answered %d task ids", c.proto, n, len(resp.Msg.GetTaskIds()))
			default:
				for i, id := range resp.Msg.GetTaskIds() {
					l.submitted(id, reqs[i].Payload)
				}
			}
		}
		cancel()
	}
}

func (l *loadRound) submitted(id string, payload []byte) {
	l.led.mu.Lock()
	l.led.submitted[id] = payload
	l.led.mu.Unlock()
	l.ack()
}

func (l *loadRound) worker(ctx context.Context, c *apiClients, name string, rng *rand.Rand) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		resp, err := c.worker.Lease(callCtx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId:  name,
			Namespace: l.namespace,
			Queue:     l.queue,
			MaxTasks:  uint32(1 + rng.IntN(4)),
			Wait:      durationpb.New(200 * time.Millisecond),
		}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Lease", err)
			continue
		}
		for _, lt := range resp.Msg.GetTasks() {
			if ctx.Err() != nil {
				return
			}
			l.work(ctx, c, rng, lt)
		}
	}
}

// work finishes one leased task in one of the ways a worker may.
func (l *loadRound) work(ctx context.Context, c *apiClients, rng *rand.Rand, lt *tenurev1.LeasedTask) {
	id, lease := lt.GetTaskId(), lt.GetLeaseId()
	if lt.GetCommitted() {
		// Finalisation: an earlier attempt committed; complete without
		// committing again.
		l.led.mu.Lock()
		by, ok := l.led.committed[id]
		l.led.mu.Unlock()
		if ok && !bytes.Equal(lt.GetCommittedResult(), []byte("r:"+by)) {
			l.t.Errorf("finalisation lease of task %s carries committed result %q, want %q", id, lt.GetCommittedResult(), "r:"+by)
		}
		if l.complete(ctx, c, id, lease, nil) {
			l.finalised.Add(1)
		}
		return
	}
	switch r := rng.IntN(100); {
	case r < 10:
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		_, err := c.worker.Heartbeat(callCtx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lease}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Heartbeat", err)
			return
		}
		l.complete(ctx, c, id, lease, []byte("c:"+lease))
	case r < 50:
		l.complete(ctx, c, id, lease, []byte("c:"+lease))
	case r < 95:
		if !l.commit(ctx, c, id, lease) {
			return
		}
		if r < 85 { // else: "crash" after the commit; the task comes back to be finalised
			l.complete(ctx, c, id, lease, []byte("ignored"))
		}
	default:
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		_, err := c.worker.Fail(callCtx, connect.NewRequest(&tenurev1.FailRequest{TaskId: id, LeaseId: lease, Reason: "e2e: transient"}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Fail", err)
		}
	}
}

func (l *loadRound) commit(ctx context.Context, c *apiClients, id, lease string) bool {
	callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	defer cancel()
	resp, err := c.worker.Commit(callCtx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: lease, Result: []byte("r:" + lease)}))
	if err != nil {
		l.failed(ctx, c, "Commit", err)
		return false
	}
	if tok := resp.Msg.GetFencingToken(); tok.GetTaskId() != id || tok.GetAttempt() == 0 {
		l.t.Errorf("Commit of task %s answered fencing token %v", id, tok)
	}
	l.led.mu.Lock()
	if prev, ok := l.led.committed[id]; ok && prev != lease {
		l.t.Errorf("task %s: commits by lease %s and by lease %s were both acknowledged", id, prev, lease)
	}
	l.led.committed[id] = lease
	l.led.mu.Unlock()
	l.ack()
	return true
}

func (l *loadRound) complete(ctx context.Context, c *apiClients, id, lease string, result []byte) bool {
	callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	defer cancel()
	if _, err := c.worker.Complete(callCtx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: lease, Result: result})); err != nil {
		l.failed(ctx, c, "Complete", err)
		return false
	}
	l.led.mu.Lock()
	if prev, ok := l.led.completed[id]; ok && prev != lease {
		l.t.Errorf("task %s: completions by lease %s and by lease %s were both acknowledged", id, prev, lease)
	}
	l.led.completed[id] = lease
	l.led.mu.Unlock()
	l.ack()
	return true
}

// e2eSeed is TENURE_E2E_SEED if set, else fresh.
func e2eSeed(t *testing.T) uint64 {
	if s := os.Getenv("TENURE_E2E_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_E2E_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func TestKill9UnderLoad(t *testing.T) {
	t.Parallel()
	const (
		rounds    = 3
		namespace = "e2e"
		queue     = "load"
		// Bounds the load of a round if the server is slower than the
		// target assumes; not an assertion.
		maxRound = 8 * time.Second
	)
	seed := e2eSeed(t)
	t.Logf("seed %d (rerun with TENURE_E2E_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	led := newAckLedger()

	for round := 1; round <= rounds; round++ {
		srv := startServerProc(t, dir)
		if round > 1 {
			verifyAcks(t, srv, led, namespace)
		}
		l := &loadRound{
			t: t, led: led, namespace: namespace, queue: queue,
			target:  int64(300 + rng.IntN(2701)),
			reached: make(chan struct{}),
			errors:  map[string]int{},
		}
		js, gs := newJSONClients(srv), newGRPCClients(srv)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, c := range []*apiClients{js, gs, js, gs} {
			r := rand.New(rand.NewPCG(seed, uint64(round*100+i)))
			wg.Go(func() { l.submitter(ctx, c, r) })
		}
		for i, c := range []*apiClients{js, gs, js, gs} {
			r := rand.New(rand.NewPCG(seed, uint64(round*100+50+i)))
			name := fmt.Sprintf("w%d-%s-%d", round, c.proto, i)
			wg.Go(func() { l.worker(ctx, c, name, r) })
		}
		timer := time.NewTimer(maxRound)
		select {
		case <-l.reached:
		case <-timer.C:
			t.Logf("round %d: target of %d acknowledgements not reached in %v; killing at %d", round, l.target, maxRound, l.acks.Load())
		case <-srv.done:
			t.Fatalf("round %d: the server exited under load: %v", round, srv.waitErr)
		}
		timer.Stop()
		killedAt := l.acks.Load()
		srv.kill9(t) // while the load runs
		cancel()
		wg.Wait()
		js.close()
		gs.close()
		led.mu.Lock()
		t.Logf("round %d: killed -9 after %d acknowledgements (target %d; %d by the time the load stopped; %d finalisations); totals: %d submitted, %d committed, %d completed; errors while dying: %v",
			round, killedAt, l.target, l.acks.Load(), l.finalised.Load(), len(led.submitted), len(led.committed), len(led.completed), l.errors)
		led.mu.Unlock()
		if t.Failed() {
			return
		}
	}
	srv := startServerProc(t, dir)
	verifyAcks(t, srv, led, namespace)
}

// verifyAcks checks every acknowledgement of led against the restarted server,
// and every task's state against its executions.
func verifyAcks(t *testing.T, srv *serverProc, led *ackLedger, namespace string) {
	t.Helper()
	c := newJSONClients(srv)
	defer c.close()
	tasks := listAllTasks(t, c, namespace)
	byID := make(map[string]*tenurev1.Task, len(tasks))
	for _, task := range tasks {
		byID[task.GetTaskId()] = task
		checkTaskConsistent(t, task)
	}

	led.mu.Lock()
	defer led.mu.Unlock()
	lost := 0
	for id, payload := range led.submitted {
		task := byID[id]
		if task == nil {
			if lost++; lost <= 10 {
				t.Errorf("acknowledged submit of task %s is lost", id)
			}
			continue
		}
		if !bytes.Equal(task.GetPayload(), payload) {
			t.Errorf("task %s: payload %x, want %x", id, task.GetPayload(), payload)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged submits are lost", lost, len(led.submitted))
	}
	for id, lease := range led.committed {
		task := byID[id]
		if task == nil {
			t.Errorf("task %s with an acknowledged commit is missing", id)
			continue
		}
		st := task.GetState()
		if st != tenurev1.TaskState_TASK_STATE_COMMITTED && st != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Errorf("task %s: commit by lease %s was acknowledged, but the task is %v", id, lease, st)
		}
		e := executionOf(task, lease)
		switch {
		case e == nil:
			t.Errorf("task %s: commit by lease %s was acknowledged, but no execution has that lease", id, lease)
		case e.GetCommittedAt() == nil:
			t.Errorf("task %s: commit by lease %s was acknowledged, but its execution has no committed_at (status %v)", id, lease, e.GetStatus())
		}
		if !bytes.Equal(task.GetResult(), []byte("r:"+lease)) {
			t.Errorf("task %s: result %q, want the committed %q", id, task.GetResult(), "r:"+lease)
		}
	}
	for id, lease := range led.completed {
		task := byID[id]
		if task == nil {
			t.Errorf("task %s with an acknowledged completion is missing", id)
			continue
		}
		if st := task.GetState(); st != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Errorf("task %s: completion by lease %s was acknowledged, but the task is %v", id, lease, st)
		}
		if e := executionOf(task, lease); e == nil || e.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
			t.Errorf("task %s: completion by lease %s was acknowledged, but its execution is %v", id, lease, e)
		}
	}
	counts := map[tenurev1.TaskState]int{}
	for _, task := range tasks {
		counts[task.GetState()]++
	}
	t.Logf("after restart: %d tasks %v; acknowledged: %d submits, %d commits, %d completions",
		len(tasks), counts, len(led.submitted), len(led.committed), len(led.completed))
}

func executionOf(task *tenurev1.Task, lease string) *tenurev1.Execution {
	for _, e := range task.GetExecutions() {
		if e.GetLeaseId() == lease {
			return e
		}
	}
	return nil
}

// checkTaskConsistent checks that a task's state is one of the enum's and agrees with
// its executions.
func checkTaskConsistent(t *testing.T, task *tenurev1.Task) {
	t.Helper()
	id, st := task.GetTaskId(), task.GetState()
	bad := func(format string, args ...any) {
		t.Errorf("task %s (%v): %s", id, st, fmt.Sprintf(format, args...))
	}
	execs := task.GetExecutions()
	if int(task.GetAttempt()) != len(execs) {
		bad("attempt %d but %d executions", task.GetAttempt(), len(execs))
	}
	var committed *tenurev1.Execution
	commits := 0
	for i, e := range execs {
		if e.GetAttempt() != uint32(i+1) {
			bad("execution %d has attempt %d", i, e.GetAttempt())
		}
		if e.GetLeaseId() == "" {
			bad("execution %d has no lease id", i)
		}
		if _, ok := tenurev1.ExecutionStatus_name[int32(e.GetStatus())]; !ok || e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
			bad("execution %d has status %v", i, e.GetStatus())
		}
		running := e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_LEASED || e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_IN_PROGRESS
		if running && (i != len(execs)-1 || task.GetLeaseId() != e.GetLeaseId()) {
			bad("execution %d is %v without holding the task's lease", i, e.GetStatus())
		}
		if e.GetCommittedAt() != nil {
			commits++
			committed = e
			if s := e.GetStatus(); s != tenurev1.ExecutionStatus_EXECUTION_STATUS_COMMITTED && s != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
				bad("execution %d committed but is %v", i, s)
			}
		}
	}
	if commits > 1 {
		bad("%d executions have committed_at; at most one may", commits)
	}
	if committed != nil {
		lease := committed.GetLeaseId()
		if r := string(task.GetResult()); r != "r:"+lease && r != "c:"+lease {
			bad("result %q is not the one lease %s committed", r, lease)
		}
	}
	var last *tenurev1.Execution
	if len(execs) > 0 {
		last = execs[len(execs)-1]
	}
	hasLease := task.GetLeaseId() != ""
	if hasLease && (last == nil || last.GetLeaseId() != task.GetLeaseId()) {
		bad("lease %s is not its latest execution's", task.GetLeaseId())
	}
	if hasLease != (task.GetLeaseExpiry() != nil) {
		bad("lease_id %q but lease_expiry %v", task.GetLeaseId(), task.GetLeaseExpiry())
	}
	switch st {
	case tenurev1.TaskState_TASK_STATE_WAITING, tenurev1.TaskState_TASK_STATE_FAILED:
		if hasLease || commits != 0 {
			bad("lease %q and %d commits; want none", task.GetLeaseId(), commits)
		}
	case tenurev1.TaskState_TASK_STATE_LEASED:
		if !hasLease || commits != 0 {
			bad("lease %q and %d commits; want a lease and no commit", task.GetLeaseId(), commits)
		}
	case tenurev1.TaskState_TASK_STATE_COMMITTED:
		if commits != 1 {
			bad("%d commits, want 1", commits)
		}
	case tenurev1.TaskState_TASK_STATE_COMPLETED:
		if hasLease || commits != 1 {
			bad("lease %q and %d commits; want no lease and 1 commit", task.GetLeaseId(), commits)
		}
		if last == nil || last.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
			bad("latest execution is %v, want DONE", last)
		}
	case tenurev1.TaskState_TASK_STATE_DEAD:
		if hasLease {
			bad("holds lease %q", task.GetLeaseId())
		}
	default:
		bad("not a task state")
	}
}
