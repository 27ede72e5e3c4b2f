package e2e

// The cluster under a fault: the coordinator killed with -9 under load (cluster_test.go).

import (
	"slices"
	"testing"
	"time"
)

// TestClusterKillLockHolder kills the coordinator with kill -9 under load.
// Another node must take the lock with a higher epoch, no earlier than the
// dead holder's lease expired and within TTL + one standby check of that
// (database clock); the dead node's partitions must all move to live nodes
// after its silence; and every acknowledgement must survive.
func TestClusterKillLockHolder(t *testing.T) {
	c, _ := newClTest(t, -1)
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	// A holder that has renewed its lock a few times: the steady state.
	var held clLock
	c.poll("a live coordinator lock, renewed twice", func() (bool, error) {
		l, ok, err := c.lock()
		held = l
		return ok && l.epoch >= 3 && l.expires.After(l.now), err
	})
	h := c.node(held.owner)
	if h < 0 {
		t.Fatalf("the lock is held by %q, not a node of the test", held.owner)
	}
	ps, err := c.parts()
	if err != nil {
		t.Fatal(err)
	}
	lost := ownedBy(ps, held.owner)
	live := c.ids(h)
	killedAt := ld.l.acks.Load()
	c.nodes[h].proc.kill9(t)

	// The dead holder renewed every TTL/4, each renewal a lease of at
	// least TTL: its last lease is still running.
	old, ok, err := c.lock()
	if err != nil || !ok {
		t.Fatalf("reading the lock after the kill: found %v, %v", ok, err)
	}
	if old.owner != held.owner {
		t.Fatalf("the lock moved from %s to %s (epoch %d) before the dead holder's last lease could have run out (it renews every %v, leases %v)",
			held.owner, old.owner, old.epoch, clLockTTL/4, clLockTTL)
	}
	t.Logf("killed -9 the coordinator %s (lock epoch %d, lease until %v by the database's clock, %v left) after %d acknowledgements; it owned %s",
		old.owner, old.epoch, old.expires.Format(time.TimeOnly), old.expires.Sub(old.now).Round(time.Millisecond), killedAt, describe(lost))

	// A renewal the holder sent just before it died may still land:
	// the dead holder's last row is the last one seen with its name.
	var taken clLock
	c.poll("another node takes the coordinator lock", func() (bool, error) {
		l, ok, err := c.lock()
		if err != nil || !ok {
			return false, err
		}
		if l.owner == old.owner {
			old = l
			return false, nil
		}
		taken = l
		return true, nil
	})
	if !slices.Contains(live, taken.owner) {
		t.Fatalf("the lock passed to %q, not one of the live nodes %v", taken.owner, live)
	}
	if taken.epoch <= old.epoch {
		t.Errorf("the lock passed to %s at epoch %d, not above the dead holder's %d", taken.owner, taken.epoch, old.epoch)
	}
	// updated_at is the takeover's write (or a renewal after it, later
	// still): whole seconds, as is expires_at, so a takeover after the
	// expiry writes an updated_at at or after it.
	delay := taken.updated.Sub(old.expires)
	bound := clLockTTL + clStandby + time.Second // + 1 s: whole-second columns
	if delay < 0 {
		t.Errorf("%s took the lock at %v (updated_at), before the dead holder's lease ran out at %v (database clock)",
			taken.owner, taken.updated.Format(time.TimeOnly), old.expires.Format(time.TimeOnly))
	}
	if delay > bound {
		t.Errorf("%s took the lock at %v (updated_at), %v after the dead holder's lease ran out at %v: later than TTL + one standby check (+1 s for whole seconds) = %v (database clock)",
			taken.owner, taken.updated.Format(time.TimeOnly), delay, old.expires.Format(time.TimeOnly), bound)
	}
	t.Logf("takeover by the database's clock: %s holds the lock at epoch %d (was %d); updated_at %v = expiry %+v (whole seconds, bound %v); first seen at NOW(6) = expiry %+v",
		taken.owner, taken.epoch, old.epoch, taken.updated.Format(time.TimeOnly), delay, bound, taken.now.Sub(old.expires).Round(time.Millisecond))

	var moved map[uint64]clPart
	c.poll("the dead node's partitions move to live nodes", func() (bool, error) {
		ps, nodes, err := c.partsAndNodes()
		if err != nil {
			return false, err
		}
		moved = movedTo(ps, lost, func(o string) bool { return slices.Contains(live, o) && nodes[o].active })
		return moved != nil, nil
	})
	c.checkMovedAfterSilence(old.owner, moved)
	t.Logf("the dead node's %d partitions moved: %s", len(moved), describe(moved))

	ld.progress("after the takeover", clPostAcks)
	ld.stop()
	ld.report()
	c.verify(led, c.node(taken.owner), live)
	c.checkStatus(live)
}

// checkMovedAfterSilence checks that partitions taken from node id moved no
// sooner than its silence after its last heartbeat (database clock), and
// that it is marked inactive.
func (c *clTest) checkMovedAfterSilence(id string, moved map[uint64]clPart) {
	t := c.t
	t.Helper()
	nodes, err := c.nodeRows()
	if err != nil {
		t.Fatal(err)
	}
	n := nodes[id]
	if n.active {
		t.Errorf("node %s lost its partitions but is still active in the nodes table", id)
	}
	var first time.Time
	for _, p := range moved {
		if first.IsZero() || p.updated.Before(first) {
			first = p.updated
		}
		if gap := p.updated.Sub(n.lastHeartbeat); gap < clSilence {
			t.Errorf("partition %s moved from %s to %s at %v, %v after %s's last heartbeat at %v: sooner than its silence %v (database clock)",
				p.key, id, p.owner, p.updated.Format(time.TimeOnly+".000000"), gap, id, n.lastHeartbeat.Format(time.TimeOnly+".000000"), clSilence)
		}
	}
	if !first.IsZero() {
		t.Logf("%s's partitions moved %v after its last heartbeat (database clock; silence %v)", id, first.Sub(n.lastHeartbeat).Round(time.Millisecond), clSilence)
	}
}
