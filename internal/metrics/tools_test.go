package metrics_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testenv"
)

// lookTool returns the path of a Prometheus tool (Debian's prometheus
// package has both prometheus and promtool). Without it the test skips,
// unless CI is set: .ci/run installs the package, so there it fails.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	testenv.SkipOrFail(t, fmt.Sprintf("%s is not installed; install Debian's prometheus package (apt-get install prometheus), as .ci/run does: %v", name, err))
	return ""
}

// runTool runs a tool to completion with stdin, returning its combined
// output; the timeout only ends a hung tool.
func runTool(t *testing.T, path string, stdin io.Reader, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = stdin
	return cmd.CombinedOutput()
}

// repoFile returns the path of a file of the repository, from this
// package's directory.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join("..", "..", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return p
}
