package worker

import (
	"context"
	"sync"
)

// slots counts a Worker's task slots for its lease loop. The loop takes
// free slots for a Lease call; each leased task gives its slot back when it
// ends.
//
// Leasing in batches: a lease goes out at once when no running task is
// finishing (in its final report: Complete or Fail, handler and effects
// done), or when a full lease call's worth of slots (min(Concurrency,
// maxLeaseTasks)) is free. Otherwise the slots of the tasks finishing at the
// moment a slot came back are about to come back too (the completer answers
// them together, within one or two calls), so the loop waits until as many
// slots as there were finishing tasks then have come back, and leases for
// them all in one call. No timer is involved: an idle worker, or one whose
// other tasks are all still in their handlers, leases at once, even for a
// single slot; a busy one waits at most for the reports already under way.
type slots struct {
	size   int
	target int // free slots that are leased for at once: min(size, maxLeaseTasks)

	mu        sync.Mutex
	free      int    // slots neither held by a task nor by a Lease call
	finishing int    // running tasks in their final report
	returned  uint64 // slots given back by tasks, ever
	wake      chan struct{}
}

func newSlots(size int) *slots {
	return &slots{size: size, target: min(size, maxLeaseTasks), free: size, wake: make(chan struct{}, 1)}
}

// take waits until it is time to lease (see slots) and takes the free slots,
// at most maxLeaseTasks. It returns 0 when ctx ends first.
func (s *slots) take(ctx context.Context) int {
	waiting := false
	var until uint64
	for {
		s.mu.Lock()
		if s.free > 0 {
			ready := s.finishing == 0 || s.free >= s.target
			if !ready {
				if !waiting {
					// Wait for the tasks finishing now, not for those that
					// start finishing meanwhile: the wait stays bounded by
					// the reports under way.
					waiting, until = true, s.returned+uint64(s.finishing)
				}
				ready = s.returned >= until
			}
			if ready {
				n := min(s.free, maxLeaseTasks)
				s.free -= n
				s.mu.Unlock()
				return n
			}
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0
		case <-s.wake:
		}
	}
}

// put gives back n slots that a Lease call did not fill.
func (s *slots) put(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.free += n
	s.mu.Unlock()
	s.signal()
}

// finish marks a running task as being in its final report.
func (s *slots) finish() {
	s.mu.Lock()
	s.finishing++
	s.mu.Unlock()
}

// release gives back the slot of a task that ended; finishing says whether
// the task was marked with finish.
func (s *slots) release(finishing bool) {
	s.mu.Lock()
	s.free++
	s.returned++
	if finishing {
		s.finishing--
	}
	s.mu.Unlock()
	s.signal()
}

// running is the number of slots held by tasks or by a Lease call.
func (s *slots) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.free
}

func (s *slots) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
