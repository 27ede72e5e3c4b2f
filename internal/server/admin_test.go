package server_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
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
