package client

import (
	"context"
	"errors"
	"iter"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The calls of ScheduleService: schedules that submit a task at each tick
// of a cron expression. Each tick is decided by one record of the server's
// log, so a tick fires once and only once, however often the server
// restarts.

// CreateSchedule creates a schedule; its first tick is the first after
// now. Creating it again with the same definition returns it (created is
// false), so the call may be retried; with another definition it is
// refused with ErrAlreadyExists. An expression that does not parse, an
// unknown time zone or a task a Submit would refuse is ErrInvalidArgument
// naming the field ("cron", "time_zone", "execution_window", ...).
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (CreateScheduleResult, error) {
	if err := c.typedSchedule("CreateSchedule", &req); err != nil {
		return CreateScheduleResult{}, err
	}
	resp, err := call(ctx, c, "CreateSchedule", c.schedules.CreateSchedule, &tenurev1.CreateScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Cron: req.Cron, TimeZone: req.TimeZone,
		Overlap: tenurev1.OverlapPolicy(req.Overlap), CatchUpWindow: optDuration(req.CatchUpWindow), Payload: req.Payload,
		ExecutionWindow: optDuration(req.ExecutionWindow), RetryPolicy: req.Retry.proto(), Priority: req.Priority, Kind: req.Kind,
		RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return CreateScheduleResult{}, err
	}
	sc, err := scheduleIn("CreateSchedule", resp)
	if err != nil {
		return CreateScheduleResult{}, err
	}
	return CreateScheduleResult{Schedule: *sc, Created: resp.GetCreated()}, nil
}

// UpdateSchedule replaces a schedule's whole definition (zero fields take
// their defaults, as in CreateSchedule: read the schedule first to change
// one field). The old definition's ticks that are due are decided first;
// the new one's start after now. A schedule that does not exist is
// ErrNotFound.
func (c *Client) UpdateSchedule(ctx context.Context, req ScheduleRequest) (*Schedule, error) {
	if err := c.typedSchedule("UpdateSchedule", &req); err != nil {
		return nil, err
	}
	resp, err := call(ctx, c, "UpdateSchedule", c.schedules.UpdateSchedule, &tenurev1.UpdateScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Cron: req.Cron, TimeZone: req.TimeZone,
		Overlap: tenurev1.OverlapPolicy(req.Overlap), CatchUpWindow: optDuration(req.CatchUpWindow), Payload: req.Payload,
		ExecutionWindow: optDuration(req.ExecutionWindow), RetryPolicy: req.Retry.proto(), Priority: req.Priority, Kind: req.Kind,
		Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return nil, err
	}
	return scheduleIn("UpdateSchedule", resp)
}

// typedSchedule sets the task template of req, the caller's copy, from
// req.Args (if set) and its type's SubmitOptions.
func (c *Client) typedSchedule(op string, req *ScheduleRequest) error {
	if req.Args == nil {
		return nil
	}
	d, err := template(c.codec, op, "", req.Args, &req.Kind, &req.Payload)
	if err != nil {
		return err
	}
	d.fill(&req.Namespace, &req.Queue, &req.ExecutionWindow, &req.Retry, &req.Priority)
	return nil
}

// GetSchedule returns one schedule; ErrNotFound if it does not exist.
func (c *Client) GetSchedule(ctx context.Context, req GetScheduleRequest) (*Schedule, error) {
	resp, err := call(ctx, c, "GetSchedule", c.schedules.GetSchedule, &tenurev1.GetScheduleRequest{Namespace: req.Namespace, Queue: req.Queue, Name: req.Name})
	if err != nil {
		return nil, err
	}
	return scheduleIn("GetSchedule", resp)
}

// ListSchedules returns the schedules req selects, ordered by namespace,
// queue and name. A failed call ends the sequence with its error.
func (c *Client) ListSchedules(ctx context.Context, req ListSchedulesRequest) iter.Seq2[*Schedule, error] {
	return pages("", func(string) ([]*tenurev1.Schedule, string, error) {
		resp, err := call(ctx, c, "ListSchedules", c.schedules.ListSchedules, &tenurev1.ListSchedulesRequest{Namespace: req.Namespace, Queue: req.Queue})
		return resp.GetSchedules(), "", err
	}, converted(scheduleOf))
}

// PauseSchedule pauses a schedule: no tick is decided until
// ResumeSchedule. Pausing a paused schedule changes nothing (Changed is
// false).
func (c *Client) PauseSchedule(ctx context.Context, req ScheduleControlRequest) (ScheduleControlResult, error) {
	resp, err := call(ctx, c, "PauseSchedule", c.schedules.PauseSchedule, &tenurev1.PauseScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return ScheduleControlResult{}, err
	}
	return scheduleControlResult("PauseSchedule", resp)
}

// ResumeSchedule resumes a paused schedule: the ticks that passed while it
// was paused are skipped, and the next is the first after now. Resuming a
// running schedule changes nothing (Changed is false).
func (c *Client) ResumeSchedule(ctx context.Context, req ScheduleControlRequest) (ScheduleControlResult, error) {
	resp, err := call(ctx, c, "ResumeSchedule", c.schedules.ResumeSchedule, &tenurev1.ResumeScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return ScheduleControlResult{}, err
	}
	return scheduleControlResult("ResumeSchedule", resp)
}

// DeleteSchedule deletes a schedule; the tasks it submitted stay. A
// schedule that does not exist is ErrNotFound (so is a retry whose first
// try deleted it).
func (c *Client) DeleteSchedule(ctx context.Context, req ScheduleControlRequest) error {
	_, err := call(ctx, c, "DeleteSchedule", c.schedules.DeleteSchedule, &tenurev1.DeleteScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Reason: req.Reason, RequestedBy: c.by(req.RequestedBy)})
	return err
}

// BackfillSchedule fires every tick of the range that never fired, one
// task each, whatever the overlap policy; a tick that fired before is
// counted, not fired again, so the call may be retried. At most 1000
// ticks per call (ErrInvalidArgument naming "end": backfill in parts).
func (c *Client) BackfillSchedule(ctx context.Context, req BackfillRequest) (BackfillResult, error) {
	resp, err := call(ctx, c, "BackfillSchedule", c.schedules.BackfillSchedule, &tenurev1.BackfillScheduleRequest{
		Namespace: req.Namespace, Queue: req.Queue, Name: req.Name, Start: optTime(req.Start), End: optTime(req.End),
		RequestedBy: c.by(req.RequestedBy)})
	if err != nil {
		return BackfillResult{}, err
	}
	out := BackfillResult{AlreadyFired: int(resp.GetAlreadyFired())}
	for _, f := range resp.GetFired() {
		out.Fired = append(out.Fired, scheduleFireOf(f))
	}
	return out, nil
}

// scheduleIn returns the schedule of op's answer.
func scheduleIn(op string, resp interface{ GetSchedule() *tenurev1.Schedule }) (*Schedule, error) {
	if resp.GetSchedule() == nil {
		return nil, errors.New("client: " + op + ": the server answered without the schedule (a server bug); GetSchedule shows it")
	}
	sc := scheduleOf(resp.GetSchedule())
	return &sc, nil
}

// scheduleControlResult is the result of op's answer (a pause or a resume).
func scheduleControlResult(op string, resp interface {
	GetChanged() bool
	GetSchedule() *tenurev1.Schedule
}) (ScheduleControlResult, error) {
	sc, err := scheduleIn(op, resp)
	if err != nil {
		return ScheduleControlResult{}, err
	}
	return ScheduleControlResult{Changed: resp.GetChanged(), Schedule: *sc}, nil
}

func scheduleOf(p *tenurev1.Schedule) Schedule {
	s := Schedule{
		Namespace:       p.GetNamespace(),
		Queue:           p.GetQueue(),
		Name:            p.GetName(),
		Cron:            p.GetCron(),
		TimeZone:        p.GetTimeZone(),
		Kind:            p.GetKind(),
		Overlap:         OverlapPolicy(p.GetOverlap()),
		CatchUpWindow:   p.GetCatchUpWindow().AsDuration(),
		Payload:         p.GetPayload(),
		ExecutionWindow: p.GetExecutionWindow().AsDuration(),
		RetryPolicy:     retryPolicyOf(p.GetRetryPolicy()),
		Priority:        p.GetPriority(),
		Paused:          p.GetPaused(),
		Pause:           pauseOf(p.GetPause()),
		HeldTick:        timeOf(p.GetHeldTick()),
		WaitingForTask:  p.GetWaitingForTask(),
		WaitingSince:    timeOf(p.GetWaitingSince()),
		CreatedAt:       timeOf(p.GetCreatedAt()),
		CreatedBy:       p.GetCreatedBy(),
		UpdatedAt:       timeOf(p.GetUpdatedAt()),
	}
	for _, t := range p.GetNextFires() {
		s.NextFires = append(s.NextFires, timeOf(t))
	}
	for _, f := range p.GetRecent() {
		s.Recent = append(s.Recent, scheduleFireOf(f))
	}
	return s
}

func scheduleFireOf(p *tenurev1.ScheduleFire) ScheduleFire {
	return ScheduleFire{Tick: timeOf(p.GetTick()), Until: timeOf(p.GetUntil()), Outcome: FireOutcome(p.GetOutcome()), Reason: p.GetReason(),
		TaskID: p.GetTaskId(), TaskState: TaskState(p.GetTaskState()), At: timeOf(p.GetAt())}
}
