package state

import (
	"fmt"
	"slices"
)

// ImageCopy takes an Image of a State in steps, so that the State's owner
// holds its lock for one step at a time, not for a copy of every task, and
// applies records between the steps. The Image is of the State as it was
// at BeginImage, whatever is applied after: before a record changes or
// drops a task that the copy has not reached yet, Apply saves a copy of
// that task (copy on write), and a step takes the saved copy instead of
// the live task.
//
// Which tasks a record may change is known from the record alone: the
// task it names (Record.Task), the tasks a TasksDeleted names, and the
// finished tasks a purge may drop. A record that creates a task creates
// one the Image does not hold. Fields the Image does not keep (the heap
// positions) may change freely. A step that finds a task changed without
// a saved copy, which would be a bug in that knowledge, fails the copy
// rather than let a snapshot hold a mix of two states.
type ImageCopy struct {
	s     *State
	img   *Image
	order []uint32 // the creation order at img.LastLSN, as State.order
	next  int      // the next entry of order to copy
	// copied has the bit of each slab position whose task of the image is
	// copied or saved already. A position holds at most one task of the
	// image while the copy lasts: once that task is dropped, its position
	// goes to tasks created after the image.
	copied posBits
	saved  map[uint32]savedTask
	err    error
}

// savedTask is the copy of a task of the image taken before a record
// changed it, with what the state kept beside it then.
type savedTask struct {
	t      *Task
	beside Beside
}

// BeginImage starts a copy of the state as it is now. Until Finish or Abort
// every Apply saves what it is about to change. One copy runs at a time.
func (s *State) BeginImage() *ImageCopy {
	if s.copying != nil {
		panic("state: BeginImage while another image copy runs")
	}
	c := newImageCopy(s)
	s.copying = c
	return c
}

func newImageCopy(s *State) *ImageCopy {
	c := &ImageCopy{s: s, order: append([]uint32(nil), s.order...), saved: make(map[uint32]savedTask),
		img: &Image{LastLSN: s.lastLSN, Epoch: s.epoch, Tasks: make([]*Task, 0, s.Len()),
			Queues: s.queueImages(), Schedules: s.scheduleImages(), Workflows: s.workflowImages(), Holds: s.Holds(""),
			Deliveries: slices.Clone(s.deliveries.list)}}
	if len(s.graph) > 0 {
		c.img.Graphs = make([]GraphInfo, 0, s.Len())
	}
	if s.deadlines.Len() > 0 {
		c.img.Deadlines = make([]Time, 0, s.Len())
	}
	if len(s.traces) > 0 {
		c.img.Traces = make([]TraceContext, 0, s.Len())
	}
	if len(s.reports) > 0 {
		c.img.Reports = make([]LastReport, 0, s.Len())
	}
	if s.hasKeyedTasks() {
		c.img.Keys = make([]string, 0, s.Len())
	}
	return c
}

// Step copies the next n tasks of the image (fewer at the end) and reports
// whether the copy is complete.
func (c *ImageCopy) Step(n int) (done bool) {
	if c.err != nil {
		return true
	}
	s, lsn := c.s, c.img.LastLSN
	var live []*Task
	var at []int // where each of live goes in img.Tasks
	for ; c.next < len(c.order) && n > 0; c.next++ {
		e := c.order[c.next]
		if e == 0 {
			continue
		}
		n--
		pos := e - 1
		if sv, ok := c.saved[pos]; ok {
			delete(c.saved, pos)
			c.push(sv.t, sv.beside)
			continue
		}
		t := s.slab.at(pos)
		if t.ID == "" || t.CreatedLSN > lsn || c.copied.has(pos) {
			c.err = fmt.Errorf("state: image at lsn %d: the task at slab position %d changed (now %q, created at lsn %d) without a saved copy",
				lsn, pos, t.ID, t.CreatedLSN)
			return true
		}
		c.copied.set(pos, true)
		live = append(live, t)
		at = append(at, len(c.img.Tasks))
		c.push(nil, s.Beside(t))
	}
	for i, cp := range copyTasks(live) {
		c.img.Tasks[at[i]] = cp
	}
	return c.next == len(c.order)
}

// push appends a task (nil: its copy comes later in the step) and what
// the state keeps beside it to the image. (A task of the image had what it
// has beside it when the copy began, so each slice it goes in was made
// then.)
func (c *ImageCopy) push(t *Task, b Beside) {
	img := c.img
	img.Tasks = append(img.Tasks, t)
	if img.Deadlines != nil {
		img.Deadlines = append(img.Deadlines, b.Deadline)
	}
	if img.Traces != nil {
		img.Traces = append(img.Traces, b.Trace)
	}
	if img.Reports != nil {
		img.Reports = append(img.Reports, b.Report)
	}
	if img.Keys != nil {
		img.Keys = append(img.Keys, b.Key)
	}
	if img.Graphs != nil {
		img.Graphs = append(img.Graphs, b.Graph)
	}
}

// Finish ends a complete copy and returns the Image; an error means the
// copy is unusable (see ImageCopy).
func (c *ImageCopy) Finish() (*Image, error) {
	c.detach()
	if c.err == nil && c.next < len(c.order) {
		c.err = fmt.Errorf("state: image at lsn %d: finished after %d of %d entries", c.img.LastLSN, c.next, len(c.order))
	}
	return c.finish()
}

// Abort ends the copy without an Image.
func (c *ImageCopy) Abort() { c.detach() }

func (c *ImageCopy) detach() {
	if c.s.copying == c {
		c.s.copying = nil
	}
}

func (c *ImageCopy) finish() (*Image, error) {
	if c.err != nil {
		return nil, c.err
	}
	return c.img, nil
}

// preserve saves every task of the image that r may change and the copy
// has not reached: Apply calls it before it applies r.
func (c *ImageCopy) preserve(r Record) {
	s := c.s
	switch r := r.(type) {
	case *TasksDeleted:
		for _, id := range r.TaskIDs {
			c.save(s.Task(id))
		}
	case *TasksPurged:
		c.savePurged(r.Before, 0, c.img.LastLSN)
	case *TasksPurgedRange:
		c.savePurged(r.Before, r.AfterLSN, min(r.ThroughLSN, c.img.LastLSN))
	case *WorkflowCancelled:
		c.saveWorkflow(WorkflowKey{r.Namespace, r.Workflow})
	case *WorkflowRetried:
		c.saveWorkflow(WorkflowKey{r.Namespace, r.Workflow})
	default:
		if id := r.Task(); id != "" {
			t := s.Task(id)
			c.save(t)
			if t != nil && t.graph {
				// What settle may reach when the record ends t.
				c.saveDependents(t)
			}
		}
	}
}

// saveWorkflow saves every task of workflow k and what their ends may
// reach.
func (c *ImageCopy) saveWorkflow(k WorkflowKey) {
	if w := c.s.workflows[k]; w != nil {
		w.Members(func(t *Task) bool {
			c.save(t)
			if t.graph {
				c.saveDependents(t)
			}
			return true
		})
	}
}

// saveDependents saves every task that the dependents of t name, and
// theirs in turn.
func (c *ImageCopy) saveDependents(t *Task) {
	s := c.s
	seen := map[*Task]bool{t: true}
	next := []*Task{t}
	for len(next) > 0 {
		x := next[len(next)-1]
		next = next[:len(next)-1]
		n := s.graph[x]
		if n == nil {
			continue
		}
		for _, ref := range n.dependents {
			d := s.slab.at(ref.pos)
			if d.ID == "" || d.CreatedLSN != ref.lsn || seen[d] {
				continue
			}
			seen[d] = true
			c.save(d)
			if d.graph {
				next = append(next, d)
			}
		}
	}
}

// savePurged saves the tasks a purge with cut-off before over the range
// (afterLSN, throughLSN] may drop.
func (c *ImageCopy) savePurged(before Time, afterLSN, throughLSN uint64) {
	c.s.eachPurgeable(before, afterLSN, throughLSN, func(_ int, t *Task) { c.save(t) })
}

// save keeps a copy of t if it is a task of the image that is neither
// copied nor saved yet.
func (c *ImageCopy) save(t *Task) {
	if t == nil || t.CreatedLSN > c.img.LastLSN || c.copied.has(t.pos) {
		return
	}
	c.copied.set(t.pos, true)
	c.saved[t.pos] = savedTask{t: copyTasks([]*Task{t})[0], beside: c.s.Beside(t)}
}
