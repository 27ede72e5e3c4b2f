package main

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// TestAttemptEnd: each way an attempt ends has the dashboard timeline's
// word, read from the record that ended it; an aborted attempt is never
// shown as the API's ABORTED when its history says more.
func TestAttemptEnd(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	aborted := func(lease string, finished time.Time) client.Execution {
		return client.Execution{Status: client.ExecutionStatusAborted, LeaseID: lease, FinishedAt: finished}
	}
	hist := []client.HistoryEntry{
		{Type: "LeaseGranted", LeaseID: "l1", At: at},
		{Type: "TaskFailed", LeaseID: "l1", At: at.Add(time.Second)},
		{Type: "LeaseGranted", LeaseID: "l2", At: at.Add(2 * time.Second)},
		{Type: "LeaseExpired", LeaseID: "l2", At: at.Add(3 * time.Second)},
		{Type: "LeaseGranted", LeaseID: "l3", At: at.Add(4 * time.Second)},
		{Type: "TaskDead", At: at.Add(5 * time.Second)},
		{Type: "TaskRetried", At: at.Add(6 * time.Second)},
		{Type: "LeaseGranted", LeaseID: "l4", At: at.Add(7 * time.Second)},
		{Type: "TaskDeadlineExceeded", At: at.Add(8 * time.Second)},
	}
	for _, tc := range []struct {
		e    client.Execution
		want string
	}{
		{aborted("l1", at.Add(time.Second)), "failed"},
		{aborted("l2", at.Add(3*time.Second)), "expired"},
		{aborted("l3", at.Add(5*time.Second)), "killed"},
		{aborted("l4", at.Add(8*time.Second)), "deadline"},
		{aborted("l5", at.Add(9*time.Second)), "aborted"},
		{client.Execution{Status: client.ExecutionStatusDone}, "completed"},
		{client.Execution{Status: client.ExecutionStatusCommitted}, "committed"},
		{client.Execution{Status: client.ExecutionStatusSnoozed}, "snoozed"},
		{client.Execution{Status: client.ExecutionStatusLeased}, "running"},
		{client.Execution{Status: client.ExecutionStatusInProgress}, "running"},
	} {
		if got := attemptEnd(tc.e, hist); got != tc.want {
			t.Errorf("attemptEnd(%v of lease %q) = %q, want %q", tc.e.Status, tc.e.LeaseID, got, tc.want)
		}
	}
}
