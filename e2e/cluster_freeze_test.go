package e2e

// The cluster under a fault: a node that owns partitions frozen with SIGSTOP under load (cluster_test.go).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestClusterSIGSTOPOwner freezes a node that owns partitions (not the
// coordinator) with SIGSTOP under load: its in-flight requests freeze with
// it, and so, when the test catches one (freezeMidWrite), does a database
// transaction holding row locks. The coordinator lock must
// stay with live nodes meanwhile (lockStalled). Once the database shows all
// the frozen node's partitions owned by others at higher epochs it gets
// SIGCONT. It must stop serving them (its log says so, and it serves none
// at an old epoch), every acknowledgement must survive, those it answered
// itself included, no task may have two accepted commits, and it must
// rejoin: healthy, active, owning partitions again.
func TestClusterSIGSTOPOwner(t *testing.T) {
	c, _ := newClTest(t, -1)
	led, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)

	lk, ps := c.heldLockAndParts()
	x := c.ownerButCoordinator(lk, ps)
	xn := c.nodes[x]
	frozen := ownedBy(ps, xn.id)
	live := c.ids(x)
	c.phase.Store(1)
	cont := sync.OnceFunc(func() {
		if err := xn.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil && !xn.proc.exited() {
			t.Errorf("SIGCONT: %v", err)
		}
	})
	t.Cleanup(cont)
	held, tries := c.freezeMidWrite(xn)
	t.Logf("SIGSTOP %s (coordinator: %s) after %d acknowledgements (try %d); it owns %s; frozen inside %d database transactions holding row locks: %v",
		xn.id, lk.owner, ld.l.acks.Load(), tries, describe(frozen), len(held), held)

	var moved map[uint64]clPart
	stalled := false
	c.poll("the frozen node's partitions move to the others at higher epochs", func() (bool, error) {
		if stalled = c.lockStalled(xn); stalled {
			return true, nil
		}
		ps, err := c.parts()
		moved = movedTo(ps, frozen, func(o string) bool { return slices.Contains(live, o) })
		return moved != nil, err
	})
	if stalled {
		// The bug is reported. Resume the node, which ends its transaction
		// and lets the others go on, and check that the cluster recovers
		// and that nothing acknowledged was lost all the same.
		c.phase.Store(2)
		cont()
		c.waitBalanced("the cluster recovering once the frozen node resumed", c.ids())
		ld.progress("after the frozen node resumed", clPostAcks)
		ld.stop()
		ld.report()
		tasks := c.verify(led, (x+1)%len(c.nodes), c.ids())
		c.checkAcksOf(x, frozen, tasks, led)
		return
	}
	c.checkMovedAfterSilence(xn.id, moved)
	// Resumed well within the calls' timeout (e2eCallTimeout), so that the
	// requests frozen with the node are answered, not abandoned.
	t.Logf("while %s was frozen its partitions moved: %s; %d acknowledgements so far", xn.id, describe(moved), ld.l.acks.Load())
	if lk2, ok, err := c.lock(); err == nil && ok {
		var downs []string
		for _, i := range []int{(x + 1) % len(c.nodes), (x + 2) % len(c.nodes)} {
			for _, l := range logLines(c.nodes[i].proc.out.String(), "no longer the coordinator") {
				downs = append(downs, fmt.Sprintf("%s: %s", c.nodes[i].id, l.Reason))
			}
		}
		t.Logf("coordinator lock now: %s at epoch %d (was %s at %d); steps down so far: %d %v", lk2.owner, lk2.epoch, lk.owner, lk.epoch, len(downs), downs)
	}

	// Ask /readyz while it is frozen: the request waits in the socket and
	// is the first the node serves when it resumes (unless its heartbeat
	// gets there first; only logged).
	first := make(chan string, 1)
	go func() {
		hc := &http.Client{Timeout: 30 * time.Second}
		defer hc.CloseIdleConnections()
		code, body, err := httpGet(context.Background(), hc, xn.url()+"/readyz", "")
		if err != nil {
			first <- err.Error()
			return
		}
		first <- fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
	}()
	time.Sleep(100 * time.Millisecond) // let the request reach the frozen node's socket
	mark := len(xn.proc.out.String())
	c.phase.Store(2)
	cont()

	// It stops serving each partition it had, at the epoch it had it.
	c.poll("the resumed node logs that it stopped serving its old partitions", func() (bool, error) {
		stopped := logLines(xn.proc.out.String()[mark:], "stopped serving partition")
		for _, p := range frozen {
			if !slices.ContainsFunc(stopped, func(l clLogLine) bool { return l.Partition == p.key && l.Epoch == p.epoch }) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, l := range logLines(xn.proc.out.String()[mark:], "stopped serving partition") {
		t.Logf("%s after SIGCONT: stopped serving partition %s at epoch %d: %s", xn.id, l.Partition, l.Epoch, l.Reason)
	}
	select {
	case s := <-first:
		t.Logf("%s's first /readyz answer after SIGCONT: %s", xn.id, s)
	case <-time.After(e2eCallTimeout):
		t.Logf("%s's /readyz asked while frozen had no answer %v after SIGCONT", xn.id, e2eCallTimeout)
	}

	// It rejoins: healthy, active, and given partitions back (balance).
	back := c.waitRejoined("the resumed node healthy, active and owning partitions again", xn)
	t.Logf("%s rejoined and owns %s", xn.id, describe(back))
	for _, l := range logLines(xn.proc.out.String()[mark:], "serving partition") {
		for _, p := range frozen {
			if l.Partition == p.key && l.Epoch <= moved[p.id].epoch {
				t.Errorf("%s after SIGCONT serves partition %s at epoch %d, not above the epoch %d it moved to while the node was frozen", xn.id, l.Partition, l.Epoch, moved[p.id].epoch)
			}
		}
	}

	ld.progress("after the node resumed", clPostAcks)
	ld.stop()
	ld.report()
	tasks := c.verify(led, (x+1)%len(c.nodes), c.ids())

	c.checkAcksOf(x, frozen, tasks, led)
	c.checkStatus(c.ids())
}

// checkAcksOf checks one by one every acknowledgement that node x answered
// against the tasks as listed: before a freeze, across it (sent before
// SIGCONT, answered after) and after; for the partitions it owned when it
// froze (old) and the others.
func (c *clTest) checkAcksOf(x int, old map[uint64]clPart, tasks map[string]*tenurev1.Task, led *ackLedger) {
	t := c.t
	t.Helper()
	var all, across, oldParts, oldAcross, bad int
	for _, r := range c.tap.all() {
		if r.node != x {
			continue
		}
		all++
		_, isOld := old[partitionOfTask(r.task)]
		crossed := r.sent < 2 && r.got == 2
		if crossed {
			across++
		}
		if isOld {
			oldParts++
			if crossed {
				oldAcross++
			}
		}
		if !checkAck(t, tasks, led, r, c.nodes[x].id) {
			bad++
		}
	}
	t.Logf("%s answered %d acknowledgements (%d for its old partitions); %d were sent before SIGCONT and answered after it (%d for its old partitions); %d lost",
		c.nodes[x].id, all, oldParts, across, oldAcross, bad)
}
