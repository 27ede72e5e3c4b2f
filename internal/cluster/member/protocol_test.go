package member_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/route"
)

// TestJoinRefusesAnOlderProtocol: a node of a release whose protocol
// version is lower than the cluster's refuses to start, saying which
// versions it speaks and which the cluster's nodes meet at, and takes no
// part in the cluster.
func TestJoinRefusesAnOlderProtocol(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	startNode(t, db, "n1")
	m, err := member.Start(t.Context(), member.Config{
		DB:        db,
		NodeID:    "old",
		Advertise: "127.0.0.1:1",
		Registry:  registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		Protocol:  registry.Versions{Min: route.Protocol - 1, Max: route.Protocol - 1},
	})
	if err == nil {
		m.Close()
		t.Fatal("a node of the protocol version before the cluster's joined it")
	}
	want := []string{`node "old"`, fmt.Sprint("speaks protocol versions ", route.Protocol-1),
		fmt.Sprint("(n1) meet at ", registry.Versions{Min: route.MinProtocol, Max: route.Protocol})}
	for _, w := range want {
		if !errors.Is(err, registry.ErrProtocol) || !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q: want ErrProtocol saying %q", err, w)
		}
	}
	reg, err := registry.New(db, registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := reg.Active(t.Context()); err != nil || len(ids) != 1 || ids[0] != "n1" {
		t.Errorf("active nodes %v, %v; want n1 alone", ids, err)
	}
}
