package main

import (
	"fmt"

	"github.com/tenurehq/tenure/internal/metrics"
)

// metricsMaxQueuesHelp is the help of --metrics-max-queues, the bound on
// the queue labels of GET /metrics.
const metricsMaxQueuesHelp = "queues (namespace and queue) with labels of their own in GET /metrics, 1..10000: the first N seen; every later queue is reported as namespace=\"_other\", queue=\"_other\""

// newMetrics returns the metrics of `tenure server`, served at GET
// /metrics, with maxQueues (the flag's value) queue labels.
func newMetrics(maxQueues int) (*metrics.Metrics, error) {
	if err := metrics.CheckMaxQueues(maxQueues); err != nil {
		return nil, usageError{fmt.Sprintf("--metrics-max-queues: %v", err)}
	}
	return metrics.New(metrics.Config{MaxQueues: maxQueues})
}
