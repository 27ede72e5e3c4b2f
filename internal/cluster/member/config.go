package member

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/route"
)

// Defaults of Config.
const (
	DefaultAssignInterval = time.Second
	DefaultAssignWait     = 15 * time.Second
	DefaultProbeInterval  = 2 * time.Second
	DefaultProbeTimeout   = 5 * time.Second
)

// Config configures a Member. Zero fields take their defaults.
type Config struct {
	// DB is the cluster's database (cluster.OpenDB), migrated.
	DB *sql.DB
	// NodeID is this node's --node-id: its owner id in the lock, its row in
	// the registry and its name as a partition owner. Unique per process.
	NodeID string
	// Advertise is the host:port other nodes and clients reach this node's
	// API at (--advertise).
	Advertise string
	// Partitions is the partition count of a queue this node creates (on
	// its first submit); default 8. A queue keeps the count it was created
	// with.
	Partitions int
	// AssignInterval is how often the coordinator reallocates and every
	// node reads its assignments (default 1 s).
	AssignInterval time.Duration
	// AssignWait bounds how long a request waits for a partition to get an
	// owner, or for this node to open one assigned to it (default 15 s);
	// then it is answered unavailable.
	AssignWait time.Duration
	// ProbeInterval is how often the node probes every other active node
	// at its advertised address, as it would forward a request to it
	// (default 2 s): the coordinator gives partitions only to the nodes
	// that the others reach (docs/design/cluster.md, "Which nodes get
	// partitions"). Every node of a cluster should use the same: a
	// verdict counts for three intervals (of the coordinator's) and a
	// probe.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe (default 5 s).
	ProbeTimeout time.Duration
	// Election configures the coordinator lock; OwnerID is set to NodeID.
	Election election.Config
	// Registry configures heartbeats and the silence after which the
	// coordinator marks a node inactive.
	Registry registry.Config
	// Protocol are the protocol versions the node states when it joins
	// (zero: route.MinProtocol to route.Protocol, what this binary
	// speaks); tests set others to play a node of another release.
	Protocol registry.Versions
	// Coordinator is the configuration of every partition's coordinator;
	// TaskIDSuffix and Fence are set per partition.
	Coordinator coordinator.Config
	// Log configures every partition's log.
	Log mysqllog.Options
	// Snapshots: each served partition is snapshotted into the database on
	// this schedule (package host; at least 1 s apart, with a retention of
	// at least 1 s); log rows below the oldest kept snapshot are deleted,
	// and a new owner replays from the newest.
	Snapshots host.Schedule
	// HTTPClient forwards requests to other nodes (default: HTTP/1.1 and
	// unencrypted HTTP/2, keep-alive; over TLS with PeerDialTLS).
	HTTPClient connect.HTTPClient
	// PeerDialTLS, if set, makes the calls to other nodes HTTPS: the
	// default HTTPClient makes its connections with it, and speaks HTTP/2
	// or HTTP/1.1 as the far node chooses (tlsfiles.Reloader.DialPeer:
	// this node's certificate, the peer CA). Nil: plain HTTP.
	PeerDialTLS func(ctx context.Context, network, addr string) (net.Conn, error)
	// Clock measures trust and intervals; nil is the real clock.
	Clock  clock.Clock
	Logger *slog.Logger
	// HostObserver, if set, is told of every partition's opens, snapshots
	// and close (metrics).
	HostObserver host.Observer
	// PeerInterceptors run on every request this node forwards to another
	// (metrics count them).
	PeerInterceptors []connect.Interceptor
}

func (c *Config) withDefaults() error {
	if c.DB == nil {
		return fmt.Errorf("member: Config.DB is nil")
	}
	if err := cluster.CheckName("member: node id (--node-id)", c.NodeID); err != nil {
		return err
	}
	if err := cluster.CheckName("member: advertise address (--advertise)", c.Advertise); err != nil {
		return err
	}
	c.Partitions = cmp.Or(c.Partitions, partition.DefaultPartitions)
	if c.Partitions < 1 || c.Partitions > cluster.MaxPartitionsPerQueue {
		return fmt.Errorf("member: %d partitions per queue; want 1 to %d", c.Partitions, cluster.MaxPartitionsPerQueue)
	}
	c.AssignInterval = cmp.Or(c.AssignInterval, DefaultAssignInterval)
	if c.AssignInterval < 10*time.Millisecond || c.AssignInterval > time.Minute {
		return fmt.Errorf("member: assign interval %v; want 10ms to 1m", c.AssignInterval)
	}
	c.ProbeInterval = cmp.Or(c.ProbeInterval, DefaultProbeInterval)
	if c.ProbeInterval < 10*time.Millisecond || c.ProbeInterval > time.Minute {
		return fmt.Errorf("member: probe interval %v; want 10ms to 1m", c.ProbeInterval)
	}
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, DefaultProbeTimeout)
	if c.ProbeTimeout < 10*time.Millisecond || c.ProbeTimeout > time.Minute {
		return fmt.Errorf("member: probe timeout %v; want 10ms to 1m", c.ProbeTimeout)
	}
	c.AssignWait = cmp.Or(c.AssignWait, DefaultAssignWait)
	if c.AssignWait < c.AssignInterval {
		return fmt.Errorf("member: assign wait %v is shorter than the assign interval %v", c.AssignWait, c.AssignInterval)
	}
	if s := c.Snapshots; s.Every < 0 || (s.Every > 0 && s.Every < time.Second) || s.Retention < 0 || (s.Retention > 0 && s.Retention < time.Second) || s.Keep < 0 {
		return fmt.Errorf("member: snapshot interval %v (want at least 1s), retention %v (want at least 1s) or snapshots kept %d (want at least 1)", s.Every, s.Retention, s.Keep)
	}
	c.Clock = cmp.Or(c.Clock, clock.Real)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: c.peerTransport()}
	}
	if c.Protocol == (registry.Versions{}) {
		c.Protocol = registry.Versions{Min: route.MinProtocol, Max: route.Protocol}
	}
	c.Election.OwnerID = c.NodeID
	c.Election.Logger = cmp.Or(c.Election.Logger, c.Logger)
	c.Election.Clock = cmp.Or(c.Election.Clock, c.Clock)
	c.Registry.Logger = cmp.Or(c.Registry.Logger, c.Logger)
	c.Registry.Clock = cmp.Or(c.Registry.Clock, c.Clock)
	c.Log.Logger = cmp.Or(c.Log.Logger, c.Logger)
	c.Coordinator.Logger = cmp.Or(c.Coordinator.Logger, c.Logger)
	c.Coordinator.Clock = cmp.Or(c.Coordinator.Clock, c.Clock)
	return nil
}

// peerTransport is the transport of the calls to other nodes: HTTP/1.1
// and HTTP/2, over TLS with PeerDialTLS (the far node chooses), else
// unencrypted.
func (c *Config) peerTransport() *http.Transport {
	t := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, Protocols: new(http.Protocols)}
	t.Protocols.SetHTTP1(true)
	if c.PeerDialTLS != nil {
		t.DialTLSContext = c.PeerDialTLS
		t.Protocols.SetHTTP2(true)
	} else {
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t
}

// probeClient is the client of the probes: the peer transport, each probe
// on a new connection, so that it makes the TLS handshake a new forwarded
// connection would (a certificate replaced since is checked).
func (c *Config) probeClient() *http.Client {
	t := c.peerTransport()
	t.DisableKeepAlives = true
	return &http.Client{Transport: t}
}

// trustWindow is how long after sending a confirmed heartbeat the node
// keeps serving: Silence − Silence/5, so it stops before the coordinator
// can see it silent.
func trustWindow(r registry.Config) time.Duration {
	return r.Silence - r.Silence/5
}
