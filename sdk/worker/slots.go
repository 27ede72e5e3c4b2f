package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/tenurehq/tenure/sdk/client"
)

// slots counts a Worker's task slots for its lease loop and for the leases
// its completion calls carry. The loop takes free slots for a Lease call;
// each leased task gives its slot back when it ends.
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
//
// Leasing ahead: a completion call (the completer's, one at a time) carries
// a lease for the free slots and for the slots of the tasks finishing at
// that moment (takeAhead), whose releases are thereby promised to it. When
// it answers (settle), as many leased tasks start as it holds slots for
// (the free ones it took, and those released meanwhile); the others wait,
// and each release of a slot runs one of them instead of freeing it, on the
// goroutine of the task that released it. So a task never starts before a
// slot is free, and the tasks finishing together
// are leased for in the call that completes the first of them.
type slots struct {
	size   int
	target int // free slots that are leased for at once: min(size, maxLeaseTasks)

	mu        sync.Mutex
	free      int    // slots neither held by a task, nor by a Lease call, nor ahead
	finishing int    // running tasks in their final report
	returned  uint64 // slots given back by tasks, ever
	wake      chan struct{}

	// The lease a completion call carries, while it is out.
	held  int // slots it holds: free when it was sent, or released since
	ahead int // releases still promised to it
	// waiting are leased tasks without a slot yet, in the order they
	// came: each release starts the first with start instead of freeing
	// the slot.
	waiting []*client.LeasedTask
	start   func(*client.LeasedTask)
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
// the task was marked with finish. The slot goes to a waiting leased task,
// which release returns for the caller to run at once in its stead, or to
// the completion call's lease that was promised it, or is free (next is
// then nil).
func (s *slots) release(finishing bool) (next *client.LeasedTask) {
	s.mu.Lock()
	s.returned++
	if finishing {
		s.finishing--
	}
	switch {
	case len(s.waiting) > 0:
		next = s.waiting[0]
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
	case s.ahead > 0:
		s.ahead--
		s.held++
	default:
		s.free++
	}
	s.mu.Unlock()
	if next == nil {
		s.signal()
	}
	return next
}

// takeAhead takes the slots for the lease a completion call carries: the
// free slots and those of the finishing tasks that no lease has been
// promised yet, at most maxLeaseTasks. It returns how many; unless that is
// 0, the call must then be settled, even with none leased. One such call
// is out at a time.
func (s *slots) takeAhead() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(s.free+max(s.finishing-len(s.waiting), 0), maxLeaseTasks)
	s.held = min(s.free, n)
	s.free -= s.held
	s.ahead = n - s.held
	return n
}

// settle ends the lease a completion call carried (takeAhead): of leased,
// as many start at once as the call holds slots for, the others wait for
// the promised releases; the slots and promises left over are free again.
func (s *slots) settle(leased []*client.LeasedTask) {
	s.mu.Lock()
	now := min(len(leased), s.held)
	if len(leased)-now > s.ahead {
		s.mu.Unlock()
		panic(fmt.Sprintf("worker: internal error: %d tasks leased for %d slots held and %d promised", len(leased), s.held, s.ahead))
	}
	s.waiting = append(s.waiting, leased[now:]...)
	s.free += s.held - now
	s.held, s.ahead = 0, 0
	start := s.start
	s.mu.Unlock()
	s.signal()
	for _, t := range leased[:now] {
		start(t)
	}
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
