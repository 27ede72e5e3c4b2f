package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupLimit: the memory limit of the process's cgroup is read from
// cgroup v2's memory.max and from v1's memory hierarchy, by the path
// /proc/self/cgroup names; "max" and v1's near-largest value are no limit.
func TestCgroupLimit(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("app/memory.max", "1073741824\n")
	write("free/memory.max", "max\n")
	write("memory/pod/memory.limit_in_bytes", "536870912\n")
	write("memory/none/memory.limit_in_bytes", "9223372036854771712\n")
	for _, tc := range []struct {
		name, cgroup string
		want         int64
	}{
		{"v2 with a limit", "0::/app\n", 1 << 30},
		{"v2 without", "0::/free\n", 0},
		{"v1 with a limit", "9:name=systemd:/\n4:memory:/pod\n1:cpu:/\n", 512 << 20},
		{"v1 without", "4:cpuacct,memory:/none\n", 0},
		{"v1 hybrid with an empty v2 line", "4:memory:/pod\n0::/\n", 512 << 20},
		{"no memory controller", "1:cpu:/\n", 0},
	} {
		if got := cgroupLimitIn(root, []byte(tc.cgroup)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
