package e2e

// The event stream of a cluster (cluster_test.go): a consumer follows
// every partition of the load's queue through one node while the owner of
// some of them is killed -9 and they move.

import (
	"slices"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/wal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// clRecord is one record of a partition's log: its type, and its task.
type clRecord struct {
	lsn  uint64
	typ  string
	task string
}

// partitionLog reads partition id's log from its rows, as the database
// holds them.
func (c *clTest) partitionLog(id uint64) []clRecord {
	c.t.Helper()
	var out []clRecord
	if err := c.queryEach(partitionLogQuery, logEntries(64<<20, func(at uint64, e wal.Entry) error {
		r, err := record.Decode(record.Type(e.Type), e.Payload)
		if err != nil {
			return err
		}
		out = append(out, clRecord{at, record.TypeOf(r).String(), r.Task()})
		return nil
	}), id); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// TestClusterEvents: a consumer (tenure events --follow --json, a process
// of its own) follows every partition of the load's queue through n3 from
// their first records while the load runs and the node that owns the most
// of the others' partitions is killed -9 and they move: for every
// partition it sees the records of its log in the database, each once, in
// LSN order, none missing, the new owner's after the dead one's.
func TestClusterEvents(t *testing.T) {
	c, _ := newClTest(t, -1)
	_, ld := c.startBalancedLoad()
	ld.waitAcks(clPreAcks, clLoadWait)
	via := 2
	consumer := startConsumer(t, t.TempDir(), "--addr", c.nodes[via].url(), "--follow", "--from", "oldest", "--json",
		"--namespace", clNamespace, "--queue", clQueue)

	ps, err := c.parts()
	if err != nil {
		t.Fatal(err)
	}
	victim := 0
	if len(ownedBy(ps, c.nodes[1].id)) > len(ownedBy(ps, c.nodes[0].id)) {
		victim = 1
	}
	lost := ownedBy(ps, c.nodes[victim].id)
	if len(lost) == 0 {
		t.Fatalf("neither n1 nor n2 owns a partition: %s", describe(ps))
	}
	c.nodes[victim].proc.kill9(t)
	live := c.ids(victim)
	c.poll("the dead node's partitions move to live nodes", func() (bool, error) {
		ps, err := c.parts()
		if err != nil {
			return false, err
		}
		return movedTo(ps, lost, func(o string) bool { return slices.Contains(live, o) }) != nil, nil
	})
	t.Logf("killed -9 %s, which owned %s; they moved", c.nodes[victim].id, describe(lost))
	// A load of its own after the move: about 10,000 tasks submitted and
	// worked on the new owners.
	ld.progress("after the move", 20_000)
	ld.stop()

	// Every partition's log as the database holds it, and the consumer's
	// events of it: the same number, once the consumer has caught up and
	// nothing more is written (the leases the stopped workers held expire
	// meanwhile, each a record).
	var (
		logs map[uint64][]clRecord
		got  map[uint64][]*tenurev1.Event
	)
	c.poll("the consumer holds every record of every partition", func() (bool, error) {
		logs, got = map[uint64][]clRecord{}, map[uint64][]*tenurev1.Event{}
		for _, a := range consumer.answers(t) {
			for _, ev := range a.GetEvents() {
				got[ev.GetPartition()] = append(got[ev.GetPartition()], ev)
			}
		}
		same := true
		for id, p := range ps {
			if strings.HasPrefix(p.key, clNamespace+"/"+clQueue+"/") {
				logs[id] = c.partitionLog(id)
				same = same && len(logs[id]) == len(got[id])
			}
		}
		return same, nil
	})
	total := 0
	for id, l := range logs {
		evs := got[id]
		if len(evs) != len(l) {
			t.Fatalf("partition %d (%s): the consumer saw %d events, its log holds %d records", id, ps[id].key, len(evs), len(l))
		}
		for i, ev := range evs {
			if r := l[i]; ev.GetLsn() != r.lsn || ev.GetType() != r.typ || ev.GetTaskId() != r.task || r.lsn != uint64(i+1) {
				t.Fatalf("partition %d, event %d: lsn %d %s of %q; the log has lsn %d %s of %q", id, i, ev.GetLsn(), ev.GetType(), ev.GetTaskId(), r.lsn, r.typ, r.task)
			}
		}
		total += len(evs)
		fences := 0
		for _, ev := range evs {
			if ev.GetType() == "Fence" {
				fences++
			}
		}
		if _, moved := lost[id]; moved && fences < 2 {
			t.Fatalf("partition %d moved, but the consumer saw %d Fence events of it (the new owner's, after the dead one's)", id, fences)
		}
	}
	t.Logf("through %s, the consumer saw every record of the %d partitions once, in LSN order: %d events", c.nodes[via].id, len(logs), total)
}
