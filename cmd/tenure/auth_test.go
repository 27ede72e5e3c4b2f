package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
// names both ways out, and creates nothing. (e2e's TestServerNonLoopback
// runs the servers that --insecure and --auth-file let serve there.)
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
}
