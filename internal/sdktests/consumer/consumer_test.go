package consumer_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
)

// The tests of this package add the Go SDK to an application as
// docs/guides/workers.md says, in new modules outside the repository, with
// the program that guide shows.

// serverDeps are modules of the server that an application of the SDK must
// not get.
var serverDeps = []string{"github.com/go-sql-driver/mysql", "github.com/prometheus/", "github.com/spf13/cobra", "github.com/chromedp/", "github.com/jackc/pgx"}

// TestAddTheSDK: a new module adds the SDK from a checkout (require and
// replace, go mod tidy) and as a published module (go get, here from a
// module proxy of the test's own that serves this checkout's SDK as
// v0.1.0); either way `go list -m all` lists none of the server's
// dependencies, the guide's program builds as written, and, run against a
// real server, submits its two typed tasks, works them off in its two
// queues and stops cleanly on SIGINT.
func TestAddTheSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in new modules: skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sdkDir := filepath.Join(root, "sdk")
	program := guideProgram(t, filepath.Join(root, "docs", "guides", "workers.md"))
	for _, how := range []string{"from a checkout", "published"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := goEnv(t)
			gocmd(t, dir, env, "mod", "init", "example.com/shop")
			if err := os.WriteFile(filepath.Join(dir, "main.go"), program, 0o644); err != nil {
				t.Fatal(err)
			}
			if how == "from a checkout" {
				gocmd(t, dir, env, "mod", "edit", "-require=github.com/tenurehq/tenure/sdk@v0.0.0", "-replace=github.com/tenurehq/tenure/sdk="+sdkDir)
			} else {
				// A module cache of its own: the machine's keeps the first
				// v0.1.0 it was served and would build every later run
				// with that one. The machine's cache still serves the
				// SDK's dependencies, as a proxy, without the network.
				proxy := moduleProxy(t, sdkDir, "v0.1.0")
				shared := "file://" + filepath.Join(goEnvValue(t, "GOMODCACHE"), "cache", "download")
				env = append(env, "GOPROXY=file://"+proxy+","+shared+","+goEnvValue(t, "GOPROXY"), "GONOSUMDB=github.com/tenurehq/tenure",
					"GOMODCACHE="+t.TempDir(), "GOFLAGS=-modcacherw")
				gocmd(t, dir, env, "get", "github.com/tenurehq/tenure/sdk@latest")
			}
			gocmd(t, dir, env, "mod", "tidy")
			mods := gocmd(t, dir, env, "list", "-m", "all")
			t.Logf("go list -m all:\n%s", mods)
			for _, dep := range serverDeps {
				if strings.Contains(mods, dep) {
					t.Errorf("the application's modules include %s, a dependency of the server", dep)
				}
			}
			if how == "published" && !strings.Contains(mods, "github.com/tenurehq/tenure/sdk v0.1.0") {
				t.Errorf("the application does not require the published SDK v0.1.0")
			}
			gocmd(t, dir, env, "build", "-o", "shop", ".")
			t.Logf("go build: %s", filepath.Join(dir, "shop"))
			runProgram(t, filepath.Join(dir, "shop"), apitest.Start(t, nil))
		})
	}
}

// guideProgram is the Go program between the sdk-program markers of the
// guide at path.
func guideProgram(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("<!-- sdk-program:start -->\n```go\n"))
	prog, _, ok2 := bytes.Cut(rest, []byte("```\n<!-- sdk-program:end -->"))
	if !ok || !ok2 {
		t.Fatalf("%s has no Go program between its sdk-program markers", path)
	}
	return prog
}

// goEnv is the environment of the go commands: this one's, outside any
// workspace, with no flags of its own.
func goEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "GOWORK=") && !strings.HasPrefix(kv, "GOPROXY=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off", "GOFLAGS=")
}

// goEnvValue is the value of a go env variable here.
func goEnvValue(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// gocmd runs go with args in dir and returns its output, failing the test
// if it fails.
func gocmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// moduleProxy writes a module proxy (GOPROXY=file://) that serves the
// module in dir, github.com/tenurehq/tenure/sdk, at version, as a release
// of it would be served (nested modules left out), and returns its
// directory.
func moduleProxy(t *testing.T, dir, version string) string {
	t.Helper()
	const module = "github.com/tenurehq/tenure/sdk"
	proxy := t.TempDir()
	at := filepath.Join(proxy, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	for name, data := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": mod} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// A directory with a go.mod of its own (sdk/outboxpgx) is
			// another module, left out of this one's zip as go does.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != dir {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		w, err := zw.Create(module + "@" + version + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(w, src)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("writing the module's zip: %v", err)
	}
	return proxy
}

// runProgram runs the guide's program against the server at url: it must
// print that it sent the email and resized the image, and stop with exit 0
// on SIGINT.
func runProgram(t *testing.T, bin, url string) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TENURE_ADDR="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	want := map[string]bool{"sent Welcome to ada@example.com": false, "resized cat.png to 320": false}
	timeout := time.After(2 * time.Minute)
	for seen := 0; seen < len(want); {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the program ended before it worked both tasks off: %v\n%s", cmd.Wait(), stderr.String())
			}
			if done, known := want[l]; !known || done {
				t.Fatalf("the program printed %q; want each of %v once", l, want)
			}
			want[l] = true
			seen++
		case <-timeout:
			cmd.Process.Kill()
			t.Fatalf("the program did not work its tasks off within 2 minutes; its log:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines { // the rest, until it closes stdout
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program stopped with %v on SIGINT, want exit 0; its log:\n%s", err, stderr.String())
	}
}
