package state

import "fmt"

// TraceContext is the W3C trace context a task was submitted with: the
// traceparent and tracestate of the submitter's span, so that the worker
// that runs the task can continue its trace. The state does not read it.
type TraceContext struct {
	// Parent is the traceparent ("00-<trace id>-<span id>-<flags>").
	Parent string
	// State is the tracestate (vendor entries); "" without one.
	State string
}

// Report is progress that the worker holding a lease reported for it (on
// a heartbeat: LeaseExtended.Report): a short message, a percentage, or
// both.
type Report struct {
	Message string
	// Percent is the share of the work done, 0 to 100, if HasPercent.
	Percent    uint32
	HasPercent bool
}

// String is the report as tools show it: "40% copying", "40%", "copying",
// or "(empty)".
func (r Report) String() string {
	switch {
	case r.HasPercent && r.Message != "":
		return fmt.Sprintf("%d%% %s", r.Percent, r.Message)
	case r.HasPercent:
		return fmt.Sprintf("%d%%", r.Percent)
	case r.Message != "":
		return r.Message
	}
	return "(empty)"
}

// LastReport is the last Report of a task's current lease, and when it
// came.
type LastReport struct {
	Report
	At Time
}

// Beside is what the state keeps of a task beside it rather than in Task,
// so that only the tasks that have it pay for it (docs/design/state-machine.md,
// "Memory per task"): its deadline in force (deadline.go), the trace
// context it was submitted with, and the last progress report of its
// current lease. An Image holds it for each task, and a Loader takes it.
type Beside struct {
	// Deadline is the deadline in force (0: none). Only a WAITING or
	// LEASED task has one.
	Deadline Time
	// Trace is the submitter's trace context (zero: none). A task keeps it
	// as long as it is in the state.
	Trace TraceContext
	// Report is the last progress report of the current lease (zero At:
	// none). It ends with the lease.
	Report LastReport
	// Key is the task's key ("" for none; docs/design/keys.md).
	Key string
	// Graph is what the task has of the graph: its dependencies, policy,
	// parent, workflow and place in its record (zero: none).
	Graph GraphInfo
}

// Beside returns what the state keeps beside t, a task of the state.
func (s *State) Beside(t *Task) Beside {
	d, _ := s.deadlines.of(t)
	return Beside{Deadline: d, Trace: s.traces[t], Report: s.reports[t], Key: s.KeyOf(t), Graph: s.graphInfo(t)}
}

// TraceOf returns the trace context t, a task of the state, was submitted
// with (zero: none).
func (s *State) TraceOf(t *Task) TraceContext { return s.traces[t] }

// ReportOf returns the last progress report of t's current lease, if its
// worker reported any.
func (s *State) ReportOf(t *Task) (LastReport, bool) {
	r, ok := s.reports[t]
	return r, ok
}

// setTrace keeps tc beside t (nothing for a zero one).
func (s *State) setTrace(t *Task, tc TraceContext) {
	if tc == (TraceContext{}) {
		return
	}
	if s.traces == nil {
		s.traces = make(map[*Task]TraceContext)
	}
	if old, ok := s.traces[t]; ok {
		s.held -= heldByTrace(old)
	}
	s.traces[t] = tc
	s.held += heldByTrace(tc)
}

// dropBeside forgets what the state keeps beside t, which leaves it.
func (s *State) dropBeside(t *Task) {
	if len(s.traces) > 0 {
		if tc, ok := s.traces[t]; ok {
			s.held -= heldByTrace(tc)
			delete(s.traces, t)
		}
	}
	s.dropReport(t)
}

// dropReport forgets the last report of t's current lease, which ends.
func (s *State) dropReport(t *Task) {
	if len(s.reports) > 0 {
		if r, ok := s.reports[t]; ok {
			s.held -= heldByReport(r.Report)
			delete(s.reports, t)
		}
	}
}

// setReport keeps r as the last report of t's current lease.
func (s *State) setReport(t *Task, r LastReport) {
	if s.reports == nil {
		s.reports = make(map[*Task]LastReport)
	}
	if old, ok := s.reports[t]; ok {
		s.held -= heldByReport(old.Report)
	}
	s.reports[t] = r
	s.held += heldByReport(r.Report)
}

// checkReport says why r cannot be a lease's report, or "".
func checkReport(r *Report) string {
	if r.HasPercent && r.Percent > 100 {
		return fmt.Sprintf("progress percent %d is above 100", r.Percent)
	}
	if !r.HasPercent && r.Percent != 0 {
		return fmt.Sprintf("progress percent %d is set without HasPercent", r.Percent)
	}
	return ""
}

// checkTrace says why tc cannot be a task's trace context, or "".
func checkTrace(tc TraceContext) string {
	if tc.Parent == "" && tc.State != "" {
		return "tracestate without traceparent"
	}
	return ""
}

// besideErrors checks the trace contexts and reports kept beside tasks:
// each belongs to a task of the state, a report only to one that holds a
// lease, and each is valid.
func (s *State) besideErrors() []error {
	var errs []error
	for t, tc := range s.traces {
		switch {
		case t.ID == "" || s.Task(t.ID) != t:
			errs = append(errs, fmt.Errorf("a trace context is kept for a task not in the state (%q)", t.ID))
		case tc == (TraceContext{}):
			errs = append(errs, fmt.Errorf("task %q: an empty trace context is kept", t.ID))
		case checkTrace(tc) != "":
			errs = append(errs, fmt.Errorf("task %q: %s", t.ID, checkTrace(tc)))
		}
	}
	for t, r := range s.reports {
		switch {
		case t.ID == "" || s.Task(t.ID) != t:
			errs = append(errs, fmt.Errorf("a progress report is kept for a task not in the state (%q)", t.ID))
		case t.CurrentLease() == nil:
			errs = append(errs, fmt.Errorf("task %q: a progress report is kept without a current lease", t.ID))
		case r.At == 0:
			errs = append(errs, fmt.Errorf("task %q: a progress report has no time", t.ID))
		case checkReport(&r.Report) != "":
			errs = append(errs, fmt.Errorf("task %q: %s", t.ID, checkReport(&r.Report)))
		}
	}
	return errs
}
