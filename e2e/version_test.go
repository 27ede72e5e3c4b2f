package e2e

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestCLIVersion runs the real binary's `tenure version`: it names the
// module and the Go version it was built with.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	code, out := runBin(t, "version")
	if code != 0 || !strings.Contains(out, "module  github.com/tenurehq/tenure\n") || !strings.Contains(out, "go      "+runtime.Version()+"\n") {
		t.Fatalf("tenure version: exit %d, want the module and %s:\n%s", code, runtime.Version(), out)
	}
	code, out = runBin(t, "version", "--json")
	var v struct{ Module, Version, Go string }
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Module != "github.com/tenurehq/tenure" || v.Go != runtime.Version() || v.Version == "" {
		t.Fatalf("tenure version --json: exit %d, %v, %+v", code, err, v)
	}
}
