package state

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestPosIndex adds and removes tasks of a slab in a posIndex in random
// order, past the size where tables split, and checks after each step that
// exactly the tasks added and not removed are found, each in the table its
// hash chooses, and that removed positions are reused. With hashes cut to
// a few bits, every key collides and no split can tell tables apart.
func TestPosIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		mask uint64
		n    int
	}{
		{"full hashes", ^uint64(0), 40000},
		{"colliding hashes", 7, 1500},
		{"hashes of few distinct values", 0xff00_0000_0000_1fff, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hashMask = tc.mask
			defer func() { hashMask = ^uint64(0) }()
			rng := rand.New(rand.NewPCG(1, 2))
			var slab taskSlab
			x := newPosIndex(&slab, taskHash)
			live := map[string]*Task{}
			var ids []string
			next, most, tombs := 0, 0, 0
			check := func(step string) {
				t.Helper()
				if x.n != len(live) || slab.len() != len(live) {
					t.Fatalf("%s: index counts %d, slab %d, want %d", step, x.n, slab.len(), len(live))
				}
				seen := 0
				x.all(func(tb *posTable, task *Task) {
					seen++
					if tb != x.table(taskHash(task)) || live[task.ID] != task {
						t.Fatalf("%s: task %q is in the wrong table or not live", step, task.ID)
					}
				})
				if seen != len(live) {
					t.Fatalf("%s: %d entries, want %d", step, seen, len(live))
				}
				if errs := x.countErrors(); len(errs) > 0 {
					t.Fatalf("%s: %v", step, errs)
				}
				for id, task := range live {
					if got := x.find(hashString(id), func(c *Task) bool { return c.ID == id }); got != task {
						t.Fatalf("%s: find(%q) = %p, want %p", step, id, got, task)
					}
				}
			}
			for round := 0; round < 4; round++ {
				for range tc.n / 2 {
					task := slab.alloc()
					task.ID = "task-" + strconv.Itoa(next)
					next++
					x.add(taskHash(task), task)
					live[task.ID] = task
					ids = append(ids, task.ID)
					most = max(most, len(live))
				}
				check("after adding")
				rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
				for _, id := range ids[:len(ids)/3] {
					task := live[id]
					x.remove(taskHash(task), task)
					delete(live, id)
					slab.release(task)
					if x.find(hashString(id), func(c *Task) bool { return c.ID == id }) != nil {
						t.Fatalf("removed task %q is still found", id)
					}
				}
				x.all(func(tb *posTable, _ *Task) { tombs = max(tombs, tb.tombs) })
				ids = ids[len(ids)/3:]
				check("after removing")
			}
			if got := slab.len() + len(slab.free); got != most {
				t.Fatalf("slab handed out %d positions for at most %d tasks at once", got, most)
			}
			if tombs == 0 {
				t.Fatal("no removal left a tombstone")
			}
			if tc.mask == ^uint64(0) && x.depth == 0 {
				t.Fatalf("%d tasks did not split a table", len(live))
			}
		})
	}
}

// TestPosIndexChurn: tasks added and removed first in, first out, at most
// 1,000 at once, for 200,000 tasks: the tombstones the removals leave are
// reused or rebuilt away, so the tables stay at the size that 1,000 tasks
// need, and every live task is found.
func TestPosIndexChurn(t *testing.T) {
	var slab taskSlab
	x := newPosIndex(&slab, taskHash)
	var live []*Task
	slots := func() int {
		n := 0
		for i, tb := range x.dir {
			if i == 0 || x.dir[i-1] != tb {
				n += len(tb.slots)
			}
		}
		return n
	}
	most := 0
	for i := range 200_000 {
		task := slab.alloc()
		task.ID = "task-" + strconv.Itoa(i)
		x.add(taskHash(task), task)
		live = append(live, task)
		if len(live) == 1000 {
			for _, old := range live[:500] {
				x.remove(taskHash(old), old)
				slab.release(old)
			}
			live = append(live[:0], live[500:]...)
		}
		if i == 10_000 {
			most = slots()
		}
	}
	if errs := x.countErrors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, task := range live {
		if x.find(taskHash(task), func(c *Task) bool { return c == task }) != task {
			t.Fatalf("live task %q not found", task.ID)
		}
	}
	// 1,000 tasks fit in 2,048 slots; a table that doubled at seven
	// eighths of tasks and tombstones, instead of clearing the tombstones,
	// would be larger.
	if got := slots(); got > most || got > 2048 {
		t.Fatalf("the tables hold %d slots for at most 1,000 tasks (%d after 10,000 tasks)", got, most)
	}
}

// BenchmarkPosIndexChurn adds a task and removes the oldest, first in,
// first out, with 300,000 tasks held: the steady state of a server whose
// finished tasks are purged as fast as new ones arrive (removals and the
// rebuilds or moves they cause included). ns/op is one add and one
// remove.
func BenchmarkPosIndexChurn(b *testing.B) {
	const held = 300_000
	var slab taskSlab
	x := newPosIndex(&slab, taskHash)
	live := make([]*Task, 0, held)
	next := 0
	add := func() {
		task := slab.alloc()
		task.ID = "task-" + strconv.Itoa(next) + "-0123456789abcdef"
		next++
		x.add(taskHash(task), task)
		live = append(live, task)
	}
	for range held {
		add()
	}
	b.ResetTimer()
	for i := range b.N {
		old := live[i%held]
		x.remove(taskHash(old), old)
		slab.release(old)
		task := slab.alloc()
		task.ID = "task-" + strconv.Itoa(next) + "-0123456789abcdef"
		next++
		x.add(taskHash(task), task)
		live[i%held] = task
	}
}
