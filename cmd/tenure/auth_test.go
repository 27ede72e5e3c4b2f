package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

// TestAuthMatrix: a real `tenure server --auth-file` answers every call
// of the table of who may call what (docs/guides/security.md), under every role, in and out
// of scope, with no token and a wrong one, as the table says; it logs
// each refusal without the token and counts it in /metrics.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.jsonl")
	tok := authtest.TokenFile(t, file)
	p := startServerProc(t, filepath.Join(dir, "data"), "--auth-file", file, "--pprof")
	authtest.Run(t, p.url(), tok)

	out := p.out.String()
	if !strings.Contains(out, `msg="request refused" code=unauthenticated`) || !strings.Contains(out, `code=permission_denied`) ||
		!strings.Contains(out, "token=reader-scoped role=reader") {
		t.Errorf("the server did not log its refusals with the token's name:\n%s", tail(out, 40))
	}
	for _, secret := range append(tokenValues(tok), tok.Setup) {
		if strings.Contains(out, secret) {
			t.Fatalf("the server's log holds a token")
		}
	}
	body := scrapeAs(t, p.url(), tok.Star["reader"])
	for _, reason := range []string{"unauthenticated", "permission_denied"} {
		m := regexp.MustCompile(`tenure_auth_failures_total\{reason="` + reason + `"\} (\d+)`).FindStringSubmatch(body)
		if m == nil || m[1] == "0" {
			t.Errorf("/metrics counts no %s refusal: %v", reason, m)
		}
	}
}

// TestAuthMatrixCluster runs the same matrix against a node of a
// two-node cluster whose partitions are spread over both: the calls about
// tasks and partitions the other node serves are forwarded, signed by the
// node for the caller's token name, and authorised there by the same token
// file.
func TestAuthMatrixCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster e2e: two server processes; skipped with -short")
	}
	dsn := clustertest.NewDatabase(t) // skips without MySQL, fails under CI
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.jsonl")
	tok := authtest.TokenFile(t, file)
	c := &clTest{t: t, dsn: dsn, db: clustertest.Open(t, dsn), hc: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(c.hc.CloseIdleConnections)
	for i := range 2 {
		n := &clNode{id: fmt.Sprintf("n%d", i+1), dsn: dsn, extra: []string{"--auth-file", file, "--pprof"}}
		c.nodes = append(c.nodes, n)
		c.start(n, true)
	}
	authtest.Run(t, c.nodes[0].url(), tok)
	if got := c.nodes[1].proc.out.String(); strings.Contains(got, "refused a request that claims to be forwarded") {
		t.Fatalf("n2 refused n1's forwarded requests:\n%s", tail(got, 20))
	}
	// The matrix went through the other node too.
	body := scrapeAs(t, c.nodes[0].url(), tok.Star["reader"])
	m := regexp.MustCompile(`(?m)^tenure_cluster_forwarded_requests_total\{[^}]*\} (\d+)`).FindAllStringSubmatch(body, -1)
	if len(m) == 0 {
		t.Fatalf("n1 forwarded nothing to n2: the matrix did not cross nodes")
	}
}

// scrapeAs returns the /metrics page of the server at base, asked with
// token.
func scrapeAs(t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// tokenValues are the scoped and star tokens of tok.
func tokenValues(tok authtest.Tokens) []string {
	var out []string
	for _, v := range tok.Scoped {
		out = append(out, v)
	}
	for _, v := range tok.Star {
		out = append(out, v)
	}
	return out
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestLoopbackListen: what counts as listening on loopback only.
func TestLoopbackListen(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.0.0.5:7070": true, "[::1]:7070": true, "localhost:7070": true, "LOCALHOST.:7070": true,
		"0.0.0.0:7070": false, ":7070": false, "[::]:7070": false, "192.168.1.5:7070": false, "[fe80::1%eth0]:7070": false,
		"tenure.example.com:7070": false, "localhost.example.com:7070": false,
		"7070": true, // not an address: listening fails with its own error
	} {
		if got := loopbackListen(listen); got != want {
			t.Errorf("loopbackListen(%q) = %v, want %v", listen, got, want)
		}
	}
}

// TestServerRefusesNonLoopbackWithoutAuth: `tenure server` without
// --auth-file refuses an address that is not loopback, with one line that
// names both ways out; --insecure serves there, with a warning; with
// --auth-file it serves there without one.
func TestServerRefusesNonLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range [][]string{nil, {"--mysql", "root@tcp(127.0.0.1:1)/x", "--node-id", "n1"}} {
		code, out, errs := cli(t, append([]string{"server", "--data-dir", filepath.Join(dir, "refused"), "--listen", "0.0.0.0:0"}, mode...)...)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != 1 || len(lines) != 1 || !strings.Contains(errs, "refusing to serve on 0.0.0.0:0 without authentication") ||
			!strings.Contains(errs, "--auth-file") || !strings.Contains(errs, "--insecure") || out != "" {
			t.Errorf("tenure server %v --listen 0.0.0.0:0: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and one line naming --auth-file and --insecure", mode, code, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "refused")); err == nil {
		t.Errorf("a refused server created its data directory")
	}

	p := spawnNonLoopback(t, filepath.Join(dir, "insecure"), "--insecure")
	if err := waitReady(p); err != nil {
		t.Fatalf("--insecure: %v\n%s", err, p.out.String())
	}
	if !strings.Contains(p.out.String(), "serving without authentication on an address that is not loopback (--insecure)") {
		t.Errorf("--insecure served without its warning:\n%s", p.out.String())
	}
	stop(t, p)

	file := filepath.Join(dir, "tokens.jsonl")
	authtest.TokenFile(t, file)
	p = spawnNonLoopback(t, filepath.Join(dir, "auth"), "--auth-file", file)
	if err := waitReady(p); err != nil {
		t.Fatalf("--auth-file: %v\n%s", err, p.out.String())
	}
	if strings.Contains(p.out.String(), "without authentication") {
		t.Errorf("with --auth-file the server warns of no authentication:\n%s", p.out.String())
	}
	stop(t, p)
}

// spawnNonLoopback starts `tenure server` on 0.0.0.0 and a free port,
// reached on 127.0.0.1.
func spawnNonLoopback(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	return spawnServerOn(t, "0.0.0.0", dataDir, nil, extra...)
}

// stop ends a server with SIGTERM and waits for it.
func stop(t *testing.T, p *serverProc) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := waitProcExit(t, p); code != 0 {
		t.Errorf("server exited %d after SIGTERM:\n%s", code, p.out.String())
	}
}

// TestCLITokens: `tenure token create` prints a token the CLI then uses
// (--token and TENURE_TOKEN) against a server started with its file; a
// revoked token is refused within a second, and a token of a role that
// may not is refused with its role named.
func TestCLITokens(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.jsonl")
	create := func(args ...string) string {
		t.Helper()
		tok := strings.TrimSpace(mustCLI(t, append([]string{"token", "create", "--auth-file", file}, args...)...))
		if !strings.HasPrefix(tok, "tnr_") || strings.Contains(tok, "\n") {
			t.Fatalf("token create printed %q, want one token", tok)
		}
		return tok
	}
	ci := create("--name", "ci", "--role", "submitter", "--namespace", "default")
	ops := create("--name", "ops", "--role", "admin", "--namespace", "*")
	mailer := create("--name", "mailer", "--role", "worker", "--namespace", "default", "--queue", "emails")
	p := startServerProc(t, filepath.Join(dir, "data"), "--auth-file", file)
	addr := p.url()

	// SIGHUP rereads the file (unchanged: only SIGHUP makes it log a
	// reload) and the server serves on.
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitOutput(t, p, "token file reloaded", 1)

	if code, _, errs := cli(t, "submit", "x", "--queue", "emails", "--addr", addr); code != 1 || !strings.Contains(errs, "unauthenticated: no token") {
		t.Errorf("submit without a token: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(mustCLI(t, "submit", "x", "--queue", "emails", "--addr", addr, "--token", ci))
	if code, _, errs := cli(t, "task", "kill", id, "--addr", addr, "--token", ci); code != 1 ||
		!strings.Contains(errs, `permission_denied: token "ci" (role submitter) may not call TaskService/KillTask: it needs role admin`) {
		t.Errorf("task kill with a submitter token: exit %d: %s", code, errs)
	}
	t.Setenv("TENURE_TOKEN", ops) // so the test is not parallel: the environment is the process's
	if out := mustCLI(t, "task", "kill", id, "--addr", addr, "--requested-by", "someone-else"); !strings.Contains(out, "DEAD") {
		t.Errorf("task kill with TENURE_TOKEN of an admin: %s", out)
	}
	if hist := mustCLI(t, "task", "history", id, "--addr", addr); !regexp.MustCompile(`TaskDead\s+ops\s`).MatchString(hist) || strings.Contains(hist, "someone-else") {
		t.Errorf("the kill is not recorded as ops's:\n%s", hist)
	}
	if out := mustCLI(t, "admin", "snapshot", "--addr", addr); !strings.Contains(out, "snapshot at lsn") {
		t.Errorf("admin snapshot with TENURE_TOKEN of an admin: %s", out)
	}

	// The exec worker with a worker token of its queue works a task off.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int)
	go func() {
		var out, errb bytes.Buffer
		done <- run(ctx, []string{"worker", "--addr", addr, "--queue", "emails", "--token", mailer, "--exec", "tr a-z A-Z"}, &out, &errb)
	}()
	hello := strings.TrimSpace(mustCLI(t, "submit", "hello", "--queue", "emails", "--addr", addr, "--token", ci))
	if task := waitState(t, addr, hello, "COMPLETED"); task["result"] != "SEVMTE8=" { // base64 of "HELLO"
		t.Errorf("the task the worker completed: result %v", task["result"])
	}
	// Who asked is the token's name in every record, not what a caller
	// declares: ci submitted, mailer leased and completed; ops killed the
	// first task over its --requested-by.
	hist := mustCLI(t, "task", "history", hello, "--addr", addr, "--json")
	for _, want := range []string{`"type":"TaskCreated"`, `"requestedBy":"ci"`, `"type":"LeaseGranted"`, `"requestedBy":"mailer"`} {
		if !strings.Contains(strings.ReplaceAll(hist, " ", ""), want) {
			t.Errorf("history of %s lacks %s:\n%s", hello, want, hist)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("the worker exited %d", code)
	}

	list := mustCLI(t, "token", "list", "--auth-file", file)
	if !strings.Contains(list, "ci") || !strings.Contains(list, "submitter") || strings.Contains(list, ci[17:]) {
		t.Errorf("token list:\n%s", list)
	}
	if code, _, errs := cli(t, "token", "create", "--auth-file", file, "--name", "ci", "--role", "reader", "--namespace", "*"); code != 1 || !strings.Contains(errs, `already has a token named "ci"`) {
		t.Errorf("a second token named ci: exit %d: %s", code, errs)
	}
	if code, _, errs := cli(t, "token", "create", "--auth-file", file, "--name", "w", "--role", "worker", "--namespace", "default"); code != 2 || !strings.Contains(errs, "worker token without queues") {
		t.Errorf("a worker token without queues: exit %d: %s", code, errs)
	}
	mustCLI(t, "token", "revoke", "--auth-file", file, "--name", "ci")
	deadline := time.Now().Add(e2eCallTimeout)
	for {
		code, _, errs := cli(t, "submit", "y", "--queue", "emails", "--addr", addr, "--token", ci)
		if code == 1 && strings.Contains(errs, "unauthenticated: unknown token") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked token is still accepted after %v: exit %d: %s", e2eCallTimeout, code, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitOutput(t, p, "token file reloaded", 2) // SIGHUP, then the revoke
}

// waitOutput waits (bounded) until the server's output holds want n times:
// os/exec copies it in a goroutine that may lag.
func waitOutput(t *testing.T, p *serverProc, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(e2eCallTimeout); strings.Count(p.out.String(), want) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log %q %d times:\n%s", want, n, p.out.String())
		}
	}
}
