package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/cluster/schema"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/tlsfiles"
)

// clusterFlags are the flags of `tenure server` in cluster mode.
type clusterFlags struct {
	dsn, nodeID, advertise string
	mysqlTLSCA             string
	migrate                bool
	partitions             int
	lockTTL, lockRenew     time.Duration
	standbyCheck           time.Duration
	heartbeat, silence     time.Duration
	assignInterval         time.Duration
	failbackAfter          time.Duration
	probeInterval          time.Duration
}

func (f *clusterFlags) add(fs *pflag.FlagSet) {
	addMySQLFlag(fs, &f.dsn, &f.mysqlTLSCA)
	fs.StringVar(&f.nodeID, "node-id", envOr("TENURE_NODE_ID", ""), "cluster mode: this node's id, unique in the cluster (env TENURE_NODE_ID)")
	fs.StringVar(&f.advertise, "advertise", envOr("TENURE_ADVERTISE", ""), "cluster mode: host:port where other nodes and clients reach this node (default: the --listen address) (env TENURE_ADVERTISE)")
	fs.BoolVar(&f.migrate, "migrate", true, "cluster mode: apply the schema migrations at start (--migrate=false: only check the schema is current)")
	fs.IntVar(&f.partitions, "partitions", partition.DefaultPartitions, "cluster mode: partitions of a queue created by this node (a queue keeps the count it was created with)")
	fs.DurationVar(&f.lockTTL, "lock-ttl", election.DefaultTTL, "cluster mode: lease of the coordinator lock, whole seconds")
	fs.DurationVar(&f.lockRenew, "lock-renew", 0, "cluster mode: how often the coordinator renews its lock (default: lock-ttl/4)")
	fs.DurationVar(&f.standbyCheck, "standby-check", election.DefaultCheckInterval, "cluster mode: how often a standby node checks the coordinator lock")
	fs.DurationVar(&f.heartbeat, "node-heartbeat", registry.DefaultHeartbeatInterval, "cluster mode: how often a node heartbeats in the node table")
	fs.DurationVar(&f.silence, "node-silence", registry.DefaultSilence, "cluster mode: a node silent this long is marked inactive and its partitions move; a node stops serving after 4/5 of it without a confirmed heartbeat")
	fs.DurationVar(&f.failbackAfter, "mysql-failback-after", cluster.DefaultFailbackAfter,
		"cluster mode, with several databases in --mysql: a node that left a database for a later one of its list moves back once the earlier one has passed every readiness check (one a second) for this long; 0 or less: never move back")
	fs.DurationVar(&f.probeInterval, "node-probe-interval", member.DefaultProbeInterval,
		"cluster mode: how often a node calls every other node at its advertised address as it forwards requests (TLS, certificates, the cluster's signature); only nodes the others reach get partitions; give every node the same")
	fs.DurationVar(&f.assignInterval, "assign-interval", member.DefaultAssignInterval, "cluster mode: how often the coordinator reallocates partitions and nodes check their assignments")
}

// runClusterServer runs `tenure server --mysql DSN`: one node of a
// cluster.
// snaps is the snapshot schedule (the flags shared with embedded mode);
// mx is served at GET /metrics; authn, if not nil, authenticates callers;
// lim bounds what clients can hold of the server. With tlsFiles (nil:
// plain HTTP) it serves HTTPS, and calls the other nodes over HTTPS too.
// ob names the outboxes it relays.
func runClusterServer(ctx context.Context, cf clusterFlags, listen string, coordCfg coordinator.Config, snaps host.Schedule, pprof bool, lim limitFlags, mx *metrics.Metrics,
	authn server.Authenticator, tlsFiles *tlsfiles.Reloader, lg *slog.Logger, stdout io.Writer, ob outboxFlags, clk clock.Clock) error {
	if cf.nodeID == "" {
		return usageError{"--node-id (or TENURE_NODE_ID) is required with --mysql: a name for this node, unique in the cluster"}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another server running there? pass --listen)", listen, err)
	}
	defer ln.Close()
	advertise := cf.advertise
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	if host, _, err := net.SplitHostPort(advertise); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		return usageError{fmt.Sprintf("--advertise %q: give a host:port the other nodes can reach (not an unspecified address like 0.0.0.0)", advertise)}
	}

	if err := useMySQLTLSCA(cf.dsn, cf.mysqlTLSCA); err != nil {
		return err
	}
	if cf.migrate {
		if err := cluster.CreateDatabase(ctx, cf.dsn); err != nil {
			return dbHint(err)
		}
	}
	failback := cf.failbackAfter
	if failback <= 0 {
		failback = -1 // DBOptions: never
	}
	db, err := openClusterDB(ctx, cf.dsn, cluster.DBOptions{Logger: lg, FailbackAfter: failback})
	if err != nil {
		return err
	}
	defer db.Close()
	if cf.migrate {
		applied, err := schema.Migrate(ctx, db)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			lg.Info("applied schema migrations", "now_at", schema.Latest(), "applied", applied)
		}
	} else if err := schema.Check(ctx, db); err != nil {
		return fmt.Errorf("%w (run `tenure migrate --mysql DSN`, or start with --migrate)", err)
	}

	memberCfg := member.Config{
		DB:             db,
		NodeID:         cf.nodeID,
		Advertise:      advertise,
		Partitions:     cf.partitions,
		AssignInterval: cf.assignInterval,
		ProbeInterval:  cf.probeInterval,
		Election: election.Config{
			TTL:           cf.lockTTL,
			RenewInterval: cf.lockRenew,
			CheckInterval: cf.standbyCheck,
		},
		Registry:    registry.Config{HeartbeatInterval: cf.heartbeat, Silence: cf.silence},
		Coordinator: coordCfg,
		Snapshots:   snaps,
		Logger:      lg,
	}
	if tlsFiles != nil {
		memberCfg.PeerDialTLS = tlsFiles.DialPeer
	}
	mx.ConfigureMember(&memberCfg)
	m, err := member.Start(ctx, memberCfg)
	if err != nil {
		return err
	}
	mx.WatchMember(m)
	api := newAPIServer(m, m, m, coordCfg, pprof, lim, mx, authn, lg)
	rl, err := ob.open(ctx, api, mx, clk, lg)
	if err != nil {
		m.Close()
		return err
	}
	defer rl.close()
	rl.start(ctx, lg)
	h := api.Serve(ln, server.HTTPConfig{TLS: tlsFiles})
	defer h.Close() // after a graceful stop, a no-op
	lg.Info("tenure cluster node serving", "node_id", cf.nodeID, "listen", ln.Addr().String(), "advertise", advertise)
	fmt.Fprintf(stdout, "tenure node %s serving on %s (cluster database, advertised as %s)\n", cf.nodeID, h.URL(), advertise)

	if err := serveUntilDone(ctx, h, lg); err != nil {
		m.Close()
		return err
	}
	if err := m.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	lg.Info("stopped cleanly")
	return nil
}
