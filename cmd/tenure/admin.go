package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
)

func init() {
	register(command{name: "admin snapshot", summary: "apply the retention period and take a snapshot now", run: runAdminSnapshot})
}

func runAdminSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("admin snapshot", "[flags]", stderr)
	cf := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	addr := *cf.addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	admin := tenurev1connect.NewAdminServiceClient(http.DefaultClient, addr)
	res, err := admin.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{}))
	if err != nil {
		return err
	}
	m := res.Msg
	if *cf.json {
		return printJSON(stdout, m)
	}
	fmt.Fprintf(stdout, "snapshot at lsn %d: %d tasks, %d purged by retention, %d WAL segments deleted, requests paused %v\n%s\n",
		m.GetLsn(), m.GetTasks(), m.GetPurged(), m.GetDeletedSegments(), m.GetPause().AsDuration(), m.GetPath())
	return nil
}
