package main

import (
	"testing"
)

// TestLimitFlagsRefused: a limit flag out of range is a usage error
// naming the flag and what to pass.
func TestLimitFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-connections", "0"}, "--max-connections 0 must be at least 1"},
		{[]string{"--max-long-polls-per-worker", "-1"}, "--max-long-polls-per-worker -1 must be at least 1"},
		{[]string{"--max-inflight-request-bytes", "0"}, "--max-inflight-request-bytes 0 must be at least 1"},
		{[]string{"--body-read-timeout", "1ms"}, "--body-read-timeout 1ms is under 10ms"},
		{[]string{"--write-timeout", "45s"}, "pass --write-timeout above 1m0s"},
		{[]string{"--body-read-timeout", "2m"}, "pass --write-timeout above 2m30s"},
		{[]string{"--max-header-bytes", "100"}, "--max-header-bytes 100 is outside 4096..16777216"},
		{[]string{"--max-discard-bytes", "0"}, "--max-discard-bytes 0 must be at least 1"},
		{[]string{"--max-memory-bytes", "1000"}, "--max-memory-bytes 1000 is under 67108864 (64 MiB)"},
	} {
		usageRefused(t, append([]string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...), tc.want)
	}
}
