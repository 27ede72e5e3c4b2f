package member_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/cluster/nodeauth"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// headerSigner marks requests as forwarded the way a process that is not a
// node could: with the header alone, or signed with another secret.
type headerSigner struct{ keys *nodeauth.Keys }

func (s headerSigner) SignForwarded(h http.Header, procedure, principal string) {
	if s.keys == nil {
		h.Set(route.ForwardedHeader, "n1")
		h.Set(nodeauth.PrincipalHeader, "admin")
		return
	}
	s.keys.Sign(h, route.ForwardedHeader, "n1", procedure, principal)
}

// TestOnlyNodesForward: a real cluster node accepts a forwarded request
// only when a node of its cluster signed it; a client that sets the
// forwarded header, names a principal, or signs with another cluster's
// secret is refused as unauthenticated, and nothing is created.
func TestOnlyNodesForward(t *testing.T) {
	_, nodes := startCluster(t, 1)
	n := nodes[0]
	ctx := t.Context()
	other, err := nodeauth.New(bytes.Repeat([]byte{7}, nodeauth.SecretBytes), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    remote.Signer
	}{{"the header alone", headerSigner{}}, {"another cluster's secret", headerSigner{other}}} {
		p := remote.New(n.url, http.DefaultClient, c.s)
		_, err := p.Submit(context.WithoutCancel(ctx), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", RequestId: "fake"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "forwarded by a node") {
			t.Fatalf("%s: %v, want unauthenticated", c.name, err)
		}
	}
	// A node of the cluster (here the node itself, signing) is accepted,
	// once the node serves the partition (a forwarded request does not hop).
	p := remote.New(n.url, http.DefaultClient, n.m)
	var last error
	eventually(t, "a request signed by a node accepted", func() bool {
		_, last = p.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", RequestId: "real"}))
		if connect.CodeOf(last) == connect.CodeUnauthenticated {
			t.Fatalf("a request signed by a node: %v", last)
		}
		return last == nil
	})
	ls, err := n.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{}))
	if err != nil || len(ls.Msg.GetTasks()) != 1 || ls.Msg.GetTasks()[0].GetRequestId() != "real" {
		t.Fatalf("tasks after the refused requests: %v, %v; want only the signed one", ls, err)
	}
}
