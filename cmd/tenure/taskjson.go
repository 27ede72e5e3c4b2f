package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// The --json output of the task and queue commands is the API's JSON form
// of the messages it prints (SubmitResponse, Task, ListTasksResponse,
// GetTaskHistoryResponse, RetryTaskResponse, the bulk actions' responses,
// ListQueuesResponse, GetQueueResponse, PauseQueueResponse,
// ResumeQueueResponse, SetQueueLimitsResponse, and the responses of
// ScheduleService, as the Connect protocol and curl show them), so
// that one script reads both. These types spell that form out: the API's
// field names, fields at their zero value left out, enums by their API
// names, bytes in base64, 64-bit integers as strings, durations as
// seconds ("1.500s") and times in RFC 3339, UTC. Scripts depend on it:
// TestCLIJSONIsTheAPIsJSON, TestCLIQueuesJSONIsTheAPIsJSON and
// TestCLISchedulesJSONIsTheAPIsJSON pin it.
//
// One difference: a queue's oldestWaitingAge of exactly 0 (its oldest due
// task became due this millisecond) is left out, as the SDK cannot tell it
// from no task due.

type submitJSON struct {
	Task      taskJSON `json:"task"`
	Duplicate bool     `json:"duplicate,omitempty"`
}

type taskJSON struct {
	TaskID          string          `json:"taskId,omitempty"`
	Namespace       string          `json:"namespace,omitempty"`
	Queue           string          `json:"queue,omitempty"`
	Payload         []byte          `json:"payload,omitempty"`
	State           string          `json:"state,omitempty"`
	Attempt         uint32          `json:"attempt,omitempty"`
	Priority        int32           `json:"priority,omitempty"`
	RequestID       string          `json:"requestId,omitempty"`
	ExecutionWindow durationJSON    `json:"executionWindow"`
	RetryPolicy     retryPolicyJSON `json:"retryPolicy"`
	NotBefore       timeJSON        `json:"notBefore,omitzero"`
	CreatedAt       timeJSON        `json:"createdAt,omitzero"`
	UpdatedAt       timeJSON        `json:"updatedAt,omitzero"`
	Result          []byte          `json:"result,omitempty"`
	FailureReason   string          `json:"failureReason,omitempty"`
	LeaseID         string          `json:"leaseId,omitempty"`
	WorkerID        string          `json:"workerId,omitempty"`
	LeaseExpiry     timeJSON        `json:"leaseExpiry,omitzero"`
	Executions      []executionJSON `json:"executions,omitempty"`
	Deadline        timeJSON        `json:"deadline,omitzero"`
	TraceContext    *traceJSON      `json:"traceContext,omitempty"`
	Progress        *progressJSON   `json:"progress,omitempty"`
	AttemptsUsed    uint32          `json:"attemptsUsed,omitempty"`
	Kind            string          `json:"kind,omitempty"`
}

type traceJSON struct {
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

type progressJSON struct {
	Message    string   `json:"message,omitempty"`
	Percent    *uint32  `json:"percent,omitempty"`
	ReportedAt timeJSON `json:"reportedAt,omitzero"`
}

type retryPolicyJSON struct {
	MaxAttempts       uint32       `json:"maxAttempts,omitempty"`
	InitialBackoff    durationJSON `json:"initialBackoff"`
	MaxBackoff        durationJSON `json:"maxBackoff"`
	BackoffMultiplier float64      `json:"backoffMultiplier,omitempty"`
}

type executionJSON struct {
	Attempt     uint32   `json:"attempt,omitempty"`
	LeaseID     string   `json:"leaseId,omitempty"`
	WorkerID    string   `json:"workerId,omitempty"`
	Status      string   `json:"status,omitempty"`
	LeasedAt    timeJSON `json:"leasedAt,omitzero"`
	StartedAt   timeJSON `json:"startedAt,omitzero"`
	CommittedAt timeJSON `json:"committedAt,omitzero"`
	FinishedAt  timeJSON `json:"finishedAt,omitzero"`
	LeaseExpiry timeJSON `json:"leaseExpiry,omitzero"`
	Reason      string   `json:"reason,omitempty"`
}

type taskListJSON struct {
	Tasks         []taskJSON `json:"tasks,omitempty"`
	NextPageToken string     `json:"nextPageToken,omitempty"`
}

// taskResponseJSON is the API's RetryTaskResponse (and any response that
// carries one task).
type taskResponseJSON struct {
	Task taskJSON `json:"task"`
}

// bulkJSON is the API's RetryTasksResponse, KillTasksResponse and
// PurgeTasksResponse.
type bulkJSON struct {
	Changed uint64 `json:"changed,omitempty,string"`
	Skipped uint64 `json:"skipped,omitempty,string"`
}

type queueListJSON struct {
	Queues []queueJSON `json:"queues,omitempty"`
}

type queueResponseJSON struct {
	Queue queueJSON `json:"queue"`
}

// queueControlJSON is the API's PauseQueueResponse, ResumeQueueResponse
// and SetQueueLimitsResponse.
type queueControlJSON struct {
	Changed bool      `json:"changed,omitempty"`
	Queue   queueJSON `json:"queue"`
}

type queueJSON struct {
	Namespace         string            `json:"namespace,omitempty"`
	Queue             string            `json:"queue,omitempty"`
	Tasks             taskCountsJSON    `json:"tasks"`
	OldestWaitingAge  durationJSON      `json:"oldestWaitingAge,omitzero"`
	ActiveLeases      uint64            `json:"activeLeases,omitempty,string"`
	Paused            bool              `json:"paused,omitempty"`
	Pause             *queuePauseJSON   `json:"pause,omitempty"`
	LastMinute        queueEventsJSON   `json:"lastMinute"`
	Last5Minutes      queueEventsJSON   `json:"last5Minutes"`
	LastHour          queueEventsJSON   `json:"lastHour"`
	PerMinute         []queueEventsJSON `json:"perMinute,omitempty"`
	Partitions        uint32            `json:"partitions,omitempty"`
	PausedPartitions  uint32            `json:"pausedPartitions,omitempty"`
	Limits            *queueLimitsJSON  `json:"limits,omitempty"`
	LimitedPartitions uint32            `json:"limitedPartitions,omitempty"`
}

type queueLimitsJSON struct {
	MaxConcurrency uint32   `json:"maxConcurrency,omitempty"`
	Rate           float64  `json:"rate,omitempty"`
	Burst          uint32   `json:"burst,omitempty"`
	RequestedBy    string   `json:"requestedBy,omitempty"`
	Reason         string   `json:"reason,omitempty"`
	SetAt          timeJSON `json:"setAt,omitzero"`
}

type taskCountsJSON struct {
	Waiting   uint64 `json:"waiting,omitempty,string"`
	Leased    uint64 `json:"leased,omitempty,string"`
	Committed uint64 `json:"committed,omitempty,string"`
	Completed uint64 `json:"completed,omitempty,string"`
	Failed    uint64 `json:"failed,omitempty,string"`
	Dead      uint64 `json:"dead,omitempty,string"`
}

type queueEventsJSON struct {
	Submitted    uint64 `json:"submitted,omitempty,string"`
	Completed    uint64 `json:"completed,omitempty,string"`
	Failed       uint64 `json:"failed,omitempty,string"`
	LeaseExpired uint64 `json:"leaseExpired,omitempty,string"`
}

type queuePauseJSON struct {
	RequestedBy string   `json:"requestedBy,omitempty"`
	Reason      string   `json:"reason,omitempty"`
	PausedAt    timeJSON `json:"pausedAt,omitzero"`
}

type historyJSON struct {
	Entries []historyEntryJSON `json:"entries,omitempty"`
}

type historyEntryJSON struct {
	LSN      uint64   `json:"lsn,omitempty,string"`
	Type     string   `json:"type,omitempty"`
	At       timeJSON `json:"at,omitzero"`
	LeaseID  string   `json:"leaseId,omitempty"`
	WorkerID string   `json:"workerId,omitempty"`
	Attempt  uint32   `json:"attempt,omitempty"`
	Detail   string   `json:"detail,omitempty"`

	RequestedBy string `json:"requestedBy,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

type scheduleJSON struct {
	Namespace       string             `json:"namespace,omitempty"`
	Queue           string             `json:"queue,omitempty"`
	Name            string             `json:"name,omitempty"`
	Cron            string             `json:"cron,omitempty"`
	TimeZone        string             `json:"timeZone,omitempty"`
	Overlap         string             `json:"overlap,omitempty"`
	CatchUpWindow   durationJSON       `json:"catchUpWindow"`
	Payload         []byte             `json:"payload,omitempty"`
	ExecutionWindow durationJSON       `json:"executionWindow"`
	RetryPolicy     retryPolicyJSON    `json:"retryPolicy"`
	Priority        int32              `json:"priority,omitempty"`
	Paused          bool               `json:"paused,omitempty"`
	Pause           *queuePauseJSON    `json:"pause,omitempty"`
	NextFires       []timeJSON         `json:"nextFires,omitempty"`
	Recent          []scheduleFireJSON `json:"recent,omitempty"`
	CreatedAt       timeJSON           `json:"createdAt,omitzero"`
	CreatedBy       string             `json:"createdBy,omitempty"`
	UpdatedAt       timeJSON           `json:"updatedAt,omitzero"`
	HeldTick        timeJSON           `json:"heldTick,omitzero"`
	WaitingForTask  string             `json:"waitingForTask,omitempty"`
	WaitingSince    timeJSON           `json:"waitingSince,omitzero"`
	Kind            string             `json:"kind,omitempty"`
}

type scheduleFireJSON struct {
	Tick      timeJSON `json:"tick,omitzero"`
	Until     timeJSON `json:"until,omitzero"`
	Outcome   string   `json:"outcome,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	TaskID    string   `json:"taskId,omitempty"`
	TaskState string   `json:"taskState,omitempty"`
	At        timeJSON `json:"at,omitzero"`
}

// scheduleCreateJSON is the API's CreateScheduleResponse.
type scheduleCreateJSON struct {
	Schedule scheduleJSON `json:"schedule"`
	Created  bool         `json:"created,omitempty"`
}

// scheduleResponseJSON is the API's GetScheduleResponse and
// UpdateScheduleResponse.
type scheduleResponseJSON struct {
	Schedule scheduleJSON `json:"schedule"`
}

type scheduleListJSON struct {
	Schedules []scheduleJSON `json:"schedules,omitempty"`
}

// scheduleControlJSON is the API's PauseScheduleResponse and
// ResumeScheduleResponse.
type scheduleControlJSON struct {
	Changed  bool         `json:"changed,omitempty"`
	Schedule scheduleJSON `json:"schedule"`
}

// backfillJSON is the API's BackfillScheduleResponse.
type backfillJSON struct {
	Fired        []scheduleFireJSON `json:"fired,omitempty"`
	AlreadyFired uint32             `json:"alreadyFired,omitempty"`
}

func taskToJSON(t *client.Task) taskJSON {
	out := taskJSON{
		TaskID:          t.ID,
		Namespace:       t.Namespace,
		Queue:           t.Queue,
		Payload:         t.Payload,
		State:           enumJSON("TASK_STATE_", t.State),
		Attempt:         t.Attempt,
		Priority:        t.Priority,
		RequestID:       t.RequestID,
		ExecutionWindow: durationJSON(t.ExecutionWindow),
		RetryPolicy:     retryPolicyToJSON(t.RetryPolicy),
		NotBefore:       timeJSON(t.NotBefore),
		CreatedAt:       timeJSON(t.CreatedAt),
		UpdatedAt:       timeJSON(t.UpdatedAt),
		Result:          t.Result,
		FailureReason:   t.FailureReason,
		LeaseID:         t.LeaseID,
		WorkerID:        t.WorkerID,
		LeaseExpiry:     timeJSON(t.LeaseExpiry),
		Deadline:        timeJSON(t.Deadline),
		AttemptsUsed:    t.AttemptsUsed,
		Kind:            t.Kind,
	}
	if t.TraceContext != (client.TraceContext{}) {
		out.TraceContext = &traceJSON{Traceparent: t.TraceContext.Traceparent, Tracestate: t.TraceContext.Tracestate}
	}
	if p := t.Progress; p != nil {
		out.Progress = &progressJSON{Message: p.Message, ReportedAt: timeJSON(p.ReportedAt)}
		if p.HasPercent {
			out.Progress.Percent = &p.Percent
		}
	}
	for _, e := range t.Executions {
		out.Executions = append(out.Executions, executionJSON{
			Attempt:     e.Attempt,
			LeaseID:     e.LeaseID,
			WorkerID:    e.WorkerID,
			Status:      enumJSON("EXECUTION_STATUS_", e.Status),
			LeasedAt:    timeJSON(e.LeasedAt),
			StartedAt:   timeJSON(e.StartedAt),
			CommittedAt: timeJSON(e.CommittedAt),
			FinishedAt:  timeJSON(e.FinishedAt),
			LeaseExpiry: timeJSON(e.LeaseExpiry),
			Reason:      e.Reason,
		})
	}
	return out
}

func retryPolicyToJSON(p client.RetryPolicy) retryPolicyJSON {
	return retryPolicyJSON{
		MaxAttempts:       p.MaxAttempts,
		InitialBackoff:    durationJSON(p.InitialBackoff),
		MaxBackoff:        durationJSON(p.MaxBackoff),
		BackoffMultiplier: p.Multiplier,
	}
}

func scheduleToJSON(sc *client.Schedule) scheduleJSON {
	out := scheduleJSON{
		Namespace:       sc.Namespace,
		Queue:           sc.Queue,
		Name:            sc.Name,
		Cron:            sc.Cron,
		TimeZone:        sc.TimeZone,
		Overlap:         enumJSON("OVERLAP_POLICY_", sc.Overlap),
		CatchUpWindow:   durationJSON(sc.CatchUpWindow),
		Payload:         sc.Payload,
		ExecutionWindow: durationJSON(sc.ExecutionWindow),
		RetryPolicy:     retryPolicyToJSON(sc.RetryPolicy),
		Priority:        sc.Priority,
		Paused:          sc.Paused,
		Pause:           pauseToJSON(sc.Pause),
		CreatedAt:       timeJSON(sc.CreatedAt),
		CreatedBy:       sc.CreatedBy,
		UpdatedAt:       timeJSON(sc.UpdatedAt),
		HeldTick:        timeJSON(sc.HeldTick),
		WaitingForTask:  sc.WaitingForTask,
		WaitingSince:    timeJSON(sc.WaitingSince),
		Kind:            sc.Kind,
	}
	for _, t := range sc.NextFires {
		out.NextFires = append(out.NextFires, timeJSON(t))
	}
	for _, f := range sc.Recent {
		out.Recent = append(out.Recent, fireToJSON(f))
	}
	return out
}

func fireToJSON(f client.ScheduleFire) scheduleFireJSON {
	return scheduleFireJSON{Tick: timeJSON(f.Tick), Until: timeJSON(f.Until), Outcome: enumJSON("FIRE_OUTCOME_", f.Outcome), Reason: f.Reason,
		TaskID: f.TaskID, TaskState: enumJSON("TASK_STATE_", f.TaskState), At: timeJSON(f.At)}
}

// pauseToJSON converts a pause; nil for none.
func pauseToJSON(p *client.QueuePause) *queuePauseJSON {
	if p == nil {
		return nil
	}
	return &queuePauseJSON{RequestedBy: p.RequestedBy, Reason: p.Reason, PausedAt: timeJSON(p.PausedAt)}
}

func historyToJSON(entries []client.HistoryEntry) historyJSON {
	var out historyJSON
	for _, e := range entries {
		out.Entries = append(out.Entries, historyEntryJSON{
			LSN: e.LSN, Type: e.Type, At: timeJSON(e.At), LeaseID: e.LeaseID, WorkerID: e.WorkerID, Attempt: e.Attempt, Detail: e.Detail,
			RequestedBy: e.RequestedBy, Reason: e.Reason,
		})
	}
	return out
}

func queueToJSON(q *client.Queue) queueJSON {
	out := queueJSON{
		Namespace:         q.Namespace,
		Queue:             q.Queue,
		Tasks:             taskCountsJSON(q.Tasks),
		OldestWaitingAge:  durationJSON(q.OldestWaitingAge),
		ActiveLeases:      q.ActiveLeases,
		Paused:            q.Paused,
		LastMinute:        queueEventsJSON(q.LastMinute),
		Last5Minutes:      queueEventsJSON(q.Last5Minutes),
		LastHour:          queueEventsJSON(q.LastHour),
		Partitions:        q.Partitions,
		PausedPartitions:  q.PausedPartitions,
		LimitedPartitions: q.LimitedPartitions,
	}
	out.Pause = pauseToJSON(q.Pause)
	if l := q.Limits; l != nil {
		out.Limits = &queueLimitsJSON{MaxConcurrency: l.MaxConcurrency, Rate: l.Rate, Burst: l.Burst,
			RequestedBy: l.RequestedBy, Reason: l.Reason, SetAt: timeJSON(l.SetAt)}
	}
	for _, e := range q.PerMinute {
		out.PerMinute = append(out.PerMinute, queueEventsJSON(e))
	}
	return out
}

// enumJSON is an enum's API name: its prefix and the SDK's name of the
// value; "" (left out) for the unspecified value, which the API omits.
func enumJSON[E interface {
	~uint8
	fmt.Stringer
}](prefix string, v E) string {
	if v == 0 {
		return ""
	}
	return prefix + v.String()
}

// durationJSON is a duration in the API's JSON form: seconds with 0, 3, 6
// or 9 decimals and an "s".
type durationJSON time.Duration

func (d durationJSON) MarshalJSON() ([]byte, error) {
	v := time.Duration(d)
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := strconv.FormatInt(int64(v/time.Second), 10)
	if frac := int64(v % time.Second); frac != 0 {
		f := strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%09d", frac), "000"), "000")
		s += "." + f
	}
	return strconv.AppendQuote(nil, sign+s+"s"), nil
}

// timeJSON is a time in the API's JSON form: RFC 3339 in UTC with 0, 3, 6
// or 9 decimals.
type timeJSON time.Time

func (t timeJSON) IsZero() bool { return time.Time(t).IsZero() }

func (t timeJSON) MarshalJSON() ([]byte, error) {
	s := time.Time(t).UTC().Format("2006-01-02T15:04:05.000000000")
	s = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s, "000"), "000"), ".000")
	return strconv.AppendQuote(nil, s+"Z"), nil
}

// writeJSON prints v, one of the types above, as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
