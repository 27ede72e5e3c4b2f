package state

// taskSlab holds a State's tasks in chunks of its own rather than one
// allocation each, and gives every task a position: a uint32 that the
// id and request-id indexes store instead of a pointer (index.go). See
// docs/design/state-machine.md ("Memory per task").
//
// A task allocated by itself would share its memory span with whatever
// else of its size class the allocator hands out at the time, mostly the
// garbage of the requests that created it; after a collection the span
// stays resident, partly empty, for as long as the task lives. A chunk
// holds tasks only, and costs the exact size of a Task rather than its
// size class.
//
// The position of a dropped task (TasksDeleted, a purge) is reused by
// the next task the State creates: a *Task is only valid until the next
// Apply, as State.Task says. Chunks are never freed, so the tasks of a
// State take the memory of the most tasks it ever held at once; a State
// that drops most of its tasks keeps their chunks for the tasks it creates
// next.
type taskSlab struct {
	// chunks[k] holds the tasks at positions k<<chunkBits and up; its
	// length is the number of positions handed out in it.
	chunks [][]Task
	// free lists the positions of dropped tasks, zeroed, to reuse first.
	free []uint32
	// finished has the bit of each position that holds a COMPLETED,
	// FAILED or DEAD task (State.transition and addTask set and clear
	// it), so that a purge passes over the other tasks without reading
	// them: a backlog of waiting tasks costs a purge a bit each.
	finished posBits
}

// chunkBits is log2 of the tasks of a full chunk: 1024 tasks of 136 bytes
// are 17 pages of 8 KiB, one large allocation with no byte to spare
// (TestSizes). A State's first chunks are smaller (64, 128, 256 and 512
// tasks), so that a State of a few tasks stays small.
const (
	chunkBits      = 10
	firstChunkBits = 6
)

// at returns the task at position pos.
func (s *taskSlab) at(pos uint32) *Task {
	return &s.chunks[pos>>chunkBits][pos&(1<<chunkBits-1)]
}

// alloc returns a zero task with its position set: a free position if any,
// else the next one of the last chunk, in a new chunk if it is full.
func (s *taskSlab) alloc() *Task {
	if n := len(s.free); n > 0 {
		pos := s.free[n-1]
		s.free = s.free[:n-1]
		return s.at(pos)
	}
	k := len(s.chunks) - 1
	if k < 0 || len(s.chunks[k]) == cap(s.chunks[k]) {
		k++
		s.chunks = append(s.chunks, make([]Task, 0, 1<<min(firstChunkBits+k, chunkBits)))
	}
	i := len(s.chunks[k])
	s.chunks[k] = s.chunks[k][:i+1]
	t := &s.chunks[k][i]
	// Positions stay far below posIndex's tomb: that would take four
	// billion tasks held at once.
	t.pos = uint32(k<<chunkBits | i)
	return t
}

// release zeroes t, so that it keeps nothing alive, and frees its position.
func (s *taskSlab) release(t *Task) {
	pos := t.pos
	*t = Task{pos: pos}
	s.setFinished(pos, false)
	s.free = append(s.free, pos)
}

// setFinished records whether the task at pos is finished (terminal).
func (s *taskSlab) setFinished(pos uint32, on bool) { s.finished.set(pos, on) }

// isFinished reports whether the task at pos is finished (terminal).
func (s *taskSlab) isFinished(pos uint32) bool { return s.finished.has(pos) }

// posBits is a set of slab positions, a bit each.
type posBits []uint64

func (b posBits) has(pos uint32) bool {
	w := int(pos >> 6)
	return w < len(b) && b[w]&(1<<(pos&63)) != 0
}

func (b *posBits) set(pos uint32, on bool) {
	w := int(pos >> 6)
	if w >= len(*b) {
		if !on {
			return
		}
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	if on {
		(*b)[w] |= 1 << (pos & 63)
	} else {
		(*b)[w] &^= 1 << (pos & 63)
	}
}

// len is the number of tasks allocated and not released.
func (s *taskSlab) len() int {
	n := 0
	for _, c := range s.chunks {
		n += len(c)
	}
	return n - len(s.free)
}
