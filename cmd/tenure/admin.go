package main

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// adminSnapshotCmd is `tenure admin snapshot`.
type adminSnapshotCmd struct{ client clientFlags }

func (*adminSnapshotCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "snapshot [flags]", Short: "apply the retention period and take a snapshot now"}
}

func (c *adminSnapshotCmd) define(fs *pflag.FlagSet) { c.client.add(fs) }

func (c *adminSnapshotCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	opts, err := c.client.options()
	if err != nil {
		return err
	}
	hc := client.DefaultHTTPClient(client.ProtocolConnect)
	hc.Transport.(*http.Transport).TLSClientConfig = opts.TLSConfig
	admin := tenurev1connect.NewAdminServiceClient(hc, c.client.url())
	req := connect.NewRequest(&tenurev1.SnapshotRequest{})
	if opts.Token != "" {
		req.Header().Set("Authorization", "Bearer "+opts.Token)
	}
	res, err := admin.Snapshot(ctx, req)
	if err != nil {
		return err
	}
	m := res.Msg
	if c.client.json {
		return printJSON(a.stdout, m)
	}
	fmt.Fprintf(a.stdout, "snapshot at lsn %d: %d tasks, %d purged by retention, %d WAL segments deleted, requests paused %v\n%s\n",
		m.GetLsn(), m.GetTasks(), m.GetPurged(), m.GetDeletedSegments(), m.GetPause().AsDuration(), m.GetPath())
	return nil
}
