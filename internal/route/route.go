package route

import (
	"context"
	"net/http"
	"strconv"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// Router finds the partitions that serve a request.
type Router interface {
	// Partition returns partition id (a task's partition, or the one a
	// page token names).
	Partition(ctx context.Context, id uint64) (Partition, error)
	// Task returns the partition that holds a task. An id that cannot be
	// one of this server's tasks is refused with coordinator.ErrNotFound
	// (or a *coordinator.FieldError when empty).
	Task(ctx context.Context, taskID string) (Partition, error)
	// Place returns the partition a new task of the queue goes to. With a
	// request id it is always the same one, so that a retried submit meets
	// the first try's deduplication. The queue may be created. Namespace
	// "" is the default namespace.
	Place(ctx context.Context, namespace, queue, requestID string) (Partition, error)
	// Queue returns what a lease of the queue draws from: this node's
	// partitions of it and, unless the request was forwarded, one Peer for
	// each other node that serves some of them (it leases from all of its
	// own). Both are empty for a queue that does not exist yet.
	Queue(ctx context.Context, namespace, queue string) (local []Partition, peers []Peer, err error)
	// Scope returns the partitions a listing of namespace and queue walks
	// ("" matches every one), in an order that does not change between
	// pages.
	Scope(ctx context.Context, namespace, queue string) ([]Partition, error)
	// Err is non-nil while this server serves nothing.
	Err() error
}

// Partition is one partition as a request sees it.
type Partition interface {
	// ID names the partition in page tokens (0 in embedded mode).
	ID() uint64
	// Do runs local on the partition's coordinator if this node serves it,
	// and forward with the API of the node that does otherwise. read marks
	// a call that changes nothing: in cluster mode a read served here is
	// confirmed afterwards, since only writes are fenced by the log.
	Do(ctx context.Context, read bool, local func(*coordinator.Coordinator) error, forward func(Peer) error) error
	// Peer returns the other node that serves the partition now, as this
	// node's map has it, without waiting or reading the map: nil when it
	// is served here, has no serving owner yet, or the request was
	// forwarded (served here or refused). The parts of a batch with the
	// same Peer may go to it in one call; Do is what follows a partition
	// that moved.
	Peer(ctx context.Context) Peer
}

// Peer is the API of another node, for requests forwarded to it: every
// call carries ForwardedHeader. A call that cannot reach the node fails
// with code unavailable.
type Peer interface {
	tenurev1connect.TaskServiceClient
	tenurev1connect.WorkerServiceClient
	tenurev1connect.QueueServiceClient
	tenurev1connect.ScheduleServiceClient
	tenurev1connect.OutboxServiceClient
	tenurev1connect.WorkflowServiceClient
	// Addr is the node's base URL.
	Addr() string
}

// PartitionHeader, on a forwarded request that spans partitions (queue
// statistics, bulk actions, schedule listings), names the one partition the receiving node is
// to answer for; its value is the partition id in decimal. Without it, such
// a request covers every partition it names.
const PartitionHeader = "Tenure-Partition"

// SplitHeader, on a forwarded SetQueueLimits, says which share of the
// queue's limits the partition PartitionHeader names records: "i/n", its
// index among the queue's n partitions in the order of Router.Scope.
const SplitHeader = "Tenure-Split"

// PlacedHeader, on a SubmitBatch that one node forwards to the node that
// serves the batch's home partition (PartitionHeader: a workflow batch
// whose tasks go to several partitions, docs/design/workflows.md,
// "Cluster mode"), gives the partition of each task, in decimal,
// comma-separated in the batch's order: the home writes them as the
// forwarding node placed them.
const PlacedHeader = "Tenure-Placed"

// Protocol is the version of what the nodes of a cluster send each other:
// the calls they forward, these headers, and the shapes of the answers
// they expect. It grows when those change in a way a node of the version
// before cannot follow (2: a SubmitBatch answers task ids only, a
// CompleteBatch the failed items only; 3: a node delivers the tasks of a
// workflow batch or a spawn to the partitions that own them, DeliverPath,
// and asks other nodes' WaitTask for the remote edges of the partitions
// it serves, as NodeCaller; 4: a node asks a partition's owner where its
// tasks are, WherePath). A node states the versions it
// speaks, MinProtocol to Protocol, in the cluster registry when it joins,
// and refuses to join a cluster whose active nodes speak none of them
// (package registry, docs/design/cluster.md, "Protocol versions"): no
// node carries code for a version it does not speak.
const (
	Protocol    = 4
	MinProtocol = 4
)

// NodeCaller is the principal a node names when it forwards a call of its
// own, for no client: a partition's watcher of remote edges waiting for a
// task of another partition (internal/remoteedges). With authentication
// on, such a call may only be WaitTask, which it is allowed in every
// namespace. No token's name holds a space.
const NodeCaller = "tenure node"

// ForwardedHeader marks a request that one tenure node forwarded to
// another; its value is the forwarding node's id.
const ForwardedHeader = "Tenure-Forwarded"

type forwardedKey struct{}

// NodeProbePath is where a cluster node answers another node's probe
// (docs/design/cluster.md, "Which nodes get partitions"): a GET signed as
// forwarded by a node of the cluster, over the connection a forwarded
// request would take, answered with the node's id alone. Any other caller
// is refused.
const NodeProbePath = "/tenure.cluster/probe"

// DeliverPath is where a cluster node creates, in a partition it serves,
// the tasks that a record of another partition created for it
// (docs/design/workflows.md, "Cluster mode"): a POST signed as forwarded
// by a node of the cluster, PartitionHeader naming the partition, whose
// body is coordinator.EncodeDelivered's. 200 answers that the tasks are
// durable there (created now, or found created before); another status,
// with the error as text, that they are not. Any other caller is refused.
const DeliverPath = "/tenure.cluster/deliver"

// WherePath is where a cluster node answers, for a partition it serves,
// where tasks are: their namespace, queue and workflow, which an event
// stream with a workflow filter needs for the tasks whose creation it
// did not read (docs/design/events.md, "Filters"). A POST signed as
// forwarded by a node of the cluster, PartitionHeader naming the
// partition, whose body is a WhereRequest in JSON. 200 answers a
// WhereAnswer in JSON, read from the partition's coordinator and
// confirmed as the partition's current owner's; 503, with the error as
// text, that the partition is not served there now. Any other caller is
// refused.
const WherePath = "/tenure.cluster/where"

// What one WherePath request names at most: tasks, and bytes of their
// ids (a request is at most twice that in JSON without HTML escaping,
// with three bytes of punctuation per task).
const (
	WhereMaxTasks   = 1000
	WhereMaxIDBytes = 64 << 10
)

// WhereRequest names the tasks a WherePath request asks about.
type WhereRequest struct {
	TaskIDs []string `json:"task_ids"`
}

// WhereAnswer holds the tasks of a WhereRequest that exist; the others
// are not known any more (or never were).
type WhereAnswer struct {
	Tasks []WhereTask `json:"tasks"`
}

// WhereTask is one task that exists: Index is its place in the request.
type WhereTask struct {
	Index     int    `json:"index"`
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Workflow  string `json:"workflow,omitempty"`
}

// TaskIDSuffix is the suffix of the ids of tasks created in partition id
// of a cluster.
func TaskIDSuffix(id uint64) string { return "-p" + strconv.FormatUint(id, 10) }

// NodeIdentity is a router that serves one node of a cluster: NodeID is
// its --node-id, the answer to NodeProbePath.
type NodeIdentity interface {
	NodeID() string
}

// NodeVerifier checks that a request carrying ForwardedHeader was
// forwarded by a node of this cluster, and returns that node and the
// principal it forwards for ("" without authentication).
type NodeVerifier interface {
	VerifyForwarded(h http.Header, procedure string) (node, principal string, err error)
}

// Forwarded reports whether the request being served was forwarded by
// another node (its forwarding was verified), and by which.
func Forwarded(ctx context.Context) (from string, ok bool) {
	from, ok = ctx.Value(forwardedKey{}).(string)
	return from, ok
}

// WithForwarded returns ctx marked as a request that node from forwarded,
// once that is verified.
func WithForwarded(ctx context.Context, from string) context.Context {
	return context.WithValue(ctx, forwardedKey{}, from)
}
