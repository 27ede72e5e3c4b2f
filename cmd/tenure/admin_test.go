package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCLIAdminSnapshot(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	mustCLI(t, "submit", "--addr", addr, "--queue", "q", "one")
	out := mustCLI(t, "admin", "snapshot", "--addr", addr)
	if !strings.Contains(out, "snapshot at lsn 2: 1 tasks, 0 purged by retention") || !strings.Contains(out, "snap-0000000000000002.tsnap") {
		t.Fatalf("admin snapshot:\n%s", out)
	}
	var res struct {
		Lsn   string `json:"lsn"`
		Tasks string `json:"tasks"`
		Path  string `json:"path"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "admin", "snapshot", "--addr", addr, "--json")), &res); err != nil || res.Lsn != "3" || res.Tasks != "1" {
		t.Fatalf("admin snapshot --json: %v %+v", err, res)
	}
	if code, _, errs := cli(t, "admin", "snapshot", "--addr", "http://127.0.0.1:1"); code != 1 || !strings.Contains(errs, "unavailable") {
		t.Fatalf("no server: exit %d, %s", code, errs)
	}
}
