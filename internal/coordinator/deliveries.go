package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
)

// Deliveries (docs/design/workflows.md, "Cluster mode"): a workflow batch
// or a spawn whose tasks a cluster node placed in several partitions is
// written whole in one partition, its home. The home's coordinator gives
// each task placed elsewhere (SubmitRequest.Place) its final id, with its
// partition's suffix, keeps it in its state as a delivery, and
// RunDeliveries hands the deliveries, in record order, to the node, which
// has each created in its partition (CreateDelivered there), then appends
// TasksDelivered.

// Delivered is a group of deliveries for one partition: tasks of one
// record, one workflow and one parent, in record order (so within the
// limit of one record's bytes, Limits.MaxAtomicBytes), none of which
// depends on a task of the record still to be delivered elsewhere.
type Delivered struct {
	// Place is the id suffix of the partition the tasks go to.
	Place    string
	Workflow string // "" for none
	Parent   string // the task whose commit spawned them; "" for none
	Tasks    []state.TaskCreated
	// Cancelled is the home's cancel of the workflow when the group was
	// sent (nil: not cancelled): the partition creates the tasks and then
	// cancels the workflow there too.
	Cancelled *state.Pause
}

// DeliverFunc has a group of deliveries created in its partition
// (CreateDelivered on that partition's coordinator, on whichever node
// serves it), and returns once they are durable there.
type DeliverFunc func(ctx context.Context, d Delivered) error

// MaxDeliveredPerCall bounds the tasks of one Delivered.
const MaxDeliveredPerCall = 1000

// placeOf is the id suffix of the partition request r goes to.
func (c *Coordinator) placeOf(r *SubmitRequest) string {
	if r.Place == "" {
		return c.cfg.TaskIDSuffix
	}
	return r.Place
}

// remote reports whether request r goes to another partition than this
// coordinator's.
func (c *Coordinator) remote(r *SubmitRequest) bool {
	return r.Place != "" && r.Place != c.cfg.TaskIDSuffix
}

// anyRemote reports whether a request of reqs goes to another partition.
func (c *Coordinator) anyRemote(reqs []SubmitRequest) bool {
	for i := range reqs {
		if c.remote(&reqs[i]) {
			return true
		}
	}
	return false
}

// DeliveredTaskID is the id of a task with request id requestID in
// namespace, placed in the partition of id suffix place by another
// partition's record: derived from the namespace and the request id, so
// that a retried batch names the same task, and its partition, which
// creates a delivered task only if its id is new, creates it once.
func DeliveredTaskID(namespace, requestID, place string) string {
	h := sha256.Sum256([]byte(namespace + "\x00" + requestID))
	return encodeID(binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:16])) + place
}

// newRemoteID returns a new id for a task of the partition of id suffix
// place without a request id (c.mu held), not among pending.
func (c *Coordinator) newRemoteID(now time.Time, place string, pending map[string]struct{}) string {
	for {
		id := newID(now, c.ids) + place
		if _, clash := pending[id]; clash || c.st.Delivering(id) {
			continue
		}
		pending[id] = struct{}{}
		return id
	}
}

// splitPlaced splits the tasks of a plan, in creation order, into those
// of this partition and the deliveries.
func (c *Coordinator) splitPlaced(tasks []state.TaskCreated, reqs []SubmitRequest, order []int) (here, deliver []state.TaskCreated) {
	for k, i := range order {
		if c.remote(&reqs[i]) {
			deliver = append(deliver, tasks[k])
		} else {
			here = append(here, tasks[k])
		}
	}
	return here, deliver
}

// delivered wakes RunDeliveries after a record that kept tasks as
// deliveries.
func (c *Coordinator) delivered(tasks []state.TaskCreated) {
	if len(tasks) == 0 {
		return
	}
	select {
	case c.delivering <- struct{}{}:
	default:
	}
}

// RunDeliveries delivers this partition's pending deliveries until ctx
// ends or the coordinator stops: record by record, each record's tasks for
// one partition by one call of deliver (those whose dependencies of the
// record are delivered already: a dependency is created before its
// dependents), then a TasksDelivered once they are durable. A group that fails is sent again
// after a backoff (1 s doubling to 30 s); the ones after it wait, so that
// a dependency always exists before its dependents. A group sent while
// its workflow was not cancelled here and found cancelled after is sent
// again, cancelled, before it is marked delivered.
func (c *Coordinator) RunDeliveries(ctx context.Context, deliver DeliverFunc) error {
	backoff := time.Duration(0)
	for {
		d, ok, err := c.nextDelivery()
		if err != nil {
			return err
		}
		if !ok {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.delivering:
			}
			continue
		}
		err = deliver(ctx, d)
		if err == nil {
			err = c.markDelivered(ctx, d)
		}
		switch {
		case err == nil:
			backoff = 0
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case c.Err() != nil:
			return c.Err()
		case errors.Is(err, errRedeliver):
			continue
		}
		backoff = min(max(2*backoff, time.Second), 30*time.Second)
		c.lg.Warn("delivering tasks to another partition failed; trying again", slog.String("partition", d.Place),
			slog.String("workflow", d.Workflow), slog.String("first_task", d.Tasks[0].TaskID), slog.Int("tasks", len(d.Tasks)),
			slog.Duration("retry_in", backoff), slog.Any("err", err))
		if err := clock.Sleep(ctx, c.cfg.Clock, backoff); err != nil {
			return err
		}
	}
}

// errRedeliver: the workflow of a group was cancelled while it was sent.
var errRedeliver = errors.New("coordinator: the workflow was cancelled during the delivery")

// nextDelivery returns the first group of pending deliveries, or false
// when there is none.
func (c *Coordinator) nextDelivery() (Delivered, bool, error) {
	if err := c.lock(); err != nil {
		return Delivered{}, false, err
	}
	defer c.mu.Unlock()
	ds := c.st.Deliveries(MaxDeliveredPerCall)
	if len(ds) == 0 {
		return Delivered{}, false, nil
	}
	// The first pending delivery, and those of its record for the same
	// partition that do not depend on one of the record left for later:
	// each dependency of a task is created before it.
	first := &ds[0]
	d := Delivered{Place: idPlace(first.Task.TaskID), Workflow: first.Workflow, Parent: first.Parent}
	var later map[string]bool
	for i := range ds {
		x := &ds[i]
		if x.LSN != first.LSN {
			break
		}
		now := idPlace(x.Task.TaskID) == d.Place && x.Workflow == d.Workflow && x.Parent == d.Parent && x.Task.Namespace == first.Task.Namespace
		for _, dep := range x.Task.DependsOn {
			now = now && !later[dep]
		}
		if !now {
			if later == nil {
				later = make(map[string]bool)
			}
			later[x.Task.TaskID] = true
			continue
		}
		d.Tasks = append(d.Tasks, x.Task)
	}
	d.Cancelled = c.cancelOf(first.Task.Namespace, d.Workflow)
	return d, true, nil
}

// cancelOf is the cancel mark of workflow namespace/id here (nil: none,
// or not cancelled).
func (c *Coordinator) cancelOf(namespace, id string) *state.Pause {
	if id == "" {
		return nil
	}
	if w := c.st.Workflow(state.WorkflowKey{Namespace: namespace, ID: id}); w != nil && w.Cancelled != nil {
		p := *w.Cancelled
		return &p
	}
	return nil
}

// markDelivered appends the TasksDelivered of d's tasks still pending,
// unless the workflow's cancel changed since d was sent (errRedeliver).
func (c *Coordinator) markDelivered(ctx context.Context, d Delivered) error {
	if err := c.lock(); err != nil {
		return err
	}
	if (c.cancelOf(d.Tasks[0].Namespace, d.Workflow) != nil) != (d.Cancelled != nil) {
		c.mu.Unlock()
		return errRedeliver
	}
	r := &state.TasksDelivered{At: c.now()}
	for i := range d.Tasks {
		if id := d.Tasks[i].TaskID; c.st.Delivering(id) {
			r.TaskIDs = append(r.TaskIDs, id)
		}
	}
	if len(r.TaskIDs) == 0 {
		c.mu.Unlock()
		return nil
	}
	return c.writeAndWait(ctx, r)
}

// idPlace is the id suffix of a task id: from its last '-' ("" for none).
func idPlace(id string) string {
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		return id[i:]
	}
	return ""
}

// CreateDelivered creates, in this partition, the tasks of d that another
// partition's record placed here (docs/design/workflows.md, "Cluster
// mode"), and returns once they are durable. Exactly once: a task whose
// id this partition knows already (a delivery repeated after the home
// failed before its TasksDelivered) is passed over, and the call is
// answered as done once what it found is durable; a task whose request id
// names another task here is passed over too (the request id is that
// task's, as a submit would answer). With d.Cancelled the workflow is
// cancelled here after the tasks are created.
func (c *Coordinator) CreateDelivered(ctx context.Context, d Delivered) error {
	if len(d.Tasks) == 0 || len(d.Tasks) > MaxDeliveredPerCall {
		return fieldErr("tasks", "%d tasks: a delivery carries 1 to %d", len(d.Tasks), MaxDeliveredPerCall)
	}
	if err := c.lock(); err != nil {
		return err
	}
	var fresh []state.TaskCreated
	for i := range d.Tasks {
		r := &d.Tasks[i]
		if idPlace(r.TaskID) != c.cfg.TaskIDSuffix {
			c.mu.Unlock()
			return fieldErr(fmt.Sprintf("tasks[%d].task_id", i), "task %s is not of this partition (id suffix %q)", r.TaskID, c.cfg.TaskIDSuffix)
		}
		if c.st.Task(r.TaskID) != nil {
			continue
		}
		if t := c.st.ByRequest(r.Namespace, r.RequestID); r.RequestID != "" && t != nil {
			c.lg.Warn("a delivered task's request id names another task of this partition: not created",
				slog.String("task", r.TaskID), slog.String("request_id", r.RequestID), slog.String("existing", t.ID))
			continue
		}
		fresh = append(fresh, *r)
	}
	var recs []state.Record
	if len(fresh) > 0 {
		if err := c.admitTasksLocked(fresh); err != nil {
			c.mu.Unlock()
			return err
		}
		r := &state.TasksSubmitted{Workflow: d.Workflow, Parent: d.Parent, Tasks: fresh, At: c.now()}
		if err := c.st.CheckSubmitted(r); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("%w: tasks delivered from another partition cannot be created here: %v", ErrInvalidDelivery, err)
		}
		recs = append(recs, r)
	}
	if p := d.Cancelled; p != nil && d.Workflow != "" {
		k := state.WorkflowKey{Namespace: d.Tasks[0].Namespace, ID: d.Workflow}
		if w := c.st.Workflow(k); w != nil || len(fresh) > 0 {
			recs = append(recs, &state.WorkflowCancelled{Namespace: k.Namespace, Workflow: k.ID, Reason: p.Reason, By: p.By, At: c.now()})
		}
	}
	return c.writeAndWait(ctx, recs...)
}

// ErrInvalidDelivery: a partition cannot create tasks another partition
// delivered to it (a dependency it does not hold): the home keeps trying,
// and logs why.
var ErrInvalidDelivery = errors.New("coordinator: invalid delivery")

// EncodeDelivered encodes d for route.DeliverPath: its tasks as the
// TasksSubmitted record that creates them (Workflow, Parent, Tasks), and
// its cancel as a WorkflowCancelled, each framed by its record type
// (2 bytes) and length (4 bytes), big-endian.
func EncodeDelivered(d Delivered) ([]byte, error) {
	recs := []state.Record{&state.TasksSubmitted{Workflow: d.Workflow, Parent: d.Parent, Tasks: d.Tasks}}
	if p := d.Cancelled; p != nil && len(d.Tasks) > 0 {
		recs = append(recs, &state.WorkflowCancelled{Namespace: d.Tasks[0].Namespace, Workflow: d.Workflow, Reason: p.Reason, By: p.By, At: p.At})
	}
	var out []byte
	for _, r := range recs {
		typ, payload, err := record.Encode(nil, r)
		if err != nil {
			return nil, err
		}
		out = binary.BigEndian.AppendUint16(out, uint16(typ))
		out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
		out = append(out, payload...)
	}
	return out, nil
}

// DecodeDelivered decodes what EncodeDelivered encoded; the place is left
// to the caller.
func DecodeDelivered(b []byte) (Delivered, error) {
	var d Delivered
	for n := 0; len(b) > 0; n++ {
		if len(b) < 6 {
			return Delivered{}, fieldErr("body", "a delivery's frame is cut short")
		}
		typ, size := record.Type(binary.BigEndian.Uint16(b)), binary.BigEndian.Uint32(b[2:])
		if uint64(size) > uint64(len(b)-6) {
			return Delivered{}, fieldErr("body", "a delivery's frame is cut short")
		}
		r, err := record.Decode(typ, b[6:6+size])
		if err != nil {
			return Delivered{}, fieldErr("body", "%v", err)
		}
		b = b[6+size:]
		switch r := r.(type) {
		case *state.TasksSubmitted:
			if n != 0 {
				return Delivered{}, fieldErr("body", "a delivery holds one TasksSubmitted, first")
			}
			d.Workflow, d.Parent, d.Tasks = r.Workflow, r.Parent, r.Tasks
		case *state.WorkflowCancelled:
			if n != 1 || r.Workflow != d.Workflow {
				return Delivered{}, fieldErr("body", "a delivery's WorkflowCancelled follows its tasks, of their workflow")
			}
			d.Cancelled = &state.Pause{By: r.By, Reason: r.Reason, At: r.At}
		default:
			return Delivered{}, fieldErr("body", "a delivery holds no %s", record.TypeOf(r))
		}
	}
	if len(d.Tasks) == 0 {
		return Delivered{}, fieldErr("body", "a delivery holds no task")
	}
	return d, nil
}

// CrossPartition is what a partition waits for of other partitions in
// cluster mode (docs/design/workflows.md, "Cluster mode"), for the
// metrics.
type CrossPartition struct {
	// Deliveries counts the tasks recorded here for other partitions and
	// not yet delivered; OldestDelivery is how long ago the first of them
	// was created (0: none).
	Deliveries     int
	OldestDelivery time.Duration
	// RemoteEdges counts the pending edges of BLOCKED tasks here to tasks
	// of other partitions.
	RemoteEdges int
}

// CrossPartition returns the pending deliveries and remote edges now,
// without a scan of the tasks.
func (c *Coordinator) CrossPartition() (CrossPartition, error) {
	if err := c.lock(); err != nil {
		return CrossPartition{}, err
	}
	defer c.mu.Unlock()
	x := CrossPartition{Deliveries: c.st.DeliveryCount(), RemoteEdges: c.st.RemoteEdgeCount()}
	if ds := c.st.Deliveries(1); len(ds) > 0 {
		x.OldestDelivery = max(0, c.now().Std().Sub(ds[0].Task.CreatedAt.Std()))
	}
	return x, nil
}
