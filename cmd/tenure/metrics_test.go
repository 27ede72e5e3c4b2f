package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestServerMetricsFlagRefused: a --metrics-max-queues out of range is a
// usage error naming the range and the default.
func TestServerMetricsFlagRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "10001"} {
		var out, errb bytes.Buffer
		code := run(t.Context(), []string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-max-queues", v}, &out, &errb)
		for _, want := range []string{"--metrics-max-queues", "1..10000", "omit it for the default of 100"} {
			if code != 2 || !strings.Contains(errb.String(), want) {
				t.Errorf("--metrics-max-queues %s: exit %d (want 2), stderr %q (want %q)", v, code, errb.String(), want)
				break
			}
		}
	}
}
