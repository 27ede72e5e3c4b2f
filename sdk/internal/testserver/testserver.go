// Package testserver runs a real tenure server for the SDK's examples and
// tests: the binary built from the repository the SDK is in (cmd/tenure of
// the module github.com/tenurehq/tenure, next to sdk/), on a free loopback
// port and a data directory of its own, for as long as the tests run. The
// SDK's module cannot import the server; it can run it.
//
// TENURE_TEST_ADDR, if set, names a server to use instead (one you run,
// for an SDK outside the repository).
package testserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Server is a running tenure server.
type Server struct {
	// URL is its base URL, e.g. http://127.0.0.1:41234.
	URL string

	cmd  *exec.Cmd
	dir  string
	logs *syncBuffer
}

// Start builds the server of the repository around the working directory
// and starts it (or, with TENURE_TEST_ADDR set, returns that server). It
// fails, saying why, when the SDK is not in the repository and
// TENURE_TEST_ADDR is unset.
func Start() (*Server, error) {
	if addr := os.Getenv("TENURE_TEST_ADDR"); addr != "" {
		return &Server{URL: addr}, nil
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenure-sdk-test-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, logs: new(syncBuffer)}
	bin := filepath.Join(dir, "tenure")
	build := exec.Command(goCommand(), "build", "-o", bin, "./cmd/tenure")
	build.Dir = root
	// The server's module may need a newer Go than the SDK's tests run
	// with (GOTOOLCHAIN=go1.23.0 checks the SDK's oldest Go): let the go
	// command pick the server's.
	build.Env = append(os.Environ(), "GOTOOLCHAIN=auto")
	if out, err := build.CombinedOutput(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("testserver: building the server in %s: %v\n%s", root, err, out)
	}
	addr, err := freeAddr()
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.URL = "http://" + addr
	s.cmd = exec.Command(bin, "server", "--listen", addr, "--data-dir", filepath.Join(dir, "data"), "--fsync", "none")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("testserver: starting the server: %w", err)
	}
	if err := s.waitReady(30 * time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop stops the server and removes its data. The logs stay in Logs.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// Logs returns what the server wrote so far.
func (s *Server) Logs() string {
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// waitReady polls /readyz until it answers 200.
func (s *Server) waitReady(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: the server at %s was not ready within %v; its logs:\n%s", s.URL, within, s.Logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// repoRoot is the directory of the module github.com/tenurehq/tenure
// above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(mod) == "github.com/tenurehq/tenure" {
			if _, err := os.Stat(filepath.Join(dir, "cmd", "tenure")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testserver: the SDK is not inside the tenure repository (no go.mod of github.com/tenurehq/tenure above it): set TENURE_TEST_ADDR to the URL of a tenure server to run the examples against")
		}
		dir = parent
	}
}

// modulePath is the module line of a go.mod.
func modulePath(mod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(mod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return f[1]
		}
	}
	return ""
}

// goCommand is the go command of the toolchain running the tests.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// syncBuffer is a bytes.Buffer for two writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
