package member_test

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/coordinator"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// A node whose advertised address reaches nothing (here: a port nobody
// listens on) registers, but the others cannot reach it: when a node
// leaves, its partitions go to the nodes the others reach, never to it,
// and the cluster's description says why.
func TestUnreachableNodeGetsNoPartitions(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	submitMany(t, ctx, nodes[0].api, 0, 8)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	bad, err := member.Start(ctx, member.Config{
		DB: db, NodeID: "bad", Advertise: deadAddr, Partitions: 4,
		AssignInterval: 50 * time.Millisecond, ProbeInterval: 50 * time.Millisecond,
		Election:    election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry:    registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		Coordinator: coordinator.Config{ExpiryScanInterval: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	admin := tenurev1connect.NewAdminServiceClient(http.DefaultClient, nodes[1].url)
	why := ""
	eventually(t, "the others find the node unreachable", func() bool {
		resp, err := admin.GetCluster(ctx, connect.NewRequest(&tenurev1.GetClusterRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.Msg.GetNodes() {
			if n.GetNodeId() == "bad" {
				why = n.GetEligibility()
				return !n.GetEligible() && strings.Count(why, "connection refused") == 3
			}
		}
		return false
	})
	t.Logf("the node's eligibility: %s", why)
	nodes[2].close()
	eventually(t, "n3's partitions moved", func() bool {
		for _, a := range owners(t, db) {
			if a.Owner == "n3" || a.Owner == "" {
				return false
			}
		}
		return true
	})
	for _, a := range owners(t, db) {
		if a.Owner == "bad" {
			t.Fatalf("partition %s was given to the node nobody reaches", a.Key)
		}
	}
	if bad.Eligible() || bad.UnreachablePeers() != 0 {
		t.Fatalf("the unreachable node: eligible %v, %d peers unreachable from it; want not eligible, and it reaches the others", bad.Eligible(), bad.UnreachablePeers())
	}
}
