package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeLog is a log on the core that keeps its records in memory: the
// smallest owner, whose Writer records every round and can be held or
// made to fail.
type fakeLog struct {
	c *Core
	// queue is the log's side of the core's queue, guarded by the core's
	// lock (add and Take).
	queue []queued

	// maxTake, if not 0, bounds the records Take takes; takeRand, if set,
	// makes Take take a random number of them.
	maxTake  uint64
	takeRand *rand.Rand
	// advanceEarly makes Write report the first record of a round of
	// several durable before the rest.
	advanceEarly bool
	// hold, if not nil, is received from before each Write returns.
	hold chan struct{}
	// writing, if not nil, is sent the round's first LSN as Write starts.
	writing chan uint64
	// fail, if not nil, is Write's error for the round that holds failAt.
	fail   error
	failAt uint64
	// drainErr is Drain's error.
	drainErr error

	mu      sync.Mutex
	round   []int   // the round being written (writer goroutine)
	rounds  [][]int // the values of each round written
	firsts  []uint64
	starts  []time.Time // when each round was taken (time.Now: synctest's clock in a bubble)
	drained int
	failed  []error
}

// queued is a record in the fake's queue: its value and the bytes Append
// counted for it.
type queued struct{ val, bytes int }

func newFake(t *testing.T, opts Options) *fakeLog {
	t.Helper()
	f := &fakeLog{}
	if opts.Name == "" {
		opts.Name = "test"
	}
	if opts.MaxRecordBytes == 0 {
		opts.MaxRecordBytes = 1 << 20
	}
	if opts.MaxBatchBytes == 0 {
		opts.MaxBatchBytes = 1 << 20
	}
	opts.Failed = func(err error) {
		f.mu.Lock()
		f.failed = append(f.failed, err)
		f.mu.Unlock()
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fakeLog) start(last uint64) { f.c.Start(last, fakeWriter{f}) }

// heldFake starts a fake on a log ending at last whose writer tells f.writing
// as each round starts and waits for f.hold before it ends it; the log is
// closed when the test ends.
func heldFake(t *testing.T, opts Options, last uint64) *fakeLog {
	t.Helper()
	f := newFake(t, opts)
	f.writing, f.hold = make(chan uint64), make(chan struct{})
	f.start(last)
	t.Cleanup(f.c.Close)
	return f
}

// next lets the writer through one round: it waits for the round to start,
// then lets it end.
func (f *fakeLog) next() {
	<-f.writing
	f.hold <- struct{}{}
}

// checkRounds fails t unless the rounds written hold want and start at
// the LSNs firsts.
func checkRounds(t *testing.T, f *fakeLog, want [][]int, firsts []uint64) {
	t.Helper()
	rounds, got := f.written()
	if fmt.Sprint(rounds) != fmt.Sprint(want) {
		t.Fatalf("rounds %v, want %v", rounds, want)
	}
	if !slices.Equal(got, firsts) {
		t.Fatalf("rounds start at lsns %v, want %v", got, firsts)
	}
}

// append appends the values vals, each counted as bytes each.
func (f *fakeLog) append(bytes int, vals ...int) (uint64, error) {
	return f.c.Append(len(vals), bytes*len(vals), func(uint64) {
		for _, v := range vals {
			f.queue = append(f.queue, queued{v, bytes})
		}
	})
}

func (f *fakeLog) written() (rounds [][]int, firsts []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.rounds), slices.Clone(f.firsts)
}

type fakeWriter struct{ f *fakeLog }

func (w fakeWriter) Take(first, n uint64) (took uint64, bytes int) {
	f := w.f
	if uint64(len(f.queue)) != n {
		panic(fmt.Sprintf("the core says %d records are queued, the log holds %d", n, len(f.queue)))
	}
	if f.maxTake != 0 {
		n = min(n, f.maxTake)
	}
	if f.takeRand != nil {
		n = 1 + f.takeRand.Uint64N(n)
	}
	f.round, bytes = nil, 0
	for _, q := range f.queue[:n] {
		f.round = append(f.round, q.val)
		bytes += q.bytes
	}
	f.queue = f.queue[n:]
	f.mu.Lock()
	f.starts = append(f.starts, time.Now())
	f.mu.Unlock()
	return n, bytes
}

func (w fakeWriter) Write(first, n uint64) error {
	f := w.f
	if f.writing != nil {
		f.writing <- first
	}
	if f.hold != nil {
		<-f.hold
	}
	if f.fail != nil && f.failAt >= first && f.failAt < first+n {
		return f.fail
	}
	if f.advanceEarly && n > 1 {
		f.c.Advance(first)
	}
	f.mu.Lock()
	f.rounds = append(f.rounds, f.round)
	f.firsts = append(f.firsts, first)
	f.mu.Unlock()
	return nil
}

func (w fakeWriter) Drain() error {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	w.f.drained++
	return w.f.drainErr
}

func mustAppend(t *testing.T, f *fakeLog, vals ...int) uint64 {
	t.Helper()
	lsn, err := f.append(1, vals...)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func mustWait(t *testing.T, c *Core, lsn uint64) {
	t.Helper()
	if err := c.Wait(context.Background(), lsn); err != nil {
		t.Fatalf("Wait(%d): %v", lsn, err)
	}
}

func TestAppendAssignsDenseLSNsAfterTheLast(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.start(41)
	defer f.c.Close()
	if got := f.c.LastLSN(); got != 41 {
		t.Fatalf("LastLSN after Start(41) = %d", got)
	}
	if got := f.c.DurableLSN(); got != 41 {
		t.Fatalf("DurableLSN after Start(41) = %d", got)
	}
	if lsn := mustAppend(t, f, 1, 2, 3); lsn != 44 {
		t.Fatalf("Append of 3 records returned %d, want 44", lsn)
	}
	if lsn, err := f.append(1); err != nil || lsn != 44 {
		t.Fatalf("Append of nothing = %d, %v; want 44 (LastLSN)", lsn, err)
	}
	lsn := mustAppend(t, f, 4)
	mustWait(t, f.c, lsn)
	if got := f.c.DurableLSN(); got != 45 {
		t.Fatalf("DurableLSN %d, want 45", got)
	}
	rounds, firsts := f.written()
	var all []int
	for i, r := range rounds {
		if firsts[i] != 42+uint64(len(all)) {
			t.Fatalf("round %d starts at lsn %d after %d records from 42", i, firsts[i], len(all))
		}
		all = append(all, r...)
	}
	if !slices.Equal(all, []int{1, 2, 3, 4}) {
		t.Fatalf("written %v, want [1 2 3 4]", all)
	}
}

// While a round is being written, appends queue up, and the next round
// carries them all: batches grow with the load.
func TestAppendsDuringAWriteShareTheNextRound(t *testing.T) {
	t.Parallel()
	f := heldFake(t, Options{}, 0)
	mustAppend(t, f, 1)
	<-f.writing // round 1 is being written
	mustAppend(t, f, 2)
	mustAppend(t, f, 3, 4)
	last := mustAppend(t, f, 5)
	f.hold <- struct{}{}
	f.next()
	mustWait(t, f.c, last)
	checkRounds(t, f, [][]int{{1}, {2, 3, 4, 5}}, []uint64{1, 2})
}

// Take may take part of the queue; the rest goes in the next rounds.
func TestTakeMayLeaveTheRestForTheNextRound(t *testing.T) {
	t.Parallel()
	f := heldFake(t, Options{}, 0)
	f.maxTake = 2
	mustAppend(t, f, 0)
	<-f.writing
	last := mustAppend(t, f, 1, 2, 3, 4, 5)
	f.hold <- struct{}{}
	for range 3 {
		f.next()
	}
	mustWait(t, f.c, last)
	checkRounds(t, f, [][]int{{0}, {1, 2}, {3, 4}, {5}}, []uint64{1, 2, 4, 6})
}

// Write may report part of its round durable before the rest: a waiter for
// that part returns while the rest is still being written.
func TestAdvanceWakesWaitersOfPartOfARound(t *testing.T) {
	t.Parallel()
	f := heldFake(t, Options{}, 0)
	last := mustAppend(t, f, 1, 2, 3)
	<-f.writing
	f.c.Advance(2) // what the file WAL does after each write of a round split by a segment
	mustWait(t, f.c, 2)
	if got := f.c.DurableLSN(); got != 2 {
		t.Fatalf("DurableLSN %d while the round's rest is written, want 2", got)
	}
	f.hold <- struct{}{}
	mustWait(t, f.c, last)
}

func TestAdvanceBeyondTheRoundPanics(t *testing.T) {
	t.Parallel()
	f := heldFake(t, Options{}, 0)
	mustAppend(t, f, 1)
	<-f.writing
	defer func() { f.hold <- struct{}{} }() // before the cleanup's Close
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "lsn 2 reported durable") {
			t.Fatalf("Advance past the round: recover() = %v, want a panic naming the lsn", r)
		}
	}()
	f.c.Advance(2)
}

// The queue holds at most PendingBatches × MaxBatchBytes: an Append that
// would overfill it waits until the writer takes a round (or fails); an
// Append that finds the queue empty is taken whatever its size.
func TestBackpressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := heldFake(t, Options{MaxBatchBytes: 10}, 0) // the queue: 40 bytes
		if _, err := f.append(100, 1); err != nil {     // over the bound, into an empty queue
			t.Fatal(err)
		}
		<-f.writing // taken: the queue is empty again
		if _, err := f.append(30, 2); err != nil {
			t.Fatal(err)
		}
		var done atomic.Bool
		go func() {
			if _, err := f.append(20, 3); err != nil {
				t.Error(err)
			}
			done.Store(true)
		}()
		synctest.Wait()
		if done.Load() {
			t.Fatal("an Append of 20 bytes onto a queue of 30 of 40 returned before the writer took the queue")
		}
		f.hold <- struct{}{} // round 1 ends; the writer takes round 2 (30 bytes)
		<-f.writing
		synctest.Wait()
		if !done.Load() {
			t.Fatal("the Append is still blocked after the writer took the queue")
		}
		f.hold <- struct{}{}
		f.next()
		mustWait(t, f.c, 3)
	})
}

// The queue counts what Take leaves of it, not what it held.
func TestBackpressureCountsWhatTakeLeaves(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := heldFake(t, Options{MaxBatchBytes: 10}, 0) // the queue: 40 bytes
		f.maxTake = 1
		mustAppend(t, f, 0)
		<-f.writing
		for i := range 4 { // 4 × 10 bytes: a full queue
			if _, err := f.append(10, i+1); err != nil {
				t.Fatal(err)
			}
		}
		var done atomic.Bool
		go func() {
			if _, err := f.append(20, 5); err != nil {
				t.Error(err)
			}
			done.Store(true)
		}()
		f.hold <- struct{}{}
		<-f.writing // took one record: 30 bytes queued, no room for 20 more
		synctest.Wait()
		if done.Load() {
			t.Fatal("an Append of 20 bytes returned with 30 of 40 queued")
		}
		f.hold <- struct{}{}
		<-f.writing // 20 queued: room
		synctest.Wait()
		if !done.Load() {
			t.Fatal("an Append of 20 bytes is still blocked with 20 of 40 queued")
		}
		f.hold <- struct{}{}
		for range 3 {
			f.next()
		}
		mustWait(t, f.c, 6)
	})
}

func TestWriteFailureIsStickyAndReportedOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		errDisk := errors.New("disk on fire")
		f := heldFake(t, Options{MaxBatchBytes: 1}, 0)
		f.fail, f.failAt = errDisk, 2
		ok := mustAppend(t, f, 1)
		f.next()
		mustWait(t, f.c, ok)

		bad := mustAppend(t, f, 2)
		<-f.writing
		// An Append blocked on the full queue, and a waiter.
		if _, err := f.append(4, 3); err != nil {
			t.Fatal(err)
		}
		blocked := make(chan error, 1)
		go func() {
			_, err := f.append(4, 4)
			blocked <- err
		}()
		waited := make(chan error, 1)
		go func() { waited <- f.c.Wait(context.Background(), bad) }()
		synctest.Wait()
		f.hold <- struct{}{} // round 2 fails

		if err := <-blocked; !errors.Is(err, errDisk) {
			t.Errorf("the blocked Append returned %v, want the write error", err)
		}
		if err := <-waited; !errors.Is(err, errDisk) {
			t.Errorf("Wait for the failed round returned %v, want the write error", err)
		}
		if _, err := f.append(1, 9); !errors.Is(err, errDisk) {
			t.Errorf("Append after the failure = %v, want the write error", err)
		}
		if err := f.c.Wait(context.Background(), bad+1); !errors.Is(err, errDisk) {
			t.Errorf("Wait for a record queued after the failed round = %v, want the write error", err)
		}
		if err := f.c.Wait(context.Background(), ok); err != nil {
			t.Errorf("Wait for a record durable before the failure = %v, want nil", err)
		}
		if got := f.c.DurableLSN(); got != ok {
			t.Errorf("DurableLSN %d after the failed round, want %d", got, ok)
		}
		if err := f.c.Err(); !errors.Is(err, errDisk) {
			t.Errorf("Err() = %v", err)
		}
		f.c.Close()
		if err := f.c.Err(); !errors.Is(err, errDisk) {
			t.Errorf("Err() after Close = %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.failed) != 1 || !errors.Is(f.failed[0], errDisk) {
			t.Errorf("Options.Failed was told %v, want the write error once", f.failed)
		}
		if f.drained != 0 {
			t.Errorf("Drain called %d times after a failure, want 0", f.drained)
		}
	})
}

// Close writes everything appended before it, then drains, then stops;
// Append after it is refused, Wait for what became durable succeeds and
// Wait for anything else returns ErrClosed.
func TestCloseDrains(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := heldFake(t, Options{}, 0)
		mustAppend(t, f, 1)
		<-f.writing
		last := mustAppend(t, f, 2, 3)
		closed := make(chan struct{})
		go func() {
			f.c.Close()
			close(closed)
		}()
		synctest.Wait()
		_, err := f.append(1, 4)
		if !errors.Is(err, ErrClosed) || err.Error() != "test: log closed" {
			t.Errorf("Append while closing = %v, want ErrClosed in the log's name", err)
		}
		if err := f.c.Wait(context.Background(), last+1); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait for an lsn never assigned, while closing = %v, want ErrClosed", err)
		}
		f.hold <- struct{}{}
		f.next()
		<-closed
		mustWait(t, f.c, last)
		rounds, _ := f.written()
		if want := [][]int{{1}, {2, 3}}; fmt.Sprint(rounds) != fmt.Sprint(want) {
			t.Errorf("rounds %v, want %v: Close must write what was appended before it", rounds, want)
		}
		f.mu.Lock()
		if f.drained != 1 {
			t.Errorf("Drain called %d times, want once", f.drained)
		}
		f.mu.Unlock()
		if err := f.c.Closed(); !errors.Is(err, ErrClosed) {
			t.Errorf("Closed() = %v", err)
		}
		if err := f.c.Err(); err != nil {
			t.Errorf("Err() after a clean Close = %v", err)
		}
		f.c.Close() // again: returns at once
	})
}

func TestDrainFailureIsTheLogsError(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.drainErr = errors.New("fsync failed")
	f.start(0)
	mustWait(t, f.c, mustAppend(t, f, 1))
	f.c.Close()
	if err := f.c.Err(); !errors.Is(err, f.drainErr) {
		t.Fatalf("Err() after a failed Drain = %v", err)
	}
}

func TestCloseBeforeStart(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{})
	f.c.Close()
	if _, err := f.append(1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
}

func TestWaitRefusesAnLSNNeverAssignedAndHonoursCtx(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := heldFake(t, Options{}, 10)
		err := f.c.Wait(context.Background(), 11)
		if err == nil || err.Error() != "test: wait for lsn 11, but the last assigned lsn is 10" {
			t.Fatalf("Wait(11) on a log ending at 10 = %v", err)
		}
		mustWait(t, f.c, 10)
		lsn := mustAppend(t, f, 1)
		<-f.writing
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() { got <- f.c.Wait(ctx, lsn) }()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with a cancelled ctx = %v", err)
		}
		f.hold <- struct{}{}
		mustWait(t, f.c, lsn) // the append was not undone
	})
}

func TestAdmitRefusesAfterTheCoresOwnRefusals(t *testing.T) {
	t.Parallel()
	errMissing := errors.New("records missing")
	var refuse atomic.Bool
	refuse.Store(true)
	f := newFake(t, Options{Admit: func() error {
		if refuse.Load() {
			return errMissing
		}
		return nil
	}})
	f.start(0)
	if _, err := f.append(1, 1); !errors.Is(err, errMissing) {
		t.Fatalf("Append refused by Admit = %v", err)
	}
	if got := f.c.LastLSN(); got != 0 || len(f.queue) != 0 {
		t.Fatalf("a refused Append assigned lsns (LastLSN %d) or queued %v", got, f.queue)
	}
	if !f.c.Idle() {
		t.Fatal("Idle() false on an open log with nothing queued")
	}
	refuse.Store(false)
	mustWait(t, f.c, mustAppend(t, f, 1))
	refuse.Store(true)
	f.c.Close()
	if f.c.Idle() {
		t.Fatal("Idle() true after Close")
	}
	if _, err := f.append(1, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close, Admit refusing = %v; want ErrClosed first", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{MaxRecordBytes: 4})
	n, err := f.c.Check([]Entry{{Type: 1, Payload: []byte("abcd")}, {Type: 2}})
	if err != nil || n != 4 {
		t.Fatalf("Check of valid entries = %d, %v", n, err)
	}
	_, err = f.c.Check([]Entry{{Type: 1}, {Type: 1, Payload: []byte("abcde")}})
	if !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), "test: record too large: entry 1 has a 5-byte payload") {
		t.Fatalf("Check of a 5-byte payload over 4 = %v", err)
	}
	_, err = f.c.Check([]Entry{{Type: 0}})
	if !errors.Is(err, ErrInvalidEntry) || !strings.HasPrefix(err.Error(), "test: invalid entry: entry 0 has type 0") {
		t.Fatalf("Check of type 0 = %v", err)
	}
}

// CommitInterval: after a round of more than one Append call, the next
// round waits out the rest of the interval, and what is appended
// meanwhile goes with it; after a round of one call, or a pause of the
// interval, it starts at once; Close cuts the wait short. Time is
// synctest's: each wait is exactly what the core asked for.
func TestCommitInterval(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		f := heldFake(t, Options{CommitInterval: interval}, 0)
		t0 := time.Now()

		// One caller, one record at a time: no round waits.
		for range 3 {
			lsn := mustAppend(t, f, 1)
			f.next()
			mustWait(t, f.c, lsn)
		}
		if d := time.Since(t0); d != 0 {
			t.Fatalf("rounds of one call each took %v; want no wait", d)
		}

		twoCallRound(t, f, 2) // at once
		t5 := time.Now()
		// The next round waits out the interval; what comes meanwhile joins it.
		mustAppend(t, f, 5)
		time.Sleep(interval / 2)
		last := mustAppend(t, f, 6)
		f.next()
		mustWait(t, f.c, last)
		f.mu.Lock()
		starts := slices.Clone(f.starts)
		f.mu.Unlock()
		if got := starts[len(starts)-1].Sub(t5); got != interval {
			t.Errorf("the round after a round of two calls started %v after it; want %v", got, interval)
		}
		rounds, _ := f.written()
		if got := rounds[len(rounds)-1]; !slices.Equal(got, []int{5, 6}) {
			t.Errorf("the waiting round carried %v; want [5 6]", got)
		}

		// Idle for the interval: the next round starts at once, although
		// the last carried two calls.
		time.Sleep(interval)
		t6 := time.Now()
		lsn := mustAppend(t, f, 7)
		f.next()
		mustWait(t, f.c, lsn)
		if d := time.Since(t6); d != 0 {
			t.Errorf("a round after an idle interval waited %v", d)
		}

		// Close cuts a wait short: the record is written at once.
		twoCallRound(t, f, 8)
		t7 := time.Now()
		last = mustAppend(t, f, 11)
		synctest.Wait() // the writer waits out the interval
		go func() {
			f.next()
		}()
		f.c.Close()
		if d := time.Since(t7); d != 0 {
			t.Errorf("Close waited %v for the interval", d)
		}
		mustWait(t, f.c, last)
	})
}

// twoCallRound has the writer write a round of one call (value v), then a
// round of two (v+1, v+2), at once: the last round carried two calls.
func twoCallRound(t *testing.T, f *fakeLog, v int) {
	t.Helper()
	mustAppend(t, f, v)
	<-f.writing // a round of one call is being written
	mustAppend(t, f, v+1)
	mustAppend(t, f, v+2)
	f.hold <- struct{}{}
	f.next()
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	good := Options{Name: "x", MaxRecordBytes: 1, MaxBatchBytes: 1}
	for _, tc := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.Name = "" }, "groupcommit: Options.Name is empty"},
		{func(o *Options) { o.MaxRecordBytes = 0 }, "x: Options.MaxRecordBytes is 0: must be between 1 and 268435456"},
		{func(o *Options) { o.MaxBatchBytes = 256<<20 + 1 }, "x: Options.MaxBatchBytes is 268435457: must be between 1 and 268435456"},
		{func(o *Options) { o.CommitInterval = -time.Millisecond }, "x: Options.CommitInterval is -1ms: must be between 0s and 100ms (0 means none)"},
		{func(o *Options) { o.CommitInterval = 101 * time.Millisecond }, "x: Options.CommitInterval is 101ms"},
	} {
		o := good
		tc.mod(&o)
		_, err := New(o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error starting %q", o, err, tc.want)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatalf("New(%+v): %v", good, err)
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	type opts struct {
		Size    int
		Timeout time.Duration
	}
	settings := func(o *opts) []Setting {
		return []Setting{
			Number[int]{Field: "Size", Value: &o.Size, Default: 4, Min: 1, Max: 10},
			Number[time.Duration]{Field: "Timeout", Value: &o.Timeout, Default: time.Second, Min: time.Millisecond, Max: time.Minute},
		}
	}
	var o opts
	SetDefaults(settings(&o)...)
	if o != (opts{4, time.Second}) {
		t.Fatalf("SetDefaults on zero options: %+v", o)
	}
	o = opts{Size: 7, Timeout: time.Hour}
	SetDefaults(settings(&o)...)
	if o != (opts{7, time.Hour}) {
		t.Fatalf("SetDefaults changed set options: %+v", o)
	}
	err := CheckSettings("log", settings(&o)...)
	if err == nil || err.Error() != "log: Options.Timeout is 1h0m0s: must be between 1ms and 1m0s (0 means 1s)" {
		t.Fatalf("CheckSettings = %v", err)
	}
	o = opts{Size: -1, Timeout: time.Hour}
	if err := CheckSettings("log", settings(&o)...); err == nil || !strings.HasPrefix(err.Error(), "log: Options.Size is -1") {
		t.Fatalf("CheckSettings with two bad options = %v, want the first's error", err)
	}
	o = opts{Size: 10, Timeout: time.Millisecond}
	if err := CheckSettings("log", settings(&o)...); err != nil {
		t.Fatalf("CheckSettings at the limits = %v", err)
	}
}

func TestCheckRange(t *testing.T) {
	t.Parallel()
	if err := CheckRange("log", "Size", 5, 1, 10, 4); err != nil {
		t.Fatalf("5 in 1..10: %v", err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{CheckRange("log", "Size", 11, 1, 10, 4), "log: Options.Size is 11: must be between 1 and 10 (0 means 4)"},
		{CheckRange("log", "Size", -1, 0, 10, 0), "log: Options.Size is -1: must be between 0 and 10 (0 means none)"},
		{CheckRange("log", "Size", int64(0), 1, 10, 0), "log: Options.Size is 0: must be between 1 and 10"},
		{CheckRange("log", "Timeout", time.Duration(0), time.Millisecond, time.Hour, 30*time.Second), "log: Options.Timeout is 0s: must be between 1ms and 1h0m0s (0 means 30s)"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("CheckRange = %v; want %q", tc.err, tc.want)
		}
	}
}

// Many appenders at once, each waiting for its records, against a writer
// that takes rounds of random size and reports parts durable early: every
// record is written exactly once, in LSN order, each call's records
// together and in its order, and every Wait returns nil. Run under -race.
func TestConcurrentAppendersLoseNothing(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{MaxBatchBytes: 64})
	f.takeRand = rand.New(rand.NewPCG(7, 7))
	f.advanceEarly = true
	f.start(0)
	const appenders, calls = 8, 200
	type call struct {
		last uint64
		vals []int
	}
	results := make([][]call, appenders)
	var wg sync.WaitGroup
	for a := range appenders {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(a), 1))
			for i := range calls {
				n := 1 + r.IntN(5)
				vals := make([]int, n)
				for j := range vals {
					vals[j] = a<<20 | i<<4 | j
				}
				last, err := f.append(1+r.IntN(20), vals...)
				if err != nil {
					t.Error(err)
					return
				}
				if err := f.c.Wait(context.Background(), last); err != nil {
					t.Error(err)
					return
				}
				if d := f.c.DurableLSN(); d < last {
					t.Errorf("Wait(%d) returned with DurableLSN %d", last, d)
				}
				results[a] = append(results[a], call{last, vals})
			}
		})
	}
	wg.Wait()
	f.c.Close()
	rounds, firsts := f.written()
	var all []int
	for i, r := range rounds {
		if firsts[i] != uint64(len(all))+1 {
			t.Fatalf("round %d starts at lsn %d after %d records", i, firsts[i], len(all))
		}
		all = append(all, r...)
	}
	total := 0
	for a, calls := range results {
		for _, c := range calls {
			total += len(c.vals)
			first := c.last - uint64(len(c.vals)) + 1
			if got := all[first-1 : c.last]; !slices.Equal(got, c.vals) {
				t.Fatalf("appender %d's call got lsns %d..%d, which hold %v; want %v", a, first, c.last, got, c.vals)
			}
		}
	}
	if total != len(all) || uint64(total) != f.c.LastLSN() || f.c.DurableLSN() != f.c.LastLSN() {
		t.Fatalf("%d records appended, %d written, LastLSN %d, DurableLSN %d", total, len(all), f.c.LastLSN(), f.c.DurableLSN())
	}
}
