package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/schema"
	"github.com/tenurehq/tenure/internal/metrics"
)

// eligibleWait bounds the wait for the nodes to verify each other.
const eligibleWait = 30 * time.Second

// startCluster starts cfg.Cluster cluster-mode nodes in this process on
// cfg.MySQL, each behind the API on its own loopback port, with the
// defaults `tenure server --mysql` has. The first submits wait while the
// bench queue's partitions are assigned and opened.
func startCluster(ctx context.Context, cfg Config, lg *slog.Logger) (*target, error) {
	db, err := cluster.OpenDB(cfg.MySQL)
	if err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: migrating the cluster database: %w", err)
	}
	tg := &target{}
	var stops []func()
	var members []*member.Member
	tg.stop = func() error {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		return db.Close()
	}
	for i := range cfg.Cluster {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tg.stop()
			return nil, fmt.Errorf("bench: listening on a loopback port: %w", err)
		}
		mx, err := metrics.New(metrics.Config{})
		if err != nil {
			ln.Close()
			tg.stop()
			return nil, err
		}
		memberCfg := member.Config{
			DB:         db,
			NodeID:     fmt.Sprintf("bench-%d-%d", cfg.Seed, i+1),
			Advertise:  ln.Addr().String(),
			Partitions: cfg.Partitions,
			Snapshots:  cfg.Snapshots,
			Logger:     lg,
		}
		if cfg.Memory != nil {
			memberCfg.Coordinator.Memory = cfg.Memory()
		}
		mx.ConfigureMember(&memberCfg)
		m, err := member.Start(ctx, memberCfg)
		if err != nil {
			ln.Close()
			tg.stop()
			return nil, fmt.Errorf("bench: starting node %d: %w", i+1, err)
		}
		mx.WatchMember(m)
		stopAPI := serve(m, m, m, ln, mx, nil, lg)
		stops = append(stops, func() { stopAPI(); m.Close() })
		tg.urls = append(tg.urls, "http://"+ln.Addr().String())
		members = append(members, m)
	}
	// Every node verified by the others (eligible for partitions), so that
	// the queues' partitions spread over all of them from the start.
	wctx, cancel := context.WithTimeout(ctx, eligibleWait)
	defer cancel()
	for i, m := range members {
		for !m.Eligible() {
			if err := clock.Sleep(wctx, clock.Real, 20*time.Millisecond); err != nil {
				tg.stop()
				return nil, fmt.Errorf("bench: node %d was not verified by the other nodes within %v: %w", i+1, eligibleWait, err)
			}
		}
	}
	// Create the run's queues and wait until each of their partitions is
	// served (a listing visits them all), so that no timed call waits for
	// the first assignment.
	store := partition.New(db)
	for _, q := range []string{cfg.Queue, cfg.Queue + "-probe-submit", cfg.Queue + "-probe-handoff"} {
		if err := store.EnsureQueue(ctx, cfg.Namespace, q, cmp.Or(cfg.Partitions, partition.DefaultPartitions)); err != nil {
			tg.stop()
			return nil, fmt.Errorf("bench: creating queue %s: %w", q, err)
		}
		list := connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: cfg.Namespace, Queue: q, PageSize: 1})
		if _, err := tenurev1connect.NewTaskServiceClient(http.DefaultClient, tg.urls[0]).ListTasks(ctx, list); err != nil {
			tg.stop()
			return nil, fmt.Errorf("bench: waiting for the partitions of %s to be served: %w", q, err)
		}
	}
	tg.label = fmt.Sprintf("cluster of %d nodes on %s", cfg.Cluster, redactDSN(cfg.MySQL))
	tg.fsync = "database commit"
	return tg, nil
}

// redactDSN hides a DSN's password.
func redactDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	colon := strings.Index(dsn, ":")
	if at < 0 || colon < 0 || colon > at {
		return dsn
	}
	return dsn[:colon] + ":***" + dsn[at:]
}
