package events

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/wal"
)

// Log is a partition's log as a feed reads it behind its tail: the file
// WAL (WAL) or the database log (mysqllog.Events).
type Log interface {
	// First returns the LSN of the oldest record the log holds: 1 for a log
	// that never let a record go.
	First(ctx context.Context) (uint64, error)
	// Last returns the LSN of the last durable record (0: none).
	Last(ctx context.Context) (uint64, error)
	// Open returns a reader of the log's durable records from from on
	// (from ≥ First). An error wrapping wal.ErrCompacted says the log
	// starts after from.
	Open(ctx context.Context, from uint64) (Reader, error)
}

// Reader reads a log's durable records in LSN order, keeping its place.
type Reader interface {
	// Read calls fn for at most max records from where the last Read
	// stopped and returns how many it read: 0 when no more is durable now.
	// e.Payload is valid only during fn. A record fn fails on is read
	// again by the next Read. An error wrapping wal.ErrCompacted says the
	// log let the next record go.
	Read(ctx context.Context, max int, fn func(lsn uint64, e wal.Entry) error) (int, error)
	// Close releases what the reader holds.
	Close() error
}

// Target is where a task is: its namespace and queue, and the workflow it
// belongs to ("" for none; its id is the namespace's).
type Target struct {
	Namespace, Queue, Workflow string
}

// FeedConfig configures a Feed.
type FeedConfig struct {
	// Partition is the partition's id (0 in embedded mode).
	Partition uint64
	// Key, if set, is the one namespace and queue every record of the
	// partition belongs to (cluster mode); nil for a partition of many
	// queues (embedded mode), whose tasks Lookup finds.
	Key *Target
	// TailBytes bounds the records the feed keeps in memory (default
	// DefaultTailBytes).
	TailBytes int
	// Polled says that no writer publishes to the feed (a partition served
	// by another node): streams poll its log.
	Polled bool
	// Lookup finds the namespace, queue and workflow of the tasks named:
	// it sets out[i] for each ids[i] it knows, and leaves the others zero
	// (tasks nobody knows any more). It may be slow (it takes the
	// coordinator's mutex, or asks the node that serves the partition):
	// the feed asks it only for the tasks its directory lacks, a batch at
	// a time, and a feed with Key only for a stream that needs their
	// workflow (Resolve). An error says it could not answer (the
	// partition is not served now): Resolve fails with it, keeping
	// nothing.
	Lookup func(ctx context.Context, ids []string, out []Target) error
}

// Where is a Lookup's answer from a partition's coordinator c
// (Coordinator.Where).
func Where(c *coordinator.Coordinator, ids []string, out []Target) error {
	return c.Where(ids, func(i int, namespace, queue, workflow string) {
		out[i] = Target{Namespace: namespace, Queue: queue, Workflow: workflow}
	})
}

// DefaultTailBytes is the default of FeedConfig.TailBytes.
const DefaultTailBytes = 16 << 20

// maxDirectory bounds the feed's directory of tasks (about 80 bytes an
// entry: 20 MiB at most, while a stream watches); it starts over when
// full.
const maxDirectory = 1 << 18

// chunkOverhead is what a chunk costs beside its payloads, per record.
const chunkOverhead = 32

// Feed is one partition's log as the streams of this server read it: its
// most recent durable records in memory (the tail, a ring of the writes the
// log's writer published), the log behind them, and the streams that read
// it. It is safe for concurrent use.
type Feed struct {
	cfg FeedConfig
	log atomic.Pointer[logRef]

	// readers counts the stream readers registered; Watched is readers > 0.
	readers atomic.Int32

	mu        sync.Mutex
	ring      []*chunk // consecutive LSNs, oldest first
	ringBytes int
	wakes     map[chan struct{}]int // streams to wake at a publish, by how many of their readers read here
	reading   map[*partReader]struct{}

	// dirMu guards dir, apart from mu: the log's writer never waits for
	// the streams' look-ups.
	dirMu sync.RWMutex
	dir   directory
}

type logRef struct{ Log }

// chunk is one published write: its records, their payloads in one buffer
// that is never written again, so readers use it without the lock.
type chunk struct {
	first   uint64
	entries []wal.Entry
	bytes   int
}

func (c *chunk) last() uint64 { return c.first + uint64(len(c.entries)) - 1 }

// NewFeed returns a feed with no log yet (Attach sets it).
func NewFeed(cfg FeedConfig) *Feed {
	if cfg.TailBytes <= 0 {
		cfg.TailBytes = DefaultTailBytes
	}
	return &Feed{cfg: cfg, wakes: make(map[chan struct{}]int), reading: make(map[*partReader]struct{})}
}

// Partition is the feed's partition.
func (f *Feed) Partition() uint64 { return f.cfg.Partition }

// Key returns the namespace and queue of every record of the partition,
// if it has one (cluster mode).
func (f *Feed) Key() (Target, bool) {
	if f.cfg.Key == nil {
		return Target{}, false
	}
	return *f.cfg.Key, true
}

// Polled reports whether streams must poll the feed's log (no writer
// publishes to it).
func (f *Feed) Polled() bool { return f.cfg.Polled }

// Attach makes l the log the feed reads behind its tail: at the log's
// open, and again after each reopen. Readers of the log before go on to
// the new one at their position.
func (f *Feed) Attach(l Log) {
	f.log.Store(&logRef{l})
	f.wake()
}

// wake signals every stream that reads the feed, without waiting.
func (f *Feed) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Detach forgets the log (it is closed, and none serves yet): streams
// that need it wait, answering unavailable if they must start now.
func (f *Feed) Detach() { f.log.Store(nil) }

// current returns the log attached, or unavailable.
func (f *Feed) current() (*logRef, error) {
	if l := f.log.Load(); l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("%w: partition %d's log is not open (the server is starting or reopening it); retry shortly", coordinator.ErrUnavailable, f.cfg.Partition)
}

// Watched reports whether a stream reads the feed (the log's writer
// publishes only then: wal.Tail).
func (f *Feed) Watched() bool { return f.readers.Load() > 0 }

// Publish takes the records first, first+1, ... of one durable write, as
// the log's writer hands them over (wal.Tail): it copies them into the
// ring, drops the oldest records past TailBytes, and wakes the streams
// that read the feed. It never waits for a reader.
func (f *Feed) Publish(first uint64, entries []wal.Entry) {
	if len(entries) == 0 {
		return
	}
	size := 0
	for _, e := range entries {
		size += len(e.Payload)
	}
	buf := make([]byte, 0, size)
	c := &chunk{first: first, entries: make([]wal.Entry, len(entries)), bytes: size + len(entries)*chunkOverhead}
	for i, e := range entries {
		start := len(buf)
		buf = append(buf, e.Payload...)
		c.entries[i] = wal.Entry{Type: e.Type, Payload: buf[start:len(buf):len(buf)]}
	}
	f.mu.Lock()
	if f.readers.Load() == 0 {
		// The last stream left since the writer asked: keep nothing.
		f.mu.Unlock()
		return
	}
	if n := len(f.ring); n > 0 && f.ring[n-1].last()+1 != first {
		// A write published after a time nobody watched: the ring
		// starts again, so that it holds consecutive records.
		clear(f.ring)
		f.ring, f.ringBytes = f.ring[:0], 0
	}
	f.ring = append(f.ring, c)
	f.ringBytes += c.bytes
	drop := 0
	for drop < len(f.ring)-1 && f.ringBytes > f.cfg.TailBytes {
		f.ringBytes -= f.ring[drop].bytes
		f.ring[drop] = nil
		drop++
	}
	if drop > 0 {
		f.ring = append(f.ring[:0], f.ring[drop:]...)
	}
	f.mu.Unlock()
	f.wake()
}

// fromRing returns the chunks of the ring from the one that holds lsn on,
// appended to dst; none if the ring does not hold lsn.
func (f *Feed) fromRing(dst []*chunk, lsn uint64) []*chunk {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.ring)
	if n == 0 || lsn < f.ring[0].first || lsn > f.ring[n-1].last() {
		return dst
	}
	i := sort.Search(n, func(i int) bool { return f.ring[i].last() >= lsn })
	return append(dst, f.ring[i:]...)
}

// Retain returns the LSN of the oldest record a stream reading the feed
// still needs (0: none reads it), for the log's compaction
// (wal.Options.Retain): a connected stream is never refused for records
// it has yet to read.
func (f *Feed) Retain() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var oldest uint64
	for p := range f.reading {
		if next := p.next.Load(); oldest == 0 || next < oldest {
			oldest = next
		}
	}
	return oldest
}

// register adds a stream's reader; wake is signalled at each publish.
func (f *Feed) register(p *partReader, wake chan struct{}) {
	f.mu.Lock()
	f.reading[p] = struct{}{}
	f.wakes[wake]++
	f.readers.Add(1)
	f.mu.Unlock()
}

func (f *Feed) unregister(p *partReader, wake chan struct{}) {
	f.mu.Lock()
	delete(f.reading, p)
	if f.wakes[wake]--; f.wakes[wake] <= 0 {
		delete(f.wakes, wake)
	}
	last := len(f.reading) == 0
	if last {
		// Nobody reads: let the ring's memory go, and the directory's.
		clear(f.ring)
		f.ring, f.ringBytes = f.ring[:0], 0
	}
	f.readers.Add(-1)
	f.mu.Unlock()
	if last {
		f.dirMu.Lock()
		f.dir = directory{}
		f.dirMu.Unlock()
	}
}

// Placed is where a task is.
type Placed struct {
	TaskID string
	Target
}

// Learn records where tasks are (from the records that create them), for
// Resolve. A feed with a Key learns the tasks of a workflow, and the others
// (their workflow "") only for a stream that needs workflows: for the
// rest, where its key says is all there is to know.
func (f *Feed) Learn(tasks []Placed, workflows bool) {
	if len(tasks) == 0 {
		return
	}
	// Every stream of the feed reads the same records: most find what
	// they would learn known already, under the read lock.
	var unknown []Placed
	f.dirMu.RLock()
	for _, p := range tasks {
		if f.cfg.Key != nil && p.Workflow == "" && !workflows {
			continue
		}
		if _, ok := f.dir.find(p.TaskID); !ok && p.TaskID != "" {
			unknown = append(unknown, p)
		}
	}
	f.dirMu.RUnlock()
	if len(unknown) == 0 {
		return
	}
	f.dirMu.Lock()
	for _, p := range unknown {
		f.dir.learn(p.TaskID, p.Target)
	}
	f.dirMu.Unlock()
}

// Resolve sets out[i] to where task ids[i] is: what the directory learned,
// else what Lookup finds (asked once for the tasks the directory lacks,
// and kept); zero for a task nobody knows any more. A feed with a Key
// resolves every task to its key, with the workflow the directory
// learned; it asks Lookup for the workflow of the others only when
// workflows is set (a stream that filters by workflow), and a task
// nobody knows any more is then in none. It fails only with Lookup's
// error.
func (f *Feed) Resolve(ctx context.Context, ids []string, out []Target, workflows bool) error {
	keyed := f.cfg.Key != nil
	var missing []int
	f.dirMu.RLock()
	for i, id := range ids {
		t, ok := f.dir.find(id)
		if keyed {
			out[i], out[i].Workflow = *f.cfg.Key, t.Workflow
		} else {
			out[i] = t
		}
		if !ok && id != "" && (!keyed || workflows) {
			missing = append(missing, i)
		}
	}
	f.dirMu.RUnlock()
	if len(missing) == 0 || f.cfg.Lookup == nil {
		return nil
	}
	// Each task once, however many of its records the batch holds.
	ask := make([]string, 0, len(missing))
	at := make(map[string]int, len(missing))
	for _, i := range missing {
		if _, ok := at[ids[i]]; !ok {
			at[ids[i]] = len(ask)
			ask = append(ask, ids[i])
		}
	}
	found := make([]Target, len(ask))
	if err := f.cfg.Lookup(ctx, ask, found); err != nil {
		return err
	}
	f.dirMu.Lock()
	for k, id := range ask {
		t := found[k]
		if t == (Target{}) {
			continue // nobody knows it: asked again next time
		}
		if keyed {
			t = Target{Namespace: f.cfg.Key.Namespace, Queue: f.cfg.Key.Queue, Workflow: t.Workflow}
		}
		f.dir.learn(id, t)
	}
	f.dirMu.Unlock()
	for _, i := range missing {
		if t := found[at[ids[i]]]; keyed {
			out[i].Workflow = t.Workflow
		} else {
			out[i] = t
		}
	}
	return nil
}

// directory maps task ids to their targets, each target stored once.
type directory struct {
	tasks   map[string]uint32
	targets []Target
	index   map[Target]uint32
}

func (d *directory) learn(id string, t Target) {
	if d.tasks == nil || len(d.tasks) >= maxDirectory {
		d.tasks, d.targets, d.index = make(map[string]uint32), d.targets[:0], make(map[Target]uint32)
	}
	k, ok := d.index[t]
	if !ok {
		k = uint32(len(d.targets))
		d.targets = append(d.targets, t)
		d.index[t] = k
	}
	d.tasks[id] = k
}

func (d *directory) find(id string) (Target, bool) {
	k, ok := d.tasks[id]
	if !ok {
		return Target{}, false
	}
	return d.targets[k], true
}

// partReader is one stream's place in one feed.
type partReader struct {
	f *Feed
	// next is the LSN of the next record to read (Retain reads it).
	next   atomic.Uint64
	disk   Reader
	diskOf *logRef // the log disk reads
	chunks []*chunk
}

// read calls fn for up to max records of the feed from next on: from the
// ring while it holds next, else from the log. It returns how many it read
// (0: nothing more is durable now).
func (p *partReader) read(ctx context.Context, max int, fn func(lsn uint64, e wal.Entry) error) (int, error) {
	next := p.next.Load()
	p.chunks = p.f.fromRing(p.chunks[:0], next)
	if len(p.chunks) > 0 {
		p.closeDisk() // caught up with the ring
		n := 0
		for _, c := range p.chunks {
			for i := int(next - c.first); i < len(c.entries) && n < max; i++ {
				if err := fn(next, c.entries[i]); err != nil {
					return n, err
				}
				next++
				p.next.Store(next)
				n++
			}
		}
		clear(p.chunks)
		return n, nil
	}
	lg, err := p.f.current()
	if err != nil {
		return 0, err
	}
	if p.disk == nil || p.diskOf != lg {
		p.closeDisk()
		if p.disk, err = lg.Open(ctx, next); err != nil {
			p.disk = nil
			return 0, err
		}
		p.diskOf = lg
	}
	n, err := p.disk.Read(ctx, max, func(lsn uint64, e wal.Entry) error {
		if lsn != next {
			return fmt.Errorf("events: internal error: partition %d's log gave lsn %d, want %d", p.f.cfg.Partition, lsn, next)
		}
		if err := fn(lsn, e); err != nil {
			return err
		}
		next++
		p.next.Store(next)
		return nil
	})
	if err != nil && !errors.Is(err, ctx.Err()) {
		// A reader of a log that failed or closed: the next read opens
		// the log attached then, at the same place.
		p.closeDisk()
	}
	return n, err
}

func (p *partReader) closeDisk() {
	if p.disk != nil {
		p.disk.Close()
		p.disk, p.diskOf = nil, nil
	}
}
