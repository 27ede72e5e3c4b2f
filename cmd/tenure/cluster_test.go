package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
)

// Not parallel: it sets TENURE_MYSQL.
func TestMigrateAndClusterStatus(t *testing.T) {
	dsn := clustertest.NewDatabase(t)
	ctx := context.Background()
	runOK := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, args, &out, &errb); code != 0 {
			t.Fatalf("tenure %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}
	var errb bytes.Buffer
	if code := run(ctx, []string{"migrate", "--mysql", dsn, "--check"}, &bytes.Buffer{}, &errb); code != 1 || !strings.Contains(errb.String(), "not up to date") {
		t.Fatalf("migrate --check on an empty database: exit %d, %s", code, errb.String())
	}
	if out := runOK("migrate", "--mysql", dsn); !strings.Contains(out, "applied migration 0001_init.sql") {
		t.Fatalf("migrate: %s", out)
	}
	if out := runOK("migrate", "--mysql", dsn); !strings.Contains(out, "already up to date") {
		t.Fatalf("second migrate: %s", out)
	}
	t.Setenv("TENURE_MYSQL", dsn)
	if out := runOK("migrate", "--check"); !strings.Contains(out, "up to date") {
		t.Fatalf("migrate --check: %s", out)
	}
	if out := runOK("cluster", "status"); !strings.Contains(out, "coordinator: none") || !strings.Contains(out, "nodes: none") {
		t.Fatalf("status of an empty cluster: %s", out)
	}

	db := clustertest.Open(t, dsn)
	reg, _ := registry.New(db, registry.Config{})
	for _, n := range []string{"node-a", "node-b"} {
		if err := reg.Heartbeat(ctx, n, n+":7070"); err != nil {
			t.Fatal(err)
		}
	}
	el, _ := election.New(db, election.Config{OwnerID: "node-a", TTL: 10 * time.Second})
	if held, _, err := el.TryAcquire(ctx); err != nil || !held {
		t.Fatal(held, err)
	}
	if err := partition.New(db).EnsureQueue(ctx, "ns", "q", 8); err != nil {
		t.Fatal(err)
	}
	if _, err := partition.New(db).Apply(ctx, partition.Coordinator{LockKey: election.DefaultLockKey, NodeID: "node-a"},
		map[cluster.PartitionKey]string{{Namespace: "ns", Queue: "q", Partition: 3}: "node-b"}); err != nil {
		t.Fatal(err)
	}
	out := runOK("cluster", "status")
	for _, want := range []string{"coordinator: node-a (epoch 1", "8 in 1 queues, 7 unassigned", "node-b  active  node-b:7070",
		"ns/q   0:-@0(p1) 1:-@0(p2) 2:-@0(p3) 3:node-b@1(p4)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(runOK("cluster", "status", "--json")), &st); err != nil || st.Coordinator == nil || st.Coordinator.NodeID != "node-a" || len(st.Nodes) != 2 {
		t.Fatalf("status --json: %+v, %v", st, err)
	}
	if len(st.Map) != 8 || st.Map[3] != (clusterPartition{"ns", "q", 3, 4, "node-b", 1}) {
		t.Fatalf("status --json partition map: %+v", st.Map)
	}
	if !st.NoneEligible || !strings.Contains(out, "no active node is verified by the others") {
		t.Fatalf("status before any node is verified: no_node_eligible %v;\n%s", st.NoneEligible, out)
	}

	// node-a is verified; node-b's certificate is not from the CA node-a
	// trusts: the status says who is eligible and why not.
	if err := reg.RecordProbes(ctx, "node-a", []registry.Verdict{{Target: "node-b", Detail: "x509: certificate signed by unknown authority"}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetEligibility(ctx, election.DefaultLockKey, "node-a", map[string]registry.Eligibility{"node-a": {Eligible: true, Reason: "the only node"}}); err != nil {
		t.Fatal(err)
	}
	out = runOK("cluster", "status")
	for _, want := range []string{"PARTITIONS  ELIGIBLE  WHY", "node-a  active  node-a:7070", "yes", "node-b  active  node-b:7070",
		"no        reached by 0 of the 1 other eligible nodes, needs 1; unreachable from node-a: x509: certificate signed by unknown authority"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
	st = clusterStatus{}
	if err := json.Unmarshal([]byte(runOK("cluster", "status", "--json")), &st); err != nil || st.NoneEligible || len(st.Nodes) != 2 ||
		!st.Nodes[0].Eligible || st.Nodes[1].Eligible || !strings.Contains(st.Nodes[1].Eligibility, "unknown authority") {
		t.Fatalf("status --json with node-a verified and node-b not: %+v, %v", st, err)
	}
	if code := run(ctx, []string{"migrate", "--mysql", ""}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("migrate without a DSN: exit %d, want 2", code)
	}
}

// tenure migrate (and tenure server --mysql) create the database the DSN
// names when it does not exist yet.
func TestMigrateCreatesTheDatabase(t *testing.T) {
	base := clustertest.NewDatabase(t)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName += "_created"
	dsn := cfg.FormatDSN()
	admin := clustertest.Open(t, base)
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`") })
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"migrate", "--mysql", dsn}, &out, &errb); code != 0 {
		t.Fatalf("migrate into a missing database: exit %d: %s", code, errb.String())
	}
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'helix_locks'", cfg.DBName).Scan(&n); err != nil || n != 1 {
		t.Fatalf("helix_locks in the created database: %d, %v", n, err)
	}
	cfg.DBName = ""
	if code := run(t.Context(), []string{"migrate", "--mysql", cfg.FormatDSN()}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "names no database") {
		t.Fatalf("migrate with no database in the DSN: exit %d: %s", code, errb.String())
	}
}
