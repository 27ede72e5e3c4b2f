package e2e

// The cluster under a fault: a node cut off the database under load (cluster_test.go).

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/eventually"
)

// TestClusterDBCut cuts one node off the database (a proxy between them)
// under load. In one polling loop the test sees its /readyz turn non-200
// no later than the database shows one of its partitions owned by another
// node. After Restore the node must be healthy and active again and own a
// partition again, and every acknowledgement must survive.
func TestClusterDBCut(t *testing.T) {
	const cut = 2 // n3
	c, proxy := newClTest(t, cut)
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	xn := c.nodes[cut]
	ps, err := c.parts()
	if err != nil {
		t.Fatal(err)
	}
	mine := ownedBy(ps, xn.id)
	if len(mine) == 0 {
		t.Fatalf("%s owns no partition: %s", xn.id, describe(ps))
	}
	live := c.ids(cut)
	lk, _, _ := c.lock()
	t.Logf("cutting %s off the database (coordinator: %s) after %d acknowledgements; it owns %s", xn.id, lk.owner, ld.l.acks.Load(), describe(mine))
	cutAt := time.Now() // for the figures only
	proxy.Cut()

	// (a) the first non-200 /readyz, (b) the first sight of one of its
	// partitions owned by another node. Each round asks /readyz first,
	// then the database, so (a) in the round of (b) or earlier means the
	// node said it was not serving before the move was seen.
	a, b := -1, -1
	var aAt time.Duration
	var bPart clPart
	var healthErrs int
	round := 0
	eventually.Every(t, "a non-200 /readyz of the cut node and one of its partitions owned by another", 10*time.Millisecond, func() error {
		defer func() { round++ }()
		code, err := c.health(xn)
		switch {
		case err != nil:
			healthErrs++
		case code != http.StatusOK && a < 0:
			a, aAt = round, time.Since(cutAt)
		}
		if ps, err := c.parts(); err == nil && b < 0 {
			for id := range mine {
				if p := ps[id]; p.owner != xn.id {
					b, bPart = round, p
					break
				}
			}
		}
		if a < 0 || b < 0 {
			return fmt.Errorf("first non-200 /readyz in round %d, first partition moved in round %d (-1: not seen)", a, b)
		}
		return nil
	})
	if a > b {
		t.Errorf("polling round %d saw %s's partition %s owned by %s at epoch %d, but its /readyz first answered non-200 in round %d: it did not stop serving before its partitions were given away",
			b, xn.id, bPart.key, bPart.owner, bPart.epoch, a)
	}
	t.Logf("after the cut: /readyz non-200 in polling round %d (%v after the cut, test clock, logged only), first partition moved in round %d (%s to %s at epoch %d); %d /readyz errors",
		a, aAt.Round(time.Millisecond), b, bPart.key, bPart.owner, bPart.epoch, healthErrs)

	var moved map[uint64]clPart
	c.poll("the cut node's partitions all move to the others", func() (bool, error) {
		ps, err := c.parts()
		moved = movedTo(ps, mine, func(o string) bool { return slices.Contains(live, o) })
		return moved != nil, err
	})
	c.checkMovedAfterSilence(xn.id, moved)
	t.Logf("%s's partitions moved: %s", xn.id, describe(moved))
	if code, err := c.health(xn); err != nil || code == http.StatusOK {
		t.Errorf("%s cut off the database: /readyz = %d, %v; want 503", xn.id, code, err)
	}
	ld.progress("while the node is cut off", clPostAcks/2)

	mark := len(xn.proc.out.String())
	proxy.Restore()
	back := c.waitRejoined("the restored node healthy, active and owning partitions again", xn)
	stopped := logLines(xn.proc.out.String(), "stopped serving partition")
	t.Logf("after Restore %s is healthy and owns %s; it logged %d \"stopped serving partition\" lines in all, %d \"heartbeat confirmed again\" since Restore",
		xn.id, describe(back), len(stopped), len(logLines(xn.proc.out.String()[mark:], "heartbeat confirmed again")))

	ld.progress("after the restore", clPostAcks)
	ld.stop()
	ld.report()
	c.verify(led, 0, c.ids())
	c.checkStatus(c.ids())
}
