package state

import "fmt"

// posIndex finds a task by the 64-bit hash of a key it holds (its id, or
// its namespace and request id), storing the task's slab position
// (slab.go) rather than the key or a pointer: 4 bytes per slot, plus a
// byte of the hash (a tag) so that a lookup reads almost no task but the
// one it looks for. Keys whose hashes collide sit in the same probe
// sequence; every lookup compares the key itself, so a collision costs
// time, never correctness.
//
// It is extendible hashing over open-addressing tables: the top depth
// bits of a hash choose a directory entry, which points at the table that
// holds the hashes with those top bits (several entries may share one); a
// table probes linearly from the low bits of the hash. A table that is
// seven eighths full (the tags keep the long probes of that load cheap)
// doubles, up to maxTableSlots; past that it splits in
// two by one more bit of the hash. So no insert ever moves more than one
// table's entries, whatever the number of tasks. Tables do not shrink when
// tasks are dropped: their slots serve the tasks created next.
//
// A removal leaves a tombstone where its probe sequence goes on (an empty
// slot where it does not), so that it reads no other task: shifting the
// entries after it back would hash each of them again, a read of a task
// and of its key apiece, which made a purge of a large state slow. A
// tombstone counts toward the seven eighths; a table that reaches them
// with many tombstones is rebuilt at its size rather than doubled, and the
// next insert on a tombstone's probe sequence reuses it.
type posIndex struct {
	dir   []*posTable
	depth uint8
	n     int
	slab  *taskSlab
	// hash is the hash of the key the index holds, of a task in it.
	hash func(*Task) uint64
}

// posTable is one open-addressing table of a posIndex.
type posTable struct {
	// slots holds position+1 of a task, 0 for an empty slot and tomb for
	// a tombstone; its length is a power of two.
	slots []uint32
	// tags[i] is tagOf the hash of the task in slots[i].
	tags []uint8
	// used counts the tasks, tombs the tombstones.
	used, tombs int
	// depth is the number of top bits of the hash shared by its tasks.
	depth uint8
}

const (
	minTableSlots = 16
	// maxTableSlots makes the largest table's slots 32 KiB, the largest
	// small size class.
	maxTableSlots = 8192
	// maxDepth bounds the directory, far beyond any number of tasks.
	maxDepth = 40
	// tomb marks a removed entry; no slab position is this large
	// (taskSlab.alloc).
	tomb = ^uint32(0)
)

func newPosIndex(slab *taskSlab, hash func(*Task) uint64) posIndex {
	return posIndex{dir: []*posTable{newPosTable(minTableSlots, 0)}, slab: slab, hash: hash}
}

func newPosTable(slots int, depth uint8) *posTable {
	return &posTable{slots: make([]uint32, slots), tags: make([]uint8, slots), depth: depth}
}

func tagOf(h uint64) uint8 { return uint8(h >> 32) }

// table returns the table that holds hash h.
func (x *posIndex) table(h uint64) *posTable {
	if x.depth == 0 {
		return x.dir[0]
	}
	return x.dir[h>>(64-x.depth)]
}

// find returns the task under hash h for which match is true, or nil.
func (x *posIndex) find(h uint64, match func(*Task) bool) *Task {
	tb := x.table(h)
	mask := len(tb.slots) - 1
	tag := tagOf(h)
	for i := int(h) & mask; tb.slots[i] != 0; i = (i + 1) & mask {
		if e := tb.slots[i]; tb.tags[i] == tag && e != tomb {
			if t := x.slab.at(e - 1); match(t) {
				return t
			}
		}
	}
	return nil
}

// add adds t under h. The caller has checked that no task holds t's key.
func (x *posIndex) add(h uint64, t *Task) {
	tb := x.table(h)
	for (tb.used+tb.tombs+1)*8 > len(tb.slots)*7 {
		x.grow(tb)
		tb = x.table(h)
	}
	tb.put(h, t.pos+1)
	x.n++
}

// put stores entry e with hash h in the first empty slot or tombstone of
// its probe sequence; the table has one.
func (tb *posTable) put(h uint64, e uint32) {
	mask := len(tb.slots) - 1
	i := int(h) & mask
	for tb.slots[i] != 0 && tb.slots[i] != tomb {
		i = (i + 1) & mask
	}
	if tb.slots[i] == tomb {
		tb.tombs--
	}
	tb.slots[i], tb.tags[i] = e, tagOf(h)
	tb.used++
}

// grow makes room in tb: it rebuilds it at its size without its tombstones
// if they take a quarter of it, else doubles it, or splits it in two if it
// is as large as a table gets and its tasks differ in the next bit of
// their hashes (when they do not, which only hashes cut short in tests
// cause, it doubles anyway).
func (x *posIndex) grow(tb *posTable) {
	if tb.tombs*4 >= len(tb.slots) {
		x.replace(tb, len(tb.slots))
		return
	}
	if len(tb.slots) >= maxTableSlots && tb.depth < maxDepth && x.split(tb) {
		return
	}
	x.replace(tb, 2*len(tb.slots))
}

// replace puts tb's tasks in a new table of the given number of slots, in
// tb's place.
func (x *posIndex) replace(tb *posTable, slots int) {
	nt := newPosTable(slots, tb.depth)
	tb.each(func(e uint32) { nt.put(x.hash(x.slab.at(e-1)), e) })
	for i, d := range x.dir {
		if d == tb {
			x.dir[i] = nt
		}
	}
}

// split replaces tb by two tables of its size, one for the hashes whose
// next bit (after the depth bits tb's tasks share) is 0 and one for those
// where it is 1, doubling the directory first if tb is already told apart
// by every bit of it. It sorts the tasks first, reading each task's key
// once, and changes nothing and returns false if they all fall on one
// side.
func (x *posIndex) split(tb *posTable) bool {
	bit := uint64(1) << (63 - tb.depth)
	lo, hi := newPosTable(len(tb.slots), tb.depth+1), newPosTable(len(tb.slots), tb.depth+1)
	tb.each(func(e uint32) {
		if h := x.hash(x.slab.at(e - 1)); h&bit == 0 {
			lo.put(h, e)
		} else {
			hi.put(h, e)
		}
	})
	if lo.used == 0 || hi.used == 0 {
		return false
	}
	if tb.depth == x.depth {
		dir := make([]*posTable, 2*len(x.dir))
		for i, d := range x.dir {
			dir[2*i], dir[2*i+1] = d, d
		}
		x.dir, x.depth = dir, x.depth+1
	}
	// The directory entries of tb are a run of 1<<(x.depth-tb.depth); its
	// first half has the bit 0.
	run := 1 << (x.depth - tb.depth)
	for i := 0; i < len(x.dir); i += run {
		if x.dir[i] != tb {
			continue
		}
		for j := range run {
			if j < run/2 {
				x.dir[i+j] = lo
			} else {
				x.dir[i+j] = hi
			}
		}
	}
	return true
}

// each calls fn with every entry of tb.
func (tb *posTable) each(fn func(e uint32)) {
	for _, e := range tb.slots {
		if e != 0 && e != tomb {
			fn(e)
		}
	}
}

// remove removes t, which is indexed under h. Its slot becomes a
// tombstone if the probe sequence goes on after it; otherwise it becomes
// empty, and so do the tombstones just before it, which no probe needs
// any more.
func (x *posIndex) remove(h uint64, t *Task) {
	tb := x.table(h)
	mask := len(tb.slots) - 1
	e := t.pos + 1
	i := int(h) & mask
	for tb.slots[i] != e {
		i = (i + 1) & mask
	}
	tb.used--
	x.n--
	tb.tags[i] = 0
	if tb.slots[(i+1)&mask] != 0 {
		tb.slots[i] = tomb
		tb.tombs++
		return
	}
	tb.slots[i] = 0
	for j := (i - 1) & mask; tb.slots[j] == tomb; j = (j - 1) & mask {
		tb.slots[j] = 0
		tb.tombs--
	}
}

// all calls fn with every task indexed and the table that holds it.
func (x *posIndex) all(fn func(tb *posTable, t *Task)) {
	for i, tb := range x.dir {
		if i > 0 && x.dir[i-1] == tb {
			continue // the run of entries of one table is contiguous
		}
		tb.each(func(e uint32) { fn(tb, x.slab.at(e-1)) })
	}
}

// countErrors checks each table's counts of tasks and tombstones, and its
// load, against its slots.
func (x *posIndex) countErrors() []error {
	var errs []error
	for i, tb := range x.dir {
		if i > 0 && x.dir[i-1] == tb {
			continue
		}
		used, tombs := 0, 0
		for _, e := range tb.slots {
			switch e {
			case 0:
			case tomb:
				tombs++
			default:
				used++
			}
		}
		if used != tb.used || tombs != tb.tombs || (used+tombs)*8 > len(tb.slots)*7 {
			errs = append(errs, fmt.Errorf("index table %d of %d slots holds %d tasks and %d tombstones, counts %d and %d", i, len(tb.slots), used, tombs, tb.used, tb.tombs))
		}
	}
	return errs
}
