package e2e

// The cluster under a fault: a rolling restart of the three nodes under load (cluster_test.go).

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestClusterRollingRestart restarts the three nodes one after the other
// under load: SIGTERM, a clean exit (code 0, inactive in the nodes table),
// the same node id and address again, until it serves and the partitions
// are balanced over the three again. Every acknowledgement must survive.
func TestClusterRollingRestart(t *testing.T) {
	c, _ := newClTest(t, -1)
	led, ld := c.startBalancedLoad()

	for i, n := range c.nodes {
		got := ld.waitAcks(clPreAcks/2, clLoadWait)
		ps, err := c.parts()
		if err != nil {
			t.Fatal(err)
		}
		had := ownedBy(ps, n.id)
		lk, _, _ := c.lock()
		if err := n.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM %s: %v", n.id, err)
		}
		if code := waitProcExit(t, n.proc); code != 0 {
			t.Fatalf("%s exited with %d after SIGTERM, want 0", n.id, code)
		}
		if !strings.Contains(n.proc.out.String(), "stopped cleanly") {
			t.Errorf("%s's log does not say it stopped cleanly", n.id)
		}
		nodes, err := c.nodeRows()
		if err != nil {
			t.Fatal(err)
		}
		if nodes[n.id].active {
			t.Errorf("%s stopped cleanly but is still active in the nodes table", n.id)
		}
		// The first and the last node come back once their partitions
		// have moved to the others (a hand-off both ways); the middle one
		// at once, before the coordinator has moved anything (it reopens
		// its partitions at the same epochs).
		away := "restarted at once"
		if i%2 == 0 {
			var moved map[uint64]clPart
			c.poll(fmt.Sprintf("%s's partitions move to the others while it is down", n.id), func() (bool, error) {
				ps, err := c.parts()
				moved = movedTo(ps, had, func(o string) bool { return o != n.id && o != "" })
				return moved != nil, err
			})
			away = "while down, its partitions moved: " + describe(moved)
		}
		c.start(n, false)
		back := c.waitBalanced(fmt.Sprintf("%s owning partitions again after its restart", n.id), c.ids())
		t.Logf("restart %d: %s (coordinator was %s; %d acknowledgements since the last step) owned %s; %s; after its restart: %s",
			i+1, n.id, lk.owner, got, describe(had), away, describe(back))
		ld.progress(fmt.Sprintf("after restarting %s", n.id), clPostAcks/2)
	}

	ld.progress("after the rolling restart", clPostAcks)
	ld.stop()
	ld.report()
	c.verify(led, 0, c.ids())
	c.checkStatus(c.ids())
}
