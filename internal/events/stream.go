package events

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/wal"
)

// Start says where a stream starts.
type Start struct {
	// Cursor: after the positions it holds (a partition it does not name:
	// from its first record).
	Cursor Cursor
	// Oldest: from the first record each partition holds. Now: after the
	// last durable record of each partition when the stream opens. Either
	// one makes Cursor ignored.
	Oldest, Now bool
}

// ExpiredError refuses a position older than a partition's first record.
type ExpiredError struct {
	Partition uint64
	// Pos is the position asked for; First the partition's first record.
	Pos, First uint64
	// Oldest is the cursor asked for with every partition whose position
	// is too old at its oldest one: where the stream can start.
	Oldest Cursor
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("the cursor is older than what partition %d still holds: it is at lsn %d, and the partition's log starts at lsn %d (older records were replaced by a snapshot); resume from the oldest position available (the error's oldest cursor) to skip the records between them, or from \"now\"",
		e.Partition, e.Pos, e.First)
}

// AheadError refuses a position past a partition's last record.
type AheadError struct {
	Partition, Pos, Last uint64
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("the cursor is at lsn %d of partition %d, but its log ends at lsn %d: it is a cursor of another server or of a log since restored from an older backup; start from \"oldest\" or \"now\"",
		e.Pos, e.Partition, e.Last)
}

// Stream reads the records of several partitions, each in LSN order, in
// turn. It is not safe for concurrent use.
type Stream struct {
	parts   []*partReader // in partition order
	carried Cursor        // the positions of partitions it does not read
	wake    chan struct{}
	turn    int
	closed  bool
}

// Open opens a stream of feeds (in partition order, none twice) from start,
// checking every position against its partition's log: an *ExpiredError
// or *AheadError refuses it.
func Open(ctx context.Context, feeds []*Feed, start Start) (*Stream, error) {
	s := &Stream{wake: make(chan struct{}, 1)}
	in := make(map[uint64]bool, len(feeds))
	var expired *ExpiredError
	for _, f := range feeds {
		in[f.Partition()] = true
		pos, err := position(ctx, f, start)
		if e, ok := errors.AsType[*ExpiredError](err); ok {
			if expired == nil {
				expired = e
				expired.Oldest = start.Cursor
			}
			expired.Oldest = expired.Oldest.With(f.Partition(), e.First-1)
			continue
		}
		if err != nil {
			s.Close()
			return nil, err
		}
		s.add(f, pos)
	}
	if expired != nil {
		s.Close()
		return nil, expired
	}
	if !start.Oldest && !start.Now {
		for _, p := range start.Cursor {
			if !in[p.Partition] {
				s.carried = append(s.carried, p)
			}
		}
	}
	return s, nil
}

// position is where a stream from start reads f from (the LSN before its
// first record), checked against f's log.
func position(ctx context.Context, f *Feed, start Start) (uint64, error) {
	lg, err := f.current()
	if err != nil {
		return 0, err
	}
	first, err := lg.First(ctx)
	if err != nil {
		return 0, err
	}
	last, err := lg.Last(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case start.Now:
		return last, nil
	case start.Oldest:
		return first - 1, nil
	}
	pos := start.Cursor.Of(f.Partition())
	if pos+1 < first {
		return 0, &ExpiredError{Partition: f.Partition(), Pos: pos, First: first}
	}
	if pos > last {
		return 0, &AheadError{Partition: f.Partition(), Pos: pos, Last: last}
	}
	return pos, nil
}

// Reads reports whether the stream reads partition p.
func (s *Stream) Reads(p uint64) bool {
	i := sort.Search(len(s.parts), func(i int) bool { return s.parts[i].f.Partition() >= p })
	return i < len(s.parts) && s.parts[i].f.Partition() == p
}

// Add makes the stream read f too, a partition found after it opened (a
// queue created since, in cluster mode): from the position the stream's
// cursor held for it, else from its first record.
func (s *Stream) Add(ctx context.Context, f *Feed) error {
	if s.Reads(f.Partition()) {
		return nil
	}
	c := s.carried
	pos, err := position(ctx, f, Start{Cursor: c})
	if e, ok := errors.AsType[*ExpiredError](err); ok {
		e.Oldest = s.Cursor().With(f.Partition(), e.First-1)
		return e
	}
	if err != nil {
		return err
	}
	if i := sort.Search(len(c), func(i int) bool { return c[i].Partition >= f.Partition() }); i < len(c) && c[i].Partition == f.Partition() {
		s.carried = append(c[:i:i], c[i+1:]...)
	}
	s.add(f, pos)
	return nil
}

func (s *Stream) add(f *Feed, pos uint64) {
	p := &partReader{f: f}
	p.next.Store(pos + 1)
	i := sort.Search(len(s.parts), func(i int) bool { return s.parts[i].f.Partition() >= f.Partition() })
	s.parts = append(s.parts, nil)
	copy(s.parts[i+1:], s.parts[i:])
	s.parts[i] = p
	f.register(p, s.wake)
}

// Polled reports whether a partition the stream reads must be polled (no
// writer of this node publishes to it).
func (s *Stream) Polled() bool {
	for _, p := range s.parts {
		if p.f.Polled() {
			return true
		}
	}
	return false
}

// Read calls fn for up to max records, the partitions in turn, and
// returns how many it read: 0 when the stream has read everything durable
// in every partition. A partition whose log let its next record go ends
// the stream with an *ExpiredError.
func (s *Stream) Read(ctx context.Context, max int, fn func(partition, lsn uint64, e wal.Entry) error) (int, error) {
	n := 0
	for i := 0; i < len(s.parts) && n < max; i++ {
		p := s.parts[(s.turn+i)%len(s.parts)]
		id := p.f.Partition()
		k, err := p.read(ctx, max-n, func(lsn uint64, e wal.Entry) error { return fn(id, lsn, e) })
		n += k
		if errors.Is(err, wal.ErrCompacted) {
			return n, s.overtaken(ctx, p, err)
		}
		if err != nil {
			return n, err
		}
	}
	s.turn++
	return n, nil
}

// overtaken is the error of a stream whose partition p let its next
// record go while the stream read it (compaction in another node).
func (s *Stream) overtaken(ctx context.Context, p *partReader, cause error) error {
	lg, err := p.f.current()
	if err != nil {
		return err
	}
	first, err := lg.First(ctx)
	if err != nil {
		return fmt.Errorf("%w (and reading where the log starts failed: %v)", cause, err)
	}
	pos := p.next.Load() - 1
	return &ExpiredError{Partition: p.f.Partition(), Pos: pos, First: first, Oldest: s.Cursor().With(p.f.Partition(), max(first-1, pos))}
}

// Wait returns when a partition the stream reads may have more (a write
// was published to one of its feeds), after poll on clk (0: no bound), or
// with ctx's error.
func (s *Stream) Wait(ctx context.Context, clk clock.Clock, poll time.Duration) error {
	var timeout <-chan time.Time
	if poll > 0 {
		t := clk.NewTimer(poll)
		defer t.Stop()
		timeout = t.C()
	}
	select {
	case <-s.wake:
	case <-timeout:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Cursor returns the stream's position in every partition it reads, and
// the positions it carries for the others its start named.
func (s *Stream) Cursor() Cursor {
	c := make(Cursor, 0, len(s.parts)+len(s.carried))
	for _, p := range s.parts {
		c = append(c, Pos{p.f.Partition(), p.next.Load() - 1})
	}
	for _, p := range s.carried {
		c = c.With(p.Partition, p.LSN)
	}
	return c
}

// Close stops reading: the feeds forget the stream and its readers let go
// of their files.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	for _, p := range s.parts {
		p.closeDisk()
		p.f.unregister(p, s.wake)
	}
}
