package e2e

// The commands the guides in docs/guides show, typed against the real
// binary: each test reads its blocks from the guide (between the guide's
// markers; see guideshell_test.go), so what a guide shows is what runs.

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// guideCommands reads the commands between a guide's name markers.
func guideCommands(t *testing.T, guide, name string) []guideCommand {
	t.Helper()
	cmds, err := readCommands(repoPath("docs", "guides", guide), name)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// guideOnServer runs the commands between a guide's name markers against
// a fresh server, and returns the server and the shell they ran in.
func guideOnServer(t *testing.T, guide, name string) (*serverProc, *guideShell) {
	t.Helper()
	cmds := guideCommands(t, guide, name)
	srv := startServerProc(t, t.TempDir())
	sh := newGuideShell(t, srv.addr)
	sh.run(cmds)
	return srv, sh
}

// TestGuideBlocks runs blocks of the guides' commands, each against a
// fresh server; what each shows is what its comments say it prints.
func TestGuideBlocks(t *testing.T) {
	for _, g := range []struct {
		name         string
		guide, block string
		tools        []string
	}{
		// The grpcurl commands of "Probes and tools" (server.md) list the
		// services, ask the health service and submit a task, through
		// server reflection.
		{"ServerGRPCurl", "server.md", "server-grpcurl", []string{"grpcurl"}},
		// The queue limit commands set, change and clear a queue's limits,
		// and queue get shows them.
		{"FlowControl", "flow-control.md", "flow-control", nil},
		// The section on keys: tasks submitted with keys, the limits of the
		// queue's keys set, its keys shown with queue get, and an ordered
		// key with a key max concurrency of 2 refused.
		{"FlowKeys", "flow-control.md", "flow-keys", nil},
		// The command-line walk: tasks that depend on others, BLOCKED until
		// the exec workers ran those, their results in the dependent's
		// environment, a --wait that times out.
		{"WorkflowsCLI", "workflows.md", "workflows-cli", nil},
		// A workflow seen, cancelled, retried and run to its end from the
		// command line.
		{"WorkflowsOps", "workflows.md", "workflows-ops", []string{"curl"}},
		// A schedule created and shown.
		{"Schedules", "schedules.md", "schedules", nil},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			lookTools(t, g.tools...)
			guideOnServer(t, g.guide, g.block)
		})
	}
}

// TestGuideServerCurl: the curl calls of "The API over HTTP and gRPC"
// (docs/guides/server.md) submit a task, lease it and complete it, and
// show an error, as their comments say.
func TestGuideServerCurl(t *testing.T) {
	t.Parallel()
	lookTools(t, "curl")
	srv, sh := guideOnServer(t, "server.md", "server-curl")

	// What the comments named: the task curl completed.
	id := sh.vars["TASK_ID"]
	c := newJSONClients(t, srv)
	resp, err := c.tasks.GetTask(t.Context(), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
	if err != nil {
		t.Fatalf("GetTask(%q), the task the guide's lease named: %v", id, err)
	}
	if got := resp.Msg.GetTask(); got.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(got.GetResult()) != "done" {
		t.Errorf("after the guide's curl calls the task is %v with result %q, want COMPLETED with \"done\"", got.GetState(), got.GetResult())
	}
}

// TestGuideTLS follows docs/guides/tls.md on a fresh machine: its openssl
// recipe makes a CA and the server's and a client's certificates; the
// servers it shows start with those files (HTTPS, then client certificates
// required); the command line, its worker, curl and grpcurl reach the
// second with them.
func TestGuideTLS(t *testing.T) {
	t.Parallel()
	lookTools(t, "openssl", "curl", "grpcurl")
	sh := newGuideShell(t, "")
	sh.run(guideCommands(t, "tls.md", "tls-certs"))
	sh.run(guideCommands(t, "tls.md", "tls-server"))
	if len(sh.servers) != 2 {
		t.Fatalf("the guide's server commands started %d servers, want 2 (HTTPS; with client certificates)", len(sh.servers))
	}
	for _, u := range sh.servers {
		if !strings.HasPrefix(u, "https://") {
			t.Errorf("a server of the guide serves on %s, want https://", u)
		}
	}
	sh.run(guideCommands(t, "tls.md", "tls-client"))

	// The task the guide's submit printed was run by its worker, which
	// presented the client certificate.
	cert, err := tls.LoadX509KeyPair(filepath.Join(sh.dir, "client.pem"), filepath.Join(sh.dir, "client-key.pem"))
	if err != nil {
		t.Fatalf("the client certificate of the guide's openssl recipe: %v", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(sh.dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.pem of the guide's openssl recipe holds no certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
	defer hc.CloseIdleConnections()
	id := sh.vars["TASK_ID"]
	resp, err := tenurev1connect.NewTaskServiceClient(hc, sh.servers[1], connect.WithProtoJSON()).
		GetTask(t.Context(), connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
	if err != nil {
		t.Fatalf("GetTask(%q), the task the guide's submit printed: %v", id, err)
	}
	if task := resp.Msg.GetTask(); task.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(task.GetResult()) != "hello" {
		t.Errorf("the guide's worker left task %s %v with result %q, want COMPLETED with \"hello\" (its payload, through cat)", id, task.GetState(), task.GetResult())
	}
}

// TestGuideTypeScript runs docs/guides/typescript-client.md's code and its
// example program (clients/ts/examples/submit.mjs), each against a fresh
// server, with the client of clients/ts (its packages installed by npm ci,
// as make ui does).
func TestGuideTypeScript(t *testing.T) {
	t.Parallel()
	lookTools(t, "node")
	if _, err := os.Stat(repoPath("clients", "ts", "node_modules", "@connectrpc")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("clients/ts has no packages installed and CI is set (make ui installs them): %v", err)
		}
		t.Skipf("skipping: clients/ts has no packages installed: run (cd clients/ts && npm ci), or make ui")
	}

	t.Run("snippet", func(t *testing.T) {
		t.Parallel()
		blocks, err := readFenced(repoPath("docs", "guides", "typescript-client.md"), "ts-snippet")
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) != 1 || blocks[0].lang != "js" {
			t.Fatalf("want one ```js block between the ts-snippet markers, found %d (%+v)", len(blocks), blocks)
		}
		code := blocks[0].body
		_, prints, ok := strings.Cut(code, "// →")
		if !ok {
			t.Fatalf("the guide's code has no \"// → \" comment saying what it prints:\n%s", code)
		}
		prints, _, _ = strings.Cut(prints, "\n")
		srv := startServerProc(t, t.TempDir())
		sh := newGuideShell(t, srv.addr)
		sh.link(filepath.Join("node_modules", "@tenure", "client"), repoPath("clients", "ts"))
		if err := os.WriteFile(filepath.Join(sh.dir, "snippet.mjs"), []byte(strings.ReplaceAll(code, defaultAddr, srv.addr)), 0o600); err != nil {
			t.Fatal(err)
		}
		sh.runOne(guideCommand{line: "node snippet.mjs", prints: strings.TrimSpace(prints)})
	})
	t.Run("example", func(t *testing.T) {
		t.Parallel()
		srv := startServerProc(t, t.TempDir())
		sh := newGuideShell(t, srv.addr)
		sh.link("clients", repoPath("clients"))
		sh.run(guideCommands(t, "typescript-client.md", "ts-example"))
	})
}

// TestGuideSecurityTokens follows the token example of
// docs/guides/security.md: two tokens made, a server on that file, and
// the command line, curl and grpcurl calling it with the admin's token.
func TestGuideSecurityTokens(t *testing.T) {
	t.Parallel()
	lookTools(t, "curl", "grpcurl")
	sh := newGuideShell(t, "")
	sh.run(guideCommands(t, "security.md", "security-tokens"))
	if len(sh.servers) != 1 {
		t.Fatalf("the guide's commands started %d servers, want 1", len(sh.servers))
	}
	// The server the guide started refuses a call without the token.
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	_, err := tenurev1connect.NewTaskServiceClient(hc, sh.servers[0], connect.WithProtoJSON()).
		Submit(t.Context(), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "emails", Payload: []byte("no token")}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a submit without a token to the guide's server: %v, want unauthenticated", err)
	}
}

// TestGuideSnapshots: docs/guides/snapshots.md's admin snapshot, against a
// running server, then its offline tools on the server's data directory
// once the server stopped, on a task the test submitted first.
func TestGuideSnapshots(t *testing.T) {
	t.Parallel()
	sh := newGuideShell(t, "")
	srv := startServerProc(t, filepath.Join(sh.dir, "tenure-data"))
	sh.setAddr(srv.url())
	sh.runOne(guideCommand{line: "./tenure submit 'hello' --queue emails", prints: "<TASK_ID>"})
	sh.run(guideCommands(t, "snapshots.md", "snapshots-admin"))
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitProcExit(t, srv); code != 0 {
		t.Fatalf("the server exited %d on SIGTERM, want 0", code)
	}
	sh.run(guideCommands(t, "snapshots.md", "snapshots-offline"))
}

// TestGuideOutboxSQL: the SQL docs/guides/outbox.md shows for teams that
// run their own migrations is what tenure outbox migrate --print prints
// for the default table (and so what tenure outbox migrate runs).
func TestGuideOutboxSQL(t *testing.T) {
	for _, db := range []string{"postgres", "mysql"} {
		blocks, err := readFenced(repoPath("docs", "guides", "outbox.md"), "outbox-sql-"+db)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustCLI(t, "outbox", "migrate", "--print", db); len(blocks) != 1 || blocks[0].body+"\n" != want {
			t.Errorf("docs/guides/outbox.md shows the %s SQL\n%v\nwhile tenure outbox migrate --print %s prints\n%s", db, blocks, db, want)
		}
	}
}
