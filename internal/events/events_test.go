package events

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/wal"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []Cursor{
		{},
		{{0, 0}},
		{{0, 1}},
		{{0, 123456789}, {3, 1}, {1 << 40, 1<<63 + 5}},
	} {
		got, err := ParseCursor(c.String())
		if err != nil {
			t.Fatalf("ParseCursor(%q) of %v: %v", c.String(), c, err)
		}
		if !slices.Equal(got, c) {
			t.Fatalf("round trip of %v gave %v", c, got)
		}
	}
	c := Cursor{{1, 10}, {5, 50}}
	if c.Of(5) != 50 || c.Of(1) != 10 || c.Of(3) != 0 {
		t.Fatalf("Of: %v", c)
	}
	if got := c.With(3, 30).With(5, 51).With(0, 1); got.Describe() != "p0@1 p1@10 p3@30 p5@51" {
		t.Fatalf("With: %v", got)
	}
	if c.Describe() != "p1@10 p5@50" {
		t.Fatalf("With changed its receiver: %v", c)
	}
}

func TestParseCursorRefuses(t *testing.T) {
	t.Parallel()
	good := Cursor{{1, 2}, {3, 4}}.AppendBinary(nil)
	for name, s := range map[string]string{
		"not base64":      "!!!",
		"empty":           "",
		"version 2":       b64([]byte{2, 0}),
		"cut short":       b64(good[:len(good)-1]),
		"trailing bytes":  b64(append(append([]byte{}, good...), 0)),
		"out of order":    b64(Cursor{{3, 4}, {1, 2}}.AppendBinary(nil)),
		"repeated":        b64(Cursor{{3, 4}, {3, 2}}.AppendBinary(nil)),
		"huge count":      b64([]byte{1, 0xff, 0xff, 0xff, 0x7f}),
		"count past data": b64([]byte{1, 5, 1, 1}),
	} {
		if _, err := ParseCursor(s); !errors.Is(err, ErrBadCursor) {
			t.Errorf("%s: ParseCursor(%q) = %v, want ErrBadCursor", name, s, err)
		}
	}
}

func b64(b []byte) string { return cursorOf(b) }

func FuzzParseCursor(f *testing.F) {
	f.Add(Cursor{{1, 2}, {3, 4}}.String())
	f.Add("AQA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		again, err := ParseCursor(c.String())
		if err != nil || !slices.Equal(again, c) {
			t.Fatalf("%q parsed as %v, which encodes to %q and parses as %v, %v", s, c, c.String(), again, err)
		}
	})
}

// testLog is a WAL with a feed as its tail, as a node has it.
type testLog struct {
	t    *testing.T
	dir  string
	feed *Feed
	l    *wal.Log
}

func newTestLog(t *testing.T, tailBytes int) *testLog {
	tl := &testLog{t: t, dir: t.TempDir(), feed: NewFeed(FeedConfig{TailBytes: tailBytes})}
	tl.open()
	t.Cleanup(func() { tl.l.Close() })
	return tl
}

func (tl *testLog) open() {
	l, err := wal.Open(wal.Options{Dir: tl.dir, SegmentBytes: 4096, Sync: wal.SyncNone, Tail: tl.feed, Retain: tl.feed.Retain})
	if err != nil {
		tl.t.Fatal(err)
	}
	tl.l = l
	tl.feed.Attach(WAL(l))
}

func payload(lsn uint64) []byte {
	return fmt.Appendf(nil, "record %d %s", lsn, bytes.Repeat([]byte{'x'}, int(lsn%97)))
}

// append appends n records, each call a few, and waits for them.
func (tl *testLog) append(n int) {
	for n > 0 {
		k := min(n, 1+n%5)
		es := make([]wal.Entry, k)
		next := tl.l.LastLSN() + 1
		for i := range es {
			es[i] = wal.Entry{Type: 7, Payload: payload(next + uint64(i))}
		}
		if _, err := tl.l.AppendSync(context.Background(), es); err != nil {
			tl.t.Fatal(err)
		}
		n -= k
	}
}

// collect reads s until it has read through lsn `through` of partition 0,
// checking that every record comes once, in order, with its payload.
func collect(t *testing.T, s *Stream, from, through uint64, batch int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	next := from
	for next <= through {
		n, err := s.Read(ctx, batch, func(p, lsn uint64, e wal.Entry) error {
			if lsn != next || !bytes.Equal(e.Payload, payload(lsn)) {
				return fmt.Errorf("read lsn %d (%q), want lsn %d", lsn, e.Payload, next)
			}
			next++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if err := s.Wait(ctx, clock.Real, 100*time.Millisecond); err != nil {
				t.Fatalf("waiting for lsn %d: %v", next, err)
			}
		}
	}
	if got := s.Cursor().Of(0); got != through {
		t.Fatalf("cursor at %d after reading through %d", got, through)
	}
}

// TestStreamReadsEveryRecordOnceInOrder: from the start, from a cursor and
// from now, while the log is written, with a ring small enough that the
// stream falls behind it and reads the log on disk.
func TestStreamReadsEveryRecordOnceInOrder(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 2048)
	tl.append(300)
	ctx := context.Background()
	s, err := Open(ctx, []*Feed{tl.feed}, Start{Oldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan struct{})
	go func() { defer close(done); tl.append(2000) }()
	collect(t, s, 1, 2300, 37)
	<-done

	mid, err := Open(ctx, []*Feed{tl.feed}, Start{Cursor: Cursor{{0, 1234}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	collect(t, mid, 1235, 2300, 1000)

	now, err := Open(ctx, []*Feed{tl.feed}, Start{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer now.Close()
	if got := now.Cursor().Of(0); got != 2300 {
		t.Fatalf("a stream from now starts at %d, want 2300", got)
	}
	tl.append(5)
	collect(t, now, 2301, 2305, 10)
}

// TestSlowStreamIsServedFromDisk: a stream that reads nothing while many
// times the ring is written reads every record afterwards, from the log.
func TestSlowStreamIsServedFromDisk(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1024)
	s, err := Open(context.Background(), []*Feed{tl.feed}, Start{Now: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tl.append(3000)
	tl.feed.mu.Lock()
	held := tl.feed.ringBytes
	tl.feed.mu.Unlock()
	if held > 1024+2*chunkOverhead+200 {
		t.Fatalf("the ring holds %d bytes, over its bound", held)
	}
	collect(t, s, 1, 3000, 100)
}

// TestRetainHoldsCompactionForAStream: the log keeps the segments an open
// stream has yet to read; a cursor older than the log is refused with the
// oldest position, and one past its end too.
func TestRetainHoldsCompactionForAStream(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1024)
	tl.append(500)
	ctx := context.Background()
	s, err := Open(ctx, []*Feed{tl.feed}, Start{Cursor: Cursor{{0, 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tl.l.DeleteBefore(400); err != nil || tl.l.FirstLSN() > 11 {
		t.Fatalf("DeleteBefore with a stream at lsn 11 deleted %d segments (%v): the log starts at %d", n, err, tl.l.FirstLSN())
	}
	collect(t, s, 11, 500, 64)
	s.Close()
	if _, err := tl.l.DeleteBefore(400); err != nil || tl.l.FirstLSN() <= 11 {
		t.Fatalf("DeleteBefore with no stream: %v, first lsn %d", err, tl.l.FirstLSN())
	}
	first := tl.l.FirstLSN()
	_, err = Open(ctx, []*Feed{tl.feed}, Start{Cursor: Cursor{{0, 10}, {9, 99}}})
	var ee *ExpiredError
	if !errors.As(err, &ee) || ee.First != first || ee.Pos != 10 || !slices.Equal(ee.Oldest, Cursor{{0, first - 1}, {9, 99}}) {
		t.Fatalf("an old cursor: %v (%+v); want expired, oldest at %d", err, ee, first-1)
	}
	// The oldest cursor is one a stream opens at.
	s2, err := Open(ctx, []*Feed{tl.feed}, Start{Cursor: ee.Oldest})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	collect(t, s2, first, 500, 1000)
	if got := s2.Cursor(); !slices.Equal(got, Cursor{{0, 500}, {9, 99}}) {
		t.Fatalf("the stream's cursor %v does not carry the partition it does not read", got)
	}
	var ae *AheadError
	if _, err := Open(ctx, []*Feed{tl.feed}, Start{Cursor: Cursor{{0, 501}}}); !errors.As(err, &ae) || ae.Last != 500 {
		t.Fatalf("a cursor past the end: %v", err)
	}
}

// TestStreamFollowsAReopenedLog: the node reopens its WAL (a storage
// failure); a stream reads on from the new log at its place.
func TestStreamFollowsAReopenedLog(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 1<<20)
	tl.append(100)
	s, err := Open(context.Background(), []*Feed{tl.feed}, Start{Oldest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	collect(t, s, 1, 50, 50)
	tl.feed.Detach()
	if err := tl.l.Close(); err != nil {
		t.Fatal(err)
	}
	tl.open()
	tl.append(100)
	collect(t, s, 51, 200, 33)
}

// TestManyStreamsWhileWriting: a writer publishing while many
// streams read the ring and the log never blocks on them (the race
// detector checks the sharing), and each stream reads every record.
func TestManyStreamsWhileWriting(t *testing.T) {
	t.Parallel()
	tl := newTestLog(t, 4096)
	tl.append(50)
	var wg sync.WaitGroup
	for i := range 6 {
		s, err := Open(context.Background(), []*Feed{tl.feed}, Start{Oldest: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer s.Close()
			collect(t, s, 1, 1050, 1+rand.IntN(200)+i)
		})
	}
	tl.append(1000)
	wg.Wait()
	tl.feed.mu.Lock()
	rung := len(tl.feed.ring)
	tl.feed.mu.Unlock()
	if tl.feed.Watched() || tl.feed.Retain() != 0 || rung != 0 {
		t.Fatalf("after every stream closed the feed is watched %v, retains %d, rings %d chunks", tl.feed.Watched(), tl.feed.Retain(), rung)
	}
}

// TestResolve: a feed without a key resolves tasks from what it learned,
// then asks Lookup once for the rest, each task once.
func TestResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var asked [][]string
	f := NewFeed(FeedConfig{Lookup: func(_ context.Context, ids []string, out []Target) error {
		asked = append(asked, append([]string(nil), ids...))
		for i, id := range ids {
			if id == "old" {
				out[i] = Target{"ns", "old-q", "wf"}
			}
		}
		return nil
	}})
	f.Learn([]Placed{{"a", Target{"ns", "q", ""}}}, false)
	ids := []string{"a", "old", "gone", "", "old"}
	out := make([]Target, len(ids))
	if err := f.Resolve(ctx, ids, out, false); err != nil {
		t.Fatal(err)
	}
	want := []Target{{"ns", "q", ""}, {"ns", "old-q", "wf"}, {}, {}, {"ns", "old-q", "wf"}}
	if fmt.Sprint(out) != fmt.Sprint(want) || fmt.Sprint(asked) != "[[old gone]]" {
		t.Fatalf("Resolve = %v, asked %v", out, asked)
	}
	if err := f.Resolve(ctx, ids, out, false); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(asked) != "[[old gone] [gone]]" {
		t.Fatalf("what Lookup found was not kept: asked %v", asked)
	}
}

// TestResolveKeyed: a feed with a key (a partition of one queue) resolves
// every task to its key, with the workflow it learned. Only a stream that
// needs workflows makes it ask Lookup, and only for the tasks it lacks,
// each once; it keeps what Lookup finds (a workflow, or none), forgets a
// task nobody knows, and keeps nothing of a Lookup that failed, whose
// error Resolve returns.
func TestResolveKeyed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := Target{"k", "q", ""}
	var asked [][]string
	unavailable := errors.New("partition 7 is not served now")
	var fail error
	f := NewFeed(FeedConfig{Key: &key, Lookup: func(_ context.Context, ids []string, out []Target) error {
		asked = append(asked, append([]string(nil), ids...))
		if fail != nil {
			out[0] = Target{"k", "q", "half-answered"}
			return fail
		}
		for i, id := range ids {
			switch id {
			case "old":
				out[i] = Target{"k", "q", "w2"}
			case "lone", "y":
				out[i] = Target{"k", "q", ""}
			}
		}
		return nil
	}})
	resolve := func(workflows bool, ids ...string) []Target {
		t.Helper()
		out := make([]Target, len(ids))
		if err := f.Resolve(ctx, ids, out, workflows); err != nil {
			t.Fatalf("Resolve(%v, workflows %v): %v", ids, workflows, err)
		}
		return out
	}
	// Without workflows, the feed learns only the tasks of a workflow.
	f.Learn([]Placed{{"x", Target{"k", "q", "w1"}}, {"y", Target{"k", "q", ""}}}, false)
	got := resolve(false, "x", "y", "old")
	if want := []Target{{"k", "q", "w1"}, key, key}; fmt.Sprint(got) != fmt.Sprint(want) || asked != nil {
		t.Fatalf("without workflows: %v, asked %v; want %v, no look-up", got, asked, want)
	}
	// With them, it asks for the tasks it lacks (y too: it did not keep
	// it), each once.
	got = resolve(true, "x", "old", "y", "lone", "gone", "old", "")
	want := []Target{{"k", "q", "w1"}, {"k", "q", "w2"}, key, key, key, {"k", "q", "w2"}, key}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(asked) != "[[old y lone gone]]" {
		t.Fatalf("with workflows: %v, asked %v; want %v, asked [[old y lone gone]]", got, asked, want)
	}
	// What it found is kept, a workflow or none; a task nobody knows is
	// asked again.
	asked = nil
	got = resolve(true, "old", "lone", "y", "gone")
	if want := []Target{{"k", "q", "w2"}, key, key, key}; fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(asked) != "[[gone]]" {
		t.Fatalf("again: %v, asked %v; want %v, asked [[gone]]", got, asked, want)
	}
	// For a stream that needs workflows it learns the tasks outside any
	// workflow too.
	asked = nil
	f.Learn([]Placed{{"z", Target{"k", "q", ""}}}, true)
	if got = resolve(true, "z"); got[0] != key || asked != nil {
		t.Fatalf("a task learned outside any workflow: %v, asked %v; want %v, no look-up", got, asked, key)
	}
	// A look-up that fails: Resolve fails with its error, keeping
	// nothing of what it half answered.
	fail = unavailable
	if err := f.Resolve(ctx, []string{"new"}, make([]Target, 1), true); !errors.Is(err, unavailable) {
		t.Fatalf("Resolve with a failing Lookup: %v, want %v", err, unavailable)
	}
	fail, asked = nil, nil
	if got = resolve(true, "new"); got[0] != key || fmt.Sprint(asked) != "[[new]]" {
		t.Fatalf("after a failed look-up: %v, asked %v; want %v, asked again", got, asked, key)
	}
}

func cursorOf(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
