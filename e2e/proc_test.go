package e2e

// Starting the binary: every server, cluster node and CLI command of the
// tests goes through the helpers of this file, and every wait through
// internal/eventually.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/logbuf"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// Bounds of a call and of a process's exit. They only stop a hung test;
// nothing asserts how fast anything happens.
const (
	e2eExitTimeout = 30 * time.Second
	e2eCallTimeout = 10 * time.Second
)

// serverProc is one running process of the binary that serves: `tenure
// server`, alone or as a cluster node.
type serverProc struct {
	addr    string
	cmd     *exec.Cmd
	out     *logbuf.Buffer // stdout and stderr
	done    chan struct{}  // closed once the process exited and was reaped
	waitErr error          // valid after done
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

// spawn starts the binary with args, its output collected, without
// waiting for it to serve; addr is where clients reach it, name names it
// in messages. Cleanup kills it if it still runs (a stopped one too) and,
// if the test failed, logs its output: the last lines, the whole of it
// saved to a file kept in the temp dir.
func spawn(t *testing.T, name, addr string, args []string) *serverProc {
	t.Helper()
	p := &serverProc{addr: addr, out: new(logbuf.Buffer), done: make(chan struct{})}
	p.cmd = exec.Command(tenureBin, args...)
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
			logOutput(t, name, p)
		}
	})
	return p
}

// logOutput logs the output of a process of a failed test: whole if it is
// short, else its last lines, the whole saved to a file.
func logOutput(t *testing.T, name string, p *serverProc) {
	const tail = 60
	out := p.out.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) <= tail {
		t.Logf("output of %s (pid %d, %s):\n%s", name, p.cmd.Process.Pid, p.addr, out)
		return
	}
	file := filepath.Join(os.TempDir(), fmt.Sprintf("%s-%s-pid%d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, p.cmd.Process.Pid))
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		file = "(not saved: " + err.Error() + ")"
	}
	t.Logf("%s (pid %d, %s): whole output in %s; its last %d lines:\n%s",
		name, p.cmd.Process.Pid, p.addr, file, tail, strings.Join(lines[len(lines)-tail:], "\n"))
}

// launch is how to start one process that serves.
type launch struct {
	name string // in messages: "server", a node's id
	// addr is where it listens; "" picks a free loopback port, and another
	// if that one was taken before the process bound it.
	addr string
	// args are its arguments for its address (host:port).
	args func(addr string) []string
	// clientTLS is how clients reach it (nil: plain HTTP).
	clientTLS *tls.Config
	// serving is what it prints, followed by its URL, once it listens:
	// "tenure serving on " by default.
	serving string
}

// start runs l and waits until it serves: /readyz answers 200 and it
// printed that it serves.
func start(t *testing.T, l launch) *serverProc {
	t.Helper()
	for try := 0; ; try++ {
		addr := l.addr
		if addr == "" {
			addr = freeLoopbackAddr(t)
		}
		p := spawn(t, l.name, addr, l.args(addr))
		p.clientTLS = l.clientTLS
		err := waitReady(p)
		if err == nil {
			serving := l.serving
			if serving == "" {
				serving = "tenure serving on "
			}
			// os/exec copies the process's output in a goroutine that may
			// lag behind /readyz.
			waitOutput(t, p, serving+p.url(), 1)
			return p
		}
		if l.addr == "" && try < 3 && p.exited() && strings.Contains(p.out.String(), "address already in use") {
			continue
		}
		t.Fatalf("%s on %s did not become ready: %v", l.name, addr, err)
	}
}

// serverArgs are the arguments of `tenure server` on dataDir, listening on
// addr, with extra flags.
func serverArgs(dataDir, addr string, extra []string) []string {
	return append([]string{"server", "--data-dir", dataDir, "--listen", addr, "--fsync", "always"}, extra...)
}

// startServerProc starts `tenure server` on dataDir, with extra flags, and
// waits until it serves (it has replayed its WAL).
func startServerProc(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	return startServerProcTLS(t, dataDir, nil, extra...)
}

// startServerProcTLS is startServerProc for a server that clients reach
// with clientTLS (nil: plain HTTP).
func startServerProcTLS(t *testing.T, dataDir string, clientTLS *tls.Config, extra ...string) *serverProc {
	t.Helper()
	return start(t, launch{name: "server", clientTLS: clientTLS, args: func(addr string) []string { return serverArgs(dataDir, addr, extra) }})
}

// waitReady waits until /readyz of p answers 200; it returns why not if p
// exits first or the wait ends.
func waitReady(p *serverProc) error {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: p.clientTLS.Clone()}}
	defer hc.CloseIdleConnections()
	return eventually.Wait(func() error {
		if p.exited() {
			return eventually.Stop(fmt.Errorf("process exited: %v", p.waitErr))
		}
		resp, err := hc.Get(p.url() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})
}

// waitOutput waits until p's output holds want n times: os/exec copies it
// in a goroutine that may lag.
func waitOutput(t *testing.T, p *serverProc, want string, n int) {
	t.Helper()
	eventually.True(t, fmt.Sprintf("the process on %s to print %q %d times", p.addr, want, n), func() bool {
		return strings.Count(p.out.String(), want) >= n
	})
}

// waitProcExit waits (bounded) for the process to end and returns its exit
// code.
func waitProcExit(t *testing.T, p *serverProc) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(e2eExitTimeout):
		t.Fatalf("the process on %s did not exit within %v", p.addr, e2eExitTimeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop ends a server with SIGTERM and waits for it; it must exit 0.
func stop(t *testing.T, p *serverProc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := waitProcExit(t, p); code != 0 {
		t.Errorf("server exited %d after SIGTERM:\n%s", code, p.out.String())
	}
}

func (p *serverProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	waitProcExit(t, p)
}

// execTenure runs the binary with args to its end (bounded), with env
// added to the test's environment, its output to stdout and stderr; it
// returns the exit code.
func execTenure(t *testing.T, env []string, stdout, stderr io.Writer, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eExitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tenureBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("tenure %s did not exit within %v", strings.Join(args, " "), e2eExitTimeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("tenure %s: %v", strings.Join(args, " "), err)
	}
	return 0
}

// runBin runs the binary to its end (bounded) and returns its exit code and
// combined output.
func runBin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out logbuf.Buffer
	code := execTenure(t, nil, &out, &out, args...)
	return code, out.String()
}

// cliEnv runs one tenure command line, with env added to the test's
// environment, and returns its exit code and output.
func cliEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execTenure(t, env, &out, &errb, args...)
	return code, out.String(), errb.String()
}

// cli runs one tenure command line and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliEnv(t, nil, args...)
}

// mustCLI runs one tenure command line, which must exit 0, and returns its
// stdout.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := cli(t, args...)
	if code != 0 {
		t.Fatalf("tenure %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// httpGet makes a GET of url with hc, with token as its bearer token
// unless it is "", and returns the answer's status and body.
func httpGet(ctx context.Context, hc *http.Client, url, token string) (code int, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// sdk is a client of the SDK for the server at addr.
func sdk(t *testing.T, addr string) *client.Client {
	t.Helper()
	return sdkWith(t, addr, client.Options{})
}

// sdkWith is a client of the SDK, with opts, for the server at addr.
func sdkWith(t *testing.T, addr string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sdkEach is a client of the SDK, with opts, for each of servers (nodes
// of a cluster, server processes).
func sdkEach[S interface{ url() string }](t *testing.T, servers []S, opts client.Options) []*client.Client {
	t.Helper()
	cs := make([]*client.Client, len(servers))
	for i, s := range servers {
		cs[i] = sdkWith(t, s.url(), opts)
	}
	return cs
}

// apiClients talks to one server over one protocol.
type apiClients struct {
	proto  string
	hc     *http.Client
	tasks  tenurev1connect.TaskServiceClient
	worker tenurev1connect.WorkerServiceClient
	queues tenurev1connect.QueueServiceClient
}

// newJSONClients use the Connect protocol with JSON bodies over HTTP/1.1;
// they are closed when the test ends.
func newJSONClients(t *testing.T, p *serverProc) *apiClients {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: p.clientTLS.Clone()}}
	return newAPIClients(t, p, "json", hc, connect.WithProtoJSON())
}

// newGRPCClients use gRPC (binary protobuf) over unencrypted HTTP/2; they
// are closed when the test ends.
func newGRPCClients(t *testing.T, p *serverProc) *apiClients {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return newAPIClients(t, p, "grpc", &http.Client{Transport: &http.Transport{Protocols: &protos}}, connect.WithGRPC())
}

// newAPIClients are the clients of p's services over hc with opt, closed
// when the test ends.
func newAPIClients(t *testing.T, p *serverProc, proto string, hc *http.Client, opt connect.ClientOption) *apiClients {
	c := &apiClients{
		proto:  proto,
		hc:     hc,
		tasks:  tenurev1connect.NewTaskServiceClient(hc, p.url(), opt),
		worker: tenurev1connect.NewWorkerServiceClient(hc, p.url(), opt),
		queues: tenurev1connect.NewQueueServiceClient(hc, p.url(), opt),
	}
	t.Cleanup(c.close)
	return c
}

func (c *apiClients) close() { c.hc.CloseIdleConnections() }

// scrape is p's GET /metrics, over TLS as p's clients reach it.
func scrape(t *testing.T, p *serverProc) string {
	t.Helper()
	hc := &http.Client{Timeout: e2eCallTimeout, Transport: &http.Transport{TLSClientConfig: p.clientTLS.Clone()}}
	defer hc.CloseIdleConnections()
	code, body, err := httpGet(t.Context(), hc, p.url()+"/metrics", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s/metrics: %d %v\n%s", p.url(), code, err, body)
	}
	return body
}

// metricValues is the values of metric name in a scrape, one for each of
// its series (whatever their labels).
func metricValues(t *testing.T, scrape, name string) []float64 {
	t.Helper()
	var out []float64
	for line := range strings.Lines(scrape) {
		line = strings.TrimSuffix(line, "\n")
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

// ---- Measurements --------------------------------------------------------

// measurement skips a test that measures rather than checks unless the
// environment variable env is set.
func measurement(t *testing.T, env string) {
	t.Helper()
	if os.Getenv(env) == "" {
		t.Skipf("a measurement, not a test: set %s=1 to run it", env)
	}
}

// envInt is the integer in environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q is not a positive integer", name, v)
	}
	return n
}

// procCPU is the CPU time (user and system) process pid has used.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's name (which may hold spaces, in parens):
	// utime and stime are the 14th and 15th of the line, in clock ticks.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}
