package main

import (
	"testing"
)

// TestServerMetricsFlagRefused: a --metrics-max-queues out of range is a
// usage error naming the range and the default.
func TestServerMetricsFlagRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0", "10001"} {
		usageRefused(t, []string{"server", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-max-queues", v},
			"--metrics-max-queues", "1..10000", "omit it for the default of 100")
	}
}
