package worker

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAttemptSpan is what a worker without a tracer provider pays
// for each attempt's span: starting and ending one that records nothing.
func BenchmarkAttemptSpan(b *testing.B) {
	w := &Worker{tracer: tracerOf(nil), spanNames: map[string]string{"q": "process q"}, opts: Options{WorkerID: "w"}}
	ctx := context.Background()
	a := &attempt{}
	a.task.Queue, a.task.ID, a.task.LeaseID, a.task.Attempt = "q", "task-1", "lease-1", 1
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.received = time.Now()
		_ = w.startSpan(ctx, a)
		endSpan(a, Finish{Outcome: OutcomeCompleted})
	}
}
