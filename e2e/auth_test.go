package e2e

// Authentication against the real binary: the table of who may call what,
// on one server and across two cluster nodes; the CLI's tokens; serving on
// an address that is not loopback.

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
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
	_, body, err := httpGet(t.Context(), http.DefaultClient, base+"/metrics", token)
	if err != nil {
		t.Fatal(err)
	}
	return body
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

// TestServerNonLoopback: `tenure server` on an address that is not
// loopback serves with --insecure, with a warning, and with --auth-file
// without one. (cmd/tenure's TestServerRefusesNonLoopbackWithoutAuth: it
// refuses to without either.)
func TestServerNonLoopback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := spawnNonLoopback(t, filepath.Join(dir, "insecure"), "--insecure")
	if err := waitReady(p); err != nil {
		t.Fatalf("--insecure: %v\n%s", err, p.out.String())
	}
	waitOutput(t, p, "serving without authentication on an address that is not loopback (--insecure)", 1)
	stop(t, p)

	file := filepath.Join(dir, "tokens.jsonl")
	authtest.TokenFile(t, file)
	p = spawnNonLoopback(t, filepath.Join(dir, "auth"), "--auth-file", file)
	if err := waitReady(p); err != nil {
		t.Fatalf("--auth-file: %v\n%s", err, p.out.String())
	}
	waitOutput(t, p, "tenure serving on ", 1) // logged after a warning
	if strings.Contains(p.out.String(), "without authentication") {
		t.Errorf("with --auth-file the server warns of no authentication:\n%s", p.out.String())
	}
	stop(t, p)
}

// spawnNonLoopback starts `tenure server` on 0.0.0.0 and a free port,
// reached on 127.0.0.1.
func spawnNonLoopback(t *testing.T, dataDir string, extra ...string) *serverProc {
	t.Helper()
	addr := freeLoopbackAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	return spawn(t, "server", addr, serverArgs(dataDir, "0.0.0.0:"+port, extra))
}

// TestCLITokens: `tenure token create` prints a token the CLI then uses
// (--token and TENURE_TOKEN) against a server started with its file; a
// revoked token is refused within a second, and a token of a role that
// may not is refused with its role named.
func TestCLITokens(t *testing.T) {
	t.Parallel()
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
	asOps := []string{"TENURE_TOKEN=" + ops}
	if code, out, errs := cliEnv(t, asOps, "task", "kill", id, "--addr", addr, "--requested-by", "someone-else"); code != 0 || !strings.Contains(out, "DEAD") {
		t.Errorf("task kill with TENURE_TOKEN of an admin: exit %d: %s%s", code, out, errs)
	}
	if code, hist, errs := cliEnv(t, asOps, "task", "history", id, "--addr", addr); code != 0 || !regexp.MustCompile(`TaskDead\s+ops\s`).MatchString(hist) || strings.Contains(hist, "someone-else") {
		t.Errorf("the kill is not recorded as ops's: exit %d:\n%s%s", code, hist, errs)
	}
	if code, out, errs := cliEnv(t, asOps, "admin", "snapshot", "--addr", addr); code != 0 || !strings.Contains(out, "snapshot at lsn") {
		t.Errorf("admin snapshot with TENURE_TOKEN of an admin: exit %d: %s%s", code, out, errs)
	}

	// The exec worker with a worker token of its queue works a task off.
	worker := spawn(t, "worker", "", []string{"worker", "--addr", addr, "--queue", "emails", "--token", mailer, "--exec", "tr a-z A-Z"})
	hello := strings.TrimSpace(mustCLI(t, "submit", "hello", "--queue", "emails", "--addr", addr, "--token", ci))
	asAdmin := sdkWith(t, addr, client.Options{Token: ops})
	eventually.NoError(t, "the worker to complete "+hello, func() error {
		task, err := asAdmin.GetTask(t.Context(), client.GetTaskRequest{TaskID: hello})
		if err != nil {
			return err
		}
		if task.State != client.TaskStateCompleted {
			return fmt.Errorf("it is %v", task.State)
		}
		if string(task.Result) != "HELLO" {
			return eventually.Stop(fmt.Errorf("the task the worker completed: result %q, want HELLO", task.Result))
		}
		return nil
	})
	// Who asked is the token's name in every record, not what a caller
	// declares: ci submitted, mailer leased and completed; ops killed the
	// first task over its --requested-by.
	code, hist, errs := cliEnv(t, asOps, "task", "history", hello, "--addr", addr, "--json")
	if code != 0 {
		t.Fatalf("task history --json: exit %d: %s", code, errs)
	}
	for _, want := range []string{`"type":"TaskCreated"`, `"requestedBy":"ci"`, `"type":"LeaseGranted"`, `"requestedBy":"mailer"`} {
		if !strings.Contains(strings.ReplaceAll(hist, " ", ""), want) {
			t.Errorf("history of %s lacks %s:\n%s", hello, want, hist)
		}
	}
	worker.cmd.Process.Signal(syscall.SIGTERM)
	if code := waitProcExit(t, worker); code != 0 {
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
	eventually.NoError(t, "the revoked token to be refused", func() error {
		code, _, errs := cli(t, "submit", "y", "--queue", "emails", "--addr", addr, "--token", ci)
		if code == 1 && strings.Contains(errs, "unauthenticated: unknown token") {
			return nil
		}
		return fmt.Errorf("still accepted: exit %d: %s", code, errs)
	})
	waitOutput(t, p, "token file reloaded", 2) // SIGHUP, then the revoke
}
