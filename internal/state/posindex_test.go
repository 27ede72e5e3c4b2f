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
			next, most := 0, 0
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
				ids = ids[len(ids)/3:]
				check("after removing")
			}
			if got := slab.len() + len(slab.free); got != most {
				t.Fatalf("slab handed out %d positions for at most %d tasks at once", got, most)
			}
			if tc.mask == ^uint64(0) && x.depth == 0 {
				t.Fatalf("%d tasks did not split a table", len(live))
			}
		})
	}
}
