package logtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/wal"
)

// Log is what the suite tests: a coordinator.Log that can be closed.
type Log interface {
	coordinator.Log
	Close() error
}

// Subject is one implementation under test.
type Subject struct {
	// MaxRecordBytes is the largest payload the subject's logs accept (as
	// configured by Instance.Open); a larger one must be rejected.
	MaxRecordBytes int
	// New prepares a fresh, empty log for t.
	New func(t *testing.T) Instance
}

// Instance is one fresh log of a subject.
type Instance struct {
	// Open opens the log, the same one again after Close (also after
	// Break, when the log must recover what was durable). It fails t on
	// error.
	Open func(t *testing.T) Log
	// Break, if not nil, makes every later write of the open log fail (a
	// broken disk, a fence). Tests that need it are skipped without it.
	Break func(t *testing.T)
}

// waitTimeout bounds every Wait of the suite, so a hang fails instead of
// stalling the run.
const waitTimeout = 30 * time.Second

// Run runs the suite against s, each case as a parallel subtest on a fresh
// log.
func Run(t *testing.T, s Subject) {
	cases := []struct {
		name string
		fn   func(*testing.T, Subject)
	}{
		{"Empty", testEmpty},
		{"DenseLSNs", testDenseLSNs},
		{"AppendCopiesPayload", testAppendCopies},
		{"InvalidEntries", testInvalidEntries},
		{"WaitOrder", testWaitOrder},
		{"WaitUnassigned", testWaitUnassigned},
		{"ReplayFromMiddle", testReplayFrom},
		{"ConcurrentAppenders", testConcurrent},
		{"FatalErrorIsSticky", testFatal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, s)
		})
	}
}

// record is a replayed record with its payload copied.
type record struct {
	LSN     uint64
	Type    uint16
	Payload []byte
}

func replay(t *testing.T, l Log, from uint64) []record {
	t.Helper()
	var out []record
	err := l.Replay(from, func(lsn uint64, e wal.Entry) error {
		out = append(out, record{lsn, e.Type, bytes.Clone(e.Payload)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

// entry is the deterministic test entry number i: its payload encodes i,
// and sizes vary from 8 bytes to a few hundred.
func entry(i uint64) wal.Entry {
	p := make([]byte, 8+(i*37)%300)
	binary.LittleEndian.PutUint64(p, i)
	for j := 8; j < len(p); j++ {
		p[j] = byte(i + uint64(j))
	}
	return wal.Entry{Type: uint16(1 + i%11), Payload: p}
}

func open(t *testing.T, in Instance) Log {
	t.Helper()
	l := in.Open(t)
	t.Cleanup(func() { l.Close() })
	return l
}

func wait(t *testing.T, l Log, lsn uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := l.Wait(ctx, lsn); err != nil {
		t.Fatalf("Wait(%d): %v", lsn, err)
	}
}

// appendN appends entries first..first+n-1 as one call and returns the last
// LSN.
func appendN(t *testing.T, l Log, first uint64, n int) uint64 {
	t.Helper()
	es := make([]wal.Entry, n)
	for i := range es {
		es[i] = entry(first + uint64(i))
	}
	last, err := l.Append(es)
	if err != nil {
		t.Fatalf("Append(%d entries from %d): %v", n, first, err)
	}
	if want := first + uint64(n) - 1; last != want {
		t.Fatalf("Append(%d entries from %d) = lsn %d, want %d", n, first, last, want)
	}
	return last
}

// checkRecords asserts that recs are exactly entries from..to at their
// LSNs.
func checkRecords(t *testing.T, recs []record, from, to uint64) {
	t.Helper()
	if uint64(len(recs)) != to-from+1 && !(to < from && len(recs) == 0) {
		t.Fatalf("replayed %d records, want lsns %d..%d", len(recs), from, to)
	}
	for i, r := range recs {
		lsn := from + uint64(i)
		e := entry(lsn)
		if r.LSN != lsn || r.Type != e.Type || !bytes.Equal(r.Payload, e.Payload) {
			t.Fatalf("record %d: lsn %d type %d %d bytes; want lsn %d type %d %d bytes of entry %d",
				i, r.LSN, r.Type, len(r.Payload), lsn, e.Type, len(e.Payload), lsn)
		}
	}
}

func testEmpty(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	if got := l.LastLSN(); got != 0 {
		t.Fatalf("LastLSN of a new log = %d", got)
	}
	if recs := replay(t, l, 0); len(recs) != 0 {
		t.Fatalf("new log replayed %d records", len(recs))
	}
	if last, err := l.Append(nil); err != nil || last != 0 {
		t.Fatalf("Append(nil) = %d, %v", last, err)
	}
	wait(t, l, 0)
}

func testDenseLSNs(t *testing.T, s Subject) {
	in := s.New(t)
	l := open(t, in)
	var next uint64 = 1
	for _, n := range []int{1, 3, 1, 17, 2, 64, 1} {
		last := appendN(t, l, next, n)
		if l.LastLSN() != last {
			t.Fatalf("LastLSN = %d after appending up to %d", l.LastLSN(), last)
		}
		next = last + 1
	}
	last := next - 1
	if got, err := l.Append(nil); err != nil || got != last {
		t.Fatalf("Append(nil) = %d, %v; want %d", got, err, last)
	}
	wait(t, l, last)
	checkRecords(t, replay(t, l, 1), 1, last)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Reopened: the same records, and appends continue after them.
	l = open(t, in)
	if l.LastLSN() != last {
		t.Fatalf("reopened LastLSN = %d, want %d", l.LastLSN(), last)
	}
	checkRecords(t, replay(t, l, 1), 1, last)
	more := appendN(t, l, last+1, 5)
	wait(t, l, more)
	checkRecords(t, replay(t, l, 1), 1, more)
}

func testAppendCopies(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	e := entry(1)
	buf := bytes.Clone(e.Payload)
	last, err := l.Append([]wal.Entry{{Type: e.Type, Payload: buf}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] ^= 0xff
	}
	wait(t, l, last)
	checkRecords(t, replay(t, l, 1), 1, 1)
}

func testInvalidEntries(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	appendN(t, l, 1, 2)
	for _, bad := range [][]wal.Entry{
		{{Type: 0, Payload: []byte("x")}},
		{entry(3), {Type: 0}},
		{entry(3), {Type: 1, Payload: make([]byte, s.MaxRecordBytes+1)}},
	} {
		if _, err := l.Append(bad); err == nil {
			t.Fatalf("Append of an invalid entry was accepted")
		}
		if l.LastLSN() != 2 {
			t.Fatalf("a rejected Append moved LastLSN to %d", l.LastLSN())
		}
	}
	// The largest allowed record is fine, and the log is healthy.
	big := wal.Entry{Type: 7, Payload: bytes.Repeat([]byte{0xa5}, s.MaxRecordBytes)}
	last, err := l.Append([]wal.Entry{big})
	if err != nil || last != 3 {
		t.Fatalf("Append of a MaxRecordBytes record = %d, %v", last, err)
	}
	wait(t, l, last)
	recs := replay(t, l, 3)
	if len(recs) != 1 || !bytes.Equal(recs[0].Payload, big.Payload) {
		t.Fatalf("the largest record did not round-trip")
	}
}

// After Wait(n) returns, everything up to n is durable: Replay sees it,
// any Wait at or below n returns at once (even with a done context), and
// it survives reopening.
func testWaitOrder(t *testing.T, s Subject) {
	in := s.New(t)
	l := open(t, in)
	a := appendN(t, l, 1, 10)
	b := appendN(t, l, a+1, 10)
	c := appendN(t, l, b+1, 10)
	wait(t, l, b)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for lsn := uint64(0); lsn <= b; lsn++ {
		if err := l.Wait(done, lsn); err != nil {
			t.Fatalf("Wait(%d) after Wait(%d) returned = %v; want nil at once", lsn, b, err)
		}
	}
	recs := replay(t, l, 1)
	if uint64(len(recs)) < b {
		t.Fatalf("after Wait(%d), Replay saw only %d records", b, len(recs))
	}
	checkRecords(t, recs, 1, uint64(len(recs)))
	wait(t, l, c)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, in)
	checkRecords(t, replay(t, l, 1), 1, c)
}

func testWaitUnassigned(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	last := appendN(t, l, 1, 3)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := l.Wait(ctx, last+5); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for an unassigned lsn = %v; want an error at once", err)
	}
}

var errStop = errors.New("logtest: stop")

func testReplayFrom(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	last := appendN(t, l, 1, 50)
	wait(t, l, last)
	for _, from := range []uint64{1, 2, 25, 49, 50} {
		checkRecords(t, replay(t, l, from), from, last)
	}
	if recs := replay(t, l, last+1); len(recs) != 0 {
		t.Fatalf("Replay past the end saw %d records", len(recs))
	}
	if recs := replay(t, l, 0); len(recs) != int(last) || recs[0].LSN != 1 {
		t.Fatalf("Replay(0) should start at lsn 1")
	}
	calls := 0
	err := l.Replay(10, func(lsn uint64, e wal.Entry) error {
		calls++
		if lsn == 12 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || calls != 3 {
		t.Fatalf("Replay with a failing fn = %v after %d calls; want errStop after 3", err, calls)
	}
}

// Many goroutines append and wait at once: every LSN is handed out once,
// the ranges are dense, and each record is found at its LSN.
func testConcurrent(t *testing.T, s Subject) {
	l := open(t, s.New(t))
	const goroutines, appends = 8, 40
	type got struct{ first, last uint64 }
	results := make([][]got, goroutines)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			for i := range appends {
				n := 1 + (g+i)%3
				es := make([]wal.Entry, n)
				for j := range es {
					es[j] = wal.Entry{Type: 1, Payload: fmt.Appendf(nil, "g%d-i%d-j%d", g, i, j)}
				}
				last, err := l.Append(es)
				if err != nil {
					errs <- err
					return
				}
				if err := l.Wait(ctx, last); err != nil {
					errs <- err
					return
				}
				results[g] = append(results[g], got{last - uint64(n) + 1, last})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := make(map[uint64]string)
	for g, rs := range results {
		for i, r := range rs {
			for j := uint64(0); r.first+j <= r.last; j++ {
				lsn := r.first + j
				if prev, dup := want[lsn]; dup {
					t.Fatalf("lsn %d handed out twice (%s)", lsn, prev)
				}
				want[lsn] = fmt.Sprintf("g%d-i%d-j%d", g, i, j)
			}
		}
	}
	recs := replay(t, l, 1)
	if len(recs) != len(want) || l.LastLSN() != uint64(len(want)) {
		t.Fatalf("replayed %d records, LastLSN %d; %d were appended", len(recs), l.LastLSN(), len(want))
	}
	for i, r := range recs {
		if r.LSN != uint64(i+1) || string(r.Payload) != want[r.LSN] {
			t.Fatalf("lsn %d holds %q, want %q", r.LSN, r.Payload, want[r.LSN])
		}
	}
}

// A failure is fatal and sticky: nothing after it is acknowledged, later
// calls fail, what was acknowledged before stays durable and survives.
func testFatal(t *testing.T, s Subject) {
	in := s.New(t)
	if in.Break == nil {
		t.Skip("logtest: the subject cannot inject a failure")
	}
	l := open(t, in)
	acked := appendN(t, l, 1, 5)
	wait(t, l, acked)
	in.Break(t)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var failed error
	if last, err := l.Append([]wal.Entry{entry(acked + 1)}); err != nil {
		failed = err
	} else if err := l.Wait(ctx, last); err != nil {
		failed = err
	}
	if failed == nil || errors.Is(failed, context.DeadlineExceeded) {
		t.Fatalf("a write after Break was acknowledged or hung: %v", failed)
	}
	// Sticky: later appends and waits fail too.
	if last, err := l.Append([]wal.Entry{entry(acked + 2)}); err == nil {
		if err := l.Wait(ctx, last); err == nil {
			t.Fatal("an append after the failure was acknowledged")
		}
	}
	// What was acknowledged before stays acknowledged.
	if err := l.Wait(ctx, acked); err != nil {
		t.Fatalf("Wait(%d) for a record durable before the failure = %v", acked, err)
	}
	l.Close()

	// Reopened, the log holds at least everything acknowledged, densely.
	l = open(t, in)
	recs := replay(t, l, 1)
	if uint64(len(recs)) < acked {
		t.Fatalf("after the failure and a reopen, %d records survive; %d were acknowledged", len(recs), acked)
	}
	checkRecords(t, recs[:acked], 1, acked)
	for i, r := range recs {
		if r.LSN != uint64(i+1) {
			t.Fatalf("record %d has lsn %d", i, r.LSN)
		}
	}
}
