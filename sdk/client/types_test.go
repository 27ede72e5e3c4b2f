package client_test

import (
	"testing"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestEnumsMatchTheAPI: the SDK's states, statuses and reasons are the
// API's enum values under the same names, so converting one by its number
// is exact, and every value the API defines has a name in the SDK.
func TestEnumsMatchTheAPI(t *testing.T) {
	check := func(kind, prefix string, names map[int32]string, sdk func(int32) string) {
		t.Helper()
		for v, name := range names {
			if got := prefix + sdk(v); got != name {
				t.Errorf("%s %d: the SDK names it %q, the API %q", kind, v, got, name)
			}
		}
		if got := sdk(int32(len(names))); got == "" || got == names[0] {
			t.Errorf("%s %d (unknown): named %q; want a name that shows the number", kind, len(names), got)
		}
	}
	check("TaskState", "TASK_STATE_", tenurev1.TaskState_name, func(v int32) string { return client.TaskState(v).String() })
	check("ExecutionStatus", "EXECUTION_STATUS_", tenurev1.ExecutionStatus_name, func(v int32) string { return client.ExecutionStatus(v).String() })
	check("WorkflowState", "WORKFLOW_STATE_", tenurev1.WorkflowState_name, func(v int32) string { return client.WorkflowState(v).String() })
	check("Reason", "ERROR_REASON_", tenurev1.ErrorReason_name, func(v int32) string { return client.Reason(v).String() })
}
