package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/registry"
)

// Verdicts are recorded per pair, the latest replacing the one before,
// with their age by the database's clock; eligibility is written only by
// the lock's holder; stale verdicts are deleted.
func TestProbesAndEligibility(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	r, err := registry.New(db, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RecordProbes(ctx, "n1", []registry.Verdict{{Target: "n2", OK: true, Detail: "answered"}, {Target: "u", Detail: "x509: certificate signed by unknown authority"}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 2000) // cut on a rune boundary to fit the column
	if err := r.RecordProbes(ctx, "n1", []registry.Verdict{{Target: "n2", Detail: long}}); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordProbes(ctx, "n2", nil); err != nil {
		t.Fatal(err)
	}
	ps, err := r.Probes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Prober != "n1" || ps[0].Target != "n2" || ps[0].OK || !strings.HasSuffix(ps[0].Detail, "é…") ||
		ps[1].Target != "u" || ps[1].OK || ps[1].Age > time.Minute {
		t.Fatalf("Probes = %+v", ps)
	}

	if on, err := r.Probes(ctx, "u"); err != nil || len(on) != 1 || on[0].Target != "u" {
		t.Fatalf("Probes on u = %+v, %v", on, err)
	}

	el, err := election.New(db, election.Config{OwnerID: "n1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if held, _, err := el.TryAcquire(ctx); err != nil || !held {
		t.Fatal(held, err)
	}
	changes := map[string]registry.Eligibility{"n1": {Eligible: true, Reason: "the only node"}, "u": {Reason: "unreachable"}}
	if err := r.SetEligibility(ctx, election.DefaultLockKey, "n2", changes); !errors.Is(err, cluster.ErrNotCoordinator) {
		t.Fatalf("SetEligibility by a node without the lock = %v, want ErrNotCoordinator", err)
	}
	if es, err := r.Eligibilities(ctx); err != nil || len(es) != 0 {
		t.Fatalf("after a refused SetEligibility: %v, %v", es, err)
	}
	if err := r.SetEligibility(ctx, election.DefaultLockKey, "n1", changes); err != nil {
		t.Fatal(err)
	}
	es, err := r.Eligibilities(ctx)
	if err != nil || len(es) != 2 || !es["n1"].Eligible || es["n1"].Reason != "the only node" || es["u"].Eligible || es["u"].Since > time.Minute {
		t.Fatalf("Eligibilities = %+v, %v", es, err)
	}

	if _, err := db.Exec("UPDATE node_probes SET checked_at = TIMESTAMPADD(MINUTE, -11, NOW(6)) WHERE target_id = 'u'"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteStaleProbes(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, err := r.Probes(ctx, ""); err != nil || len(ps) != 1 || ps[0].Target != "n2" {
		t.Fatalf("after deleting the stale verdicts: %+v, %v", ps, err)
	}
}
