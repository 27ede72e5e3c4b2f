package state

// Attribute records in recs who asked: by (the caller's principal) becomes
// the By of every record that has one, over anything the caller declared.
// It is the one path by which a record is attributed: each record type
// with a By field has a method attribute below that sets it
// (TestEveryRecordWithByIsAttributed in internal/record checks every type
// the statetest generator makes). Records the server writes on its own
// (LeaseExpired, Fence, TasksPurgedRange, …) have no By. An empty by
// changes nothing: records keep what they were given.
func Attribute(recs []Record, by string) {
	if by == "" {
		return
	}
	for _, r := range recs {
		if a, ok := r.(attributed); ok {
			a.attribute(by)
		}
	}
}

// attributed is a record that says who asked: attribute sets its By.
type attributed interface {
	attribute(by string)
}

func (r *ExecutionStarted) attribute(by string)  { r.By = by }
func (r *LeaseExtended) attribute(by string)     { r.By = by }
func (r *LeaseGranted) attribute(by string)      { r.By = by }
func (r *OutboxHeld) attribute(by string)        { r.By = by }
func (r *OutboxReleased) attribute(by string)    { r.By = by }
func (r *QueueLimited) attribute(by string)      { r.By = by }
func (r *QueuePaused) attribute(by string)       { r.By = by }
func (r *QueueResumed) attribute(by string)      { r.By = by }
func (r *ScheduleCreated) attribute(by string)   { r.By = by }
func (r *ScheduleDeleted) attribute(by string)   { r.By = by }
func (r *SchedulePaused) attribute(by string)    { r.By = by }
func (r *ScheduleResumed) attribute(by string)   { r.By = by }
func (r *ScheduleUpdated) attribute(by string)   { r.By = by }
func (r *TaskCancelled) attribute(by string)     { r.By = by }
func (r *TaskCommitted) attribute(by string)     { r.By = by; attributeAll(r.Spawn, by) }
func (r *TaskCompleted) attribute(by string)     { r.By = by; attributeAll(r.Spawn, by) }
func (r *TasksSubmitted) attribute(by string)    { r.By = by; attributeAll(r.Tasks, by) }
func (r *WorkflowCancelled) attribute(by string) { r.By = by }
func (r *WorkflowRetried) attribute(by string)   { r.By = by }
func (r *TaskCreated) attribute(by string)       { r.By = by }
func (r *TaskDead) attribute(by string)          { r.By = by }
func (r *TaskFailed) attribute(by string)        { r.By = by }
func (r *TaskRetried) attribute(by string)       { r.By = by }
func (r *TasksDeleted) attribute(by string)      { r.By = by }
func (r *TaskSnoozed) attribute(by string)       { r.By = by }

// attribute names who asked of a backfill only: a FIRED tick is the
// schedule's own, even when a call (an update) decides it on the way.
func (r *ScheduleFired) attribute(by string) {
	if r.Outcome == Backfilled {
		r.By = by
	}
}

// attributeAll attributes the tasks a record creates beside its own.
func attributeAll(tasks []TaskCreated, by string) {
	for i := range tasks {
		tasks[i].By = by
	}
}
