package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	build := exec.Command("go", "build", "-o", tenureBin, "github.com/tenurehq/tenure/cmd/tenure")
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
