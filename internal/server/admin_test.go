package server_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

func TestAdminSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	n, err := node.Open(ctx, node.Config{DataDir: dir, Snapshots: host.Schedule{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		snaps server.Snapshotter
	}{{"node", n}, {"no snapshots", nil}} {
		ts := httptest.NewServer(server.New(n.Router(), server.Options{Snapshots: tc.snaps}).Handler())
		admin := tenurev1connect.NewAdminServiceClient(ts.Client(), ts.URL)
		res, err := admin.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{}))
		ts.Close()
		if tc.name == "no snapshots" {
			if connect.CodeOf(err) != connect.CodeUnimplemented {
				t.Fatalf("backend without snapshots: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m := res.Msg
		if m.GetLsn() != 2 || m.GetTasks() != 1 || m.GetPurged() != 0 || m.GetPath() != filepath.Join(dir, node.SnapshotDir, "snap-0000000000000002.tsnap") || m.GetPause() == nil {
			t.Fatalf("snapshot answer %v", m)
		}
	}
}

// TestWhoAmI: with authentication off the answer says so and lists
// nothing; with it on, it names the token, its role and scope, and which
// calls the role may make with the reason for each it may not. Without a
// token it is refused like every call.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	n := apitest.OpenNode(t)
	url, hc := h2cServer(t, server.New(n.Router(), server.Options{}))
	res, err := tenurev1connect.NewAdminServiceClient(hc, url).WhoAmI(apiCtx(t), connect.NewRequest(&tenurev1.WhoAmIRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Msg; m.GetAuthEnabled() || m.GetName() != "" || len(m.GetCalls()) != 0 {
		t.Errorf("authentication off: %v", m)
	}

	url, hc, tok := authServer(t)
	admin := tenurev1connect.NewAdminServiceClient(hc, url)
	if _, err := admin.WhoAmI(apiCtx(t), connect.NewRequest(&tenurev1.WhoAmIRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v, want unauthenticated", err)
	}
	req := connect.NewRequest(&tenurev1.WhoAmIRequest{})
	req.Header().Set("Authorization", "Bearer "+tok.Scoped[auth.Reader])
	res, err = admin.WhoAmI(apiCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Msg
	if !m.GetAuthEnabled() || m.GetName() != "reader-scoped" || m.GetRole() != "reader" ||
		!slices.Equal(m.GetNamespaces(), []string{authtest.InNamespace}) || len(m.GetQueues()) != 0 || len(m.GetCalls()) != len(auth.Rules) {
		t.Fatalf("reader token: %v", m)
	}
	allowed := map[string]string{}
	for _, c := range m.GetCalls() {
		allowed[c.GetCall()] = c.GetReason()
		if c.GetAllowed() != (c.GetReason() == "") {
			t.Errorf("%s: allowed %v, reason %q", c.GetCall(), c.GetAllowed(), c.GetReason())
		}
	}
	if r := allowed[tenurev1connect.TaskServiceRetryTaskProcedure]; !strings.Contains(r, "it needs role admin") {
		t.Errorf("reader's RetryTask: reason %q", r)
	}
	if r := allowed[tenurev1connect.QueueServiceListQueuesProcedure]; r != "" {
		t.Errorf("reader's ListQueues: refused: %q", r)
	}
}

// describer is a router that describes a cluster, as a cluster node's.
type describer struct {
	route.Router
	c   route.Cluster
	err error
}

func (d describer) Describe(context.Context) (route.Cluster, error) { return d.c, d.err }

// TestGetCluster: an embedded server says so; a cluster node answers what
// its router reads, each node with the partitions the map gives it; a
// failed read is unavailable.
func TestGetCluster(t *testing.T) {
	t.Parallel()
	n := apitest.OpenNode(t)
	call := func(r route.Router) (*tenurev1.GetClusterResponse, error) {
		url, hc := h2cServer(t, server.New(r, server.Options{}))
		res, err := tenurev1connect.NewAdminServiceClient(hc, url).GetCluster(apiCtx(t), connect.NewRequest(&tenurev1.GetClusterRequest{}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	m, err := call(n.Router())
	if err != nil || m.GetMode() != tenurev1.ServerMode_SERVER_MODE_EMBEDDED || m.GetCoordinator() != nil || len(m.GetNodes()) != 0 {
		t.Fatalf("embedded: %v %v", m, err)
	}

	hb := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := route.Cluster{
		NodeID: "n2",
		Lock:   &route.Lock{Holder: "n1", Epoch: 7, ExpiresAt: hb.Add(10 * time.Second), Live: true},
		Nodes: []route.Node{
			{ID: "n1", AdvertiseAddr: "127.0.0.1:7071", Active: true, LastHeartbeat: hb, Silent: time.Second},
			{ID: "n2", AdvertiseAddr: "127.0.0.1:7072", Active: false, LastHeartbeat: hb.Add(-time.Minute), Silent: time.Minute},
		},
		Partitions: []route.PartitionInfo{
			{ID: 1, Namespace: "default", Queue: "q", Index: 0, Owner: "n1", Epoch: 3},
			{ID: 2, Namespace: "default", Queue: "q", Index: 1, Owner: "n1", Epoch: 1},
			{ID: 3, Namespace: "default", Queue: "q", Index: 2},
		},
	}
	m, err = call(describer{Router: n.Router(), c: c})
	if err != nil {
		t.Fatal(err)
	}
	lock := m.GetCoordinator()
	if m.GetMode() != tenurev1.ServerMode_SERVER_MODE_CLUSTER || m.GetNodeId() != "n2" || lock.GetHolder() != "n1" || lock.GetEpoch() != 7 || !lock.GetLive() ||
		!lock.GetExpiresAt().AsTime().Equal(hb.Add(10*time.Second)) {
		t.Fatalf("cluster: %v", m)
	}
	if ns := m.GetNodes(); len(ns) != 2 || ns[0].GetNodeId() != "n1" || ns[0].GetPartitions() != 2 || !ns[0].GetActive() || !ns[0].GetLastHeartbeat().AsTime().Equal(hb) ||
		ns[1].GetPartitions() != 0 || ns[1].GetActive() || ns[1].GetSilent().AsDuration() != time.Minute || ns[1].GetAdvertiseAddr() != "127.0.0.1:7072" {
		t.Errorf("nodes: %v", ns)
	}
	if ps := m.GetPartitions(); len(ps) != 3 || ps[1].GetId() != 2 || ps[1].GetIndex() != 1 || ps[1].GetOwner() != "n1" || ps[1].GetEpoch() != 1 || ps[2].GetOwner() != "" {
		t.Errorf("partitions: %v", ps)
	}

	c.Lock = nil
	if m, err = call(describer{Router: n.Router(), c: c}); err != nil || m.GetCoordinator() != nil {
		t.Errorf("no lock holder: %v %v", m, err)
	}
	if _, err = call(describer{Router: n.Router(), err: errors.New("database gone")}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("failed read: %v, want unavailable", err)
	}
}
