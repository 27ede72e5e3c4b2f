package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/snapshot/snapshotpb"
	"github.com/tenurehq/tenure/internal/state"
)

// The format is described in doc.go; keep the two in step.
const (
	magic    = "TENUSNAP"
	endMagic = "TSNAPEND"
	// formatVersion 2 added the chunk of queues (pauses, event counts),
	// which a version-1 reader would refuse as a chunk without a task; a
	// version-2 reader reads both. Version 3 added schedules (to that first
	// chunk), which a version-2 reader would silently drop. Version 4
	// added the trace context and progress report kept beside a task,
	// which a version-3 reader would silently drop, and SNOOZED
	// executions. Version 5 added the key kept beside a task and the key
	// states of a queue (docs/design/keys.md), which a version-4 reader
	// would silently drop. Version 6 added the graph (each task's
	// dependencies, workflow, parent and place in its record; the
	// workflows; BLOCKED tasks), which a version-5 reader would silently
	// drop. Version 7 added the outboxes' holds (docs/design/outbox.md),
	// which a version-6 reader would silently drop. Version 8 added the
	// remote edges (a dependency in another partition, and the result it
	// completed with: docs/design/workflows.md, "Cluster mode"), which a
	// version-7 reader would take for local ones. Version 9 added the
	// pending deliveries (docs/design/workflows.md, "Cluster mode"), which
	// a version-8 reader would silently drop.
	formatVersion  = 9
	oldestVersion  = 1
	headerSize     = 32
	chunkHeadSize  = 8
	trailerSize    = 24
	chunkMaxTasks  = 1024    // tasks per chunk the writer aims for at most
	chunkFillBytes = 1 << 20 // encoded bytes after which the writer ends a chunk

	// MaxChunkBytes bounds one chunk's payload. A task holds at most a
	// payload and a result, each bounded by the WAL's record limit (64 MiB
	// at most), so one task always fits.
	MaxChunkBytes = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrCorrupt matches every *CorruptError.
	ErrCorrupt = errors.New("snapshot: corrupt snapshot")
)

// CorruptError reports a snapshot that cannot be read as written: a bad
// checksum, a bad length, a truncated file, or content that is not a valid
// state.
type CorruptError struct {
	Path   string // file, "" when decoding a stream
	Offset int64  // byte offset of the bad header, chunk or trailer
	Reason string
}

func (e *CorruptError) Error() string {
	where := "snapshot"
	if e.Path != "" {
		where = "snapshot " + e.Path
	}
	return fmt.Sprintf("%s: corrupt at offset %d: %s", where, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for a *CorruptError.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Summary describes a snapshot.
type Summary struct {
	LastLSN uint64
	Epoch   uint64
	Tasks   int
	Chunks  int
	Bytes   int64
}

// crcWriter counts and checksums what goes through it.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// Encode writes img to w in the snapshot format. It holds at most one
// chunk's encoding in memory.
func Encode(w io.Writer, img *state.Image) (Summary, error) {
	cw := &crcWriter{w: w}
	var hdr [headerSize]byte
	encodeHeader(hdr[:], img.LastLSN, img.Epoch)
	if _, err := cw.Write(hdr[:]); err != nil {
		return Summary{}, err
	}
	sum := Summary{LastLSN: img.LastLSN, Epoch: img.Epoch}
	var buf []byte
	// The queues, schedules, workflows and outbox holds go first, in a
	// chunk of their own, so that every chunk of tasks keeps the plain
	// shape the reader's fast path takes.
	if len(img.Queues) > 0 || len(img.Schedules) > 0 || len(img.Workflows) > 0 || len(img.Holds) > 0 || len(img.Deliveries) > 0 {
		var chunk snapshotpb.TaskChunk
		for _, q := range img.Queues {
			chunk.Queues = append(chunk.Queues, queueMessage(q))
		}
		for _, sc := range img.Schedules {
			chunk.Schedules = append(chunk.Schedules, scheduleMessage(sc))
		}
		for _, w := range img.Workflows {
			chunk.Workflows = append(chunk.Workflows, workflowMessage(w))
		}
		for _, h := range img.Holds {
			chunk.OutboxHolds = append(chunk.OutboxHolds, &snapshotpb.OutboxHoldSnapshot{
				Outbox: h.Outbox, Row: h.Row, Namespace: h.Namespace, Queue: h.Queue, RequestId: h.RequestID})
		}
		for _, d := range img.Deliveries {
			chunk.Deliveries = append(chunk.Deliveries, deliveryMessage(d))
		}
		var err error
		if buf, err = (proto.MarshalOptions{}).MarshalAppend(make([]byte, chunkHeadSize), &chunk); err != nil {
			return sum, fmt.Errorf("snapshot: encode chunk: %w", err)
		}
		if err := writeChunk(cw, buf, &sum); err != nil {
			return sum, err
		}
	}
	// Each chunk of tasks is appended to buf by a taskEncoder.
	var (
		enc     taskEncoder
		tasks   int
		prevLSN uint64
	)
	flushTasks := func() error {
		if tasks == 0 {
			return nil
		}
		tasks = 0
		return writeChunk(cw, buf, &sum)
	}
	for i, t := range img.Tasks {
		// The writer's side of the pair of checks the reader makes.
		if t.CreatedLSN < prevLSN || t.CreatedLSN > img.LastLSN {
			return sum, fmt.Errorf("snapshot: internal error: task %q has creation lsn %d after %d (last lsn %d)", t.ID, t.CreatedLSN, prevLSN, img.LastLSN)
		}
		prevLSN = t.CreatedLSN
		if tasks == 0 {
			buf = append(buf[:0], make([]byte, chunkHeadSize)...)
		}
		var err error
		if buf, err = enc.appendTask(buf, t, img.Beside(i)); err != nil {
			return sum, fmt.Errorf("snapshot: encode task %q: %w", t.ID, err)
		}
		tasks++
		sum.Tasks++
		if tasks >= chunkMaxTasks || len(buf)-chunkHeadSize >= chunkFillBytes {
			if err := flushTasks(); err != nil {
				return sum, err
			}
		}
	}
	if err := flushTasks(); err != nil {
		return sum, err
	}
	var tr [trailerSize]byte
	copy(tr[0:8], endMagic)
	binary.LittleEndian.PutUint64(tr[8:16], uint64(sum.Tasks))
	binary.LittleEndian.PutUint32(tr[16:20], uint32(sum.Chunks))
	crc := crc32.Update(cw.crc, castagnoli, tr[:20])
	binary.LittleEndian.PutUint32(tr[20:24], crc)
	if _, err := cw.Write(tr[:]); err != nil {
		return sum, err
	}
	sum.Bytes = cw.n
	return sum, nil
}

// writeChunk fills in the head of buf, a chunk's head and payload, and
// writes it.
func writeChunk(cw *crcWriter, buf []byte, sum *Summary) error {
	n := len(buf) - chunkHeadSize
	if n > MaxChunkBytes {
		return fmt.Errorf("snapshot: a chunk encodes to %d bytes, over MaxChunkBytes = %d", n, MaxChunkBytes)
	}
	binary.LittleEndian.PutUint32(buf[0:4], uint32(n))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(buf[chunkHeadSize:], castagnoli))
	if _, err := cw.Write(buf); err != nil {
		return err
	}
	sum.Chunks++
	return nil
}

func encodeHeader(b []byte, lastLSN, epoch uint64) {
	copy(b[0:8], magic)
	binary.LittleEndian.PutUint32(b[8:12], formatVersion)
	binary.LittleEndian.PutUint64(b[16:24], lastLSN)
	binary.LittleEndian.PutUint64(b[24:32], epoch)
	binary.LittleEndian.PutUint32(b[12:16], headerCRC(b))
}

func headerCRC(b []byte) uint32 {
	crc := crc32.Update(0, castagnoli, b[0:12])
	return crc32.Update(crc, castagnoli, b[16:32])
}

// decodeHeader returns the last LSN and epoch of a header, or why it is
// invalid.
func decodeHeader(b []byte) (lastLSN, epoch uint64, reason string) {
	if string(b[0:8]) != magic {
		return 0, 0, fmt.Sprintf("bad magic %q, not a tenure snapshot", b[0:8])
	}
	if binary.LittleEndian.Uint32(b[12:16]) != headerCRC(b) {
		return 0, 0, "header checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v < oldestVersion || v > formatVersion {
		return 0, 0, fmt.Sprintf("unsupported format version %d (this build reads versions %d to %d)", v, oldestVersion, formatVersion)
	}
	return binary.LittleEndian.Uint64(b[16:24]), binary.LittleEndian.Uint64(b[24:32]), ""
}

// Decode reads a snapshot of size bytes from r and rebuilds its state,
// verifying every checksum and every task (see the package documentation).
// Errors about the content are *CorruptError (with an empty Path); read
// errors are returned wrapped.
//
// It reads r sequentially on one goroutine, verifies and decodes chunks on
// GOMAXPROCS others, and adds their tasks to the state in file order on the
// calling goroutine. The first problem in file order is the one reported,
// as if the chunks had been decoded one after the other.
func Decode(r io.Reader, size int64) (*state.State, Summary, error) {
	var sum Summary
	fail := func(err error) (*state.State, Summary, error) { return nil, sum, err }
	if size < headerSize+trailerSize {
		return fail(corruptAt(0, "file is %d bytes, shorter than a header and a trailer (%d)", size, headerSize+trailerSize))
	}
	br := bufio.NewReaderSize(r, 256<<10)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fail(readError(0, "header", err, size))
	}
	lastLSN, epoch, reason := decodeHeader(hdr[:])
	if reason != "" {
		return fail(corruptAt(0, "%s", reason))
	}
	sum.LastLSN, sum.Epoch, sum.Bytes = lastLSN, epoch, size

	loader := state.NewLoader(lastLSN, epoch)
	if n := taskCountHint(r, size); n > 0 {
		loader.Grow(n)
	}
	cr := newChunkReader(br, size, crc32.Update(0, castagnoli, hdr[:]))
	for j := range cr.order {
		<-j.done
		if j.err != nil {
			cr.stop()
			return fail(j.err)
		}
		if err := j.extra.load(loader); err != nil {
			cr.stop()
			return fail(corruptAt(j.off, "%v", err))
		}
		for i, t := range j.tasks {
			if err := loader.Add(t, j.extras[i].lease, j.extras[i].beside); err != nil {
				cr.stop()
				return fail(corruptAt(j.off, "%v", err))
			}
			sum.Tasks++
		}
		sum.Chunks++
		cr.release(j)
	}
	cr.stop() // all chunks read: waits for the goroutines, which are done
	off, fileCRC := cr.off, cr.fileCRC

	var tr [trailerSize]byte
	if _, err := io.ReadFull(br, tr[:]); err != nil {
		return fail(readError(off, "trailer", err, size))
	}
	if string(tr[0:8]) != endMagic {
		return fail(corruptAt(off, "bad trailer magic %q", tr[0:8]))
	}
	if crc := crc32.Update(fileCRC, castagnoli, tr[:20]); crc != binary.LittleEndian.Uint32(tr[20:24]) {
		return fail(corruptAt(off, "file checksum mismatch"))
	}
	if n := binary.LittleEndian.Uint64(tr[8:16]); n != uint64(sum.Tasks) {
		return fail(corruptAt(off, "trailer counts %d tasks, the chunks hold %d", n, sum.Tasks))
	}
	if n := binary.LittleEndian.Uint32(tr[16:20]); n != uint32(sum.Chunks) {
		return fail(corruptAt(off, "trailer counts %d chunks, the file holds %d", n, sum.Chunks))
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err != nil {
			return fail(readError(off, "end of file", err, size))
		}
		return fail(corruptAt(size, "data after the trailer (file longer than its size %d)", size))
	}
	st, err := loader.State()
	if err != nil {
		return fail(corruptAt(off, "%v", err))
	}
	return st, sum, nil
}

func corruptAt(off int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// readError is the error of a read at off of what in a file of size bytes.
func readError(off int64, what string, err error, size int64) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptAt(off, "%s cut short (file shorter than its size %d)", what, size)
	}
	return fmt.Errorf("snapshot: read at offset %d: %w", off, err)
}

// minTaskBytes is less than the encoding of any valid task (an id, a
// namespace, a queue, a window, a retry policy, a creation LSN and an LSN
// list take more), so that a lying trailer cannot make taskCountHint ask
// for much more memory than the file's size.
const minTaskBytes = 16

// taskCountHint returns the task count of the trailer of the size-byte
// snapshot r, if r can read it without disturbing its sequential reading,
// or 0. It is not verified (the trailer's checksum covers the whole file),
// so it is used only to size the state's indexes, and bounded by size.
func taskCountHint(r io.Reader, size int64) int {
	ra, ok := r.(io.ReaderAt)
	if !ok {
		return 0
	}
	var tr [trailerSize]byte
	if _, err := ra.ReadAt(tr[:], size-trailerSize); err != nil || string(tr[0:8]) != endMagic {
		return 0
	}
	n := binary.LittleEndian.Uint64(tr[8:16])
	if limit := uint64(size-headerSize-trailerSize) / minTaskBytes; n > limit {
		return 0
	}
	return int(n)
}

// chunkJob is one chunk on its way from the reader through a decoder to
// Decode.
type chunkJob struct {
	off    int64 // offset of the chunk header
	crc    uint32
	buf    []byte // payload (the first n bytes)
	n      int
	tasks  []*state.Task
	extras []taskExtra
	extra  chunkExtra
	err    error         // the chunk's error, or the reader's at off
	done   chan struct{} // closed once tasks or err are set
}

// chunkReader reads the chunks of a snapshot sequentially and decodes them
// concurrently; order yields them in file order, each once it is done (or
// with the error that ends the file, after which it closes). At most a
// bounded number of chunks are in flight: Decode releases each one it has
// used.
type chunkReader struct {
	order   chan *chunkJob
	work    chan *chunkJob
	free    chan *chunkJob
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped bool

	// Set by the reader when it has read every chunk; read them after order
	// is closed.
	off     int64 // offset of the trailer
	fileCRC uint32
}

func newChunkReader(br *bufio.Reader, size int64, fileCRC uint32) *chunkReader {
	workers := runtime.GOMAXPROCS(0)
	inFlight := 2*workers + 2
	cr := &chunkReader{
		order: make(chan *chunkJob, inFlight),
		work:  make(chan *chunkJob, inFlight),
		free:  make(chan *chunkJob, inFlight),
		quit:  make(chan struct{}),
	}
	for range inFlight {
		cr.free <- &chunkJob{}
	}
	cr.wg.Add(1 + workers)
	go cr.read(br, size, fileCRC)
	for range workers {
		go cr.decode()
	}
	return cr
}

// stop ends the goroutines and waits for them.
func (cr *chunkReader) stop() {
	if !cr.stopped {
		cr.stopped = true
		close(cr.quit)
		cr.wg.Wait()
	}
}

// release returns a chunk that Decode has used.
func (cr *chunkReader) release(j *chunkJob) {
	clear(j.tasks)
	j.tasks, j.extras = j.tasks[:0], j.extras[:0]
	cr.free <- j // never blocks: free holds every job
}

// read is the reader goroutine.
func (cr *chunkReader) read(br *bufio.Reader, size int64, fileCRC uint32) {
	defer cr.wg.Done()
	defer close(cr.work)
	defer close(cr.order)
	end := size - trailerSize
	off := int64(headerSize)
	var ch [chunkHeadSize]byte
	// send passes j on; false means Decode has stopped.
	send := func(j *chunkJob, decode bool) bool {
		select {
		case cr.order <- j:
		case <-cr.quit:
			return false
		}
		if !decode {
			close(j.done)
			return true
		}
		select {
		case cr.work <- j:
			return true
		case <-cr.quit:
			return false
		}
	}
	for off < end {
		var j *chunkJob
		select {
		case j = <-cr.free:
		case <-cr.quit:
			return
		}
		j.off, j.err, j.done = off, nil, make(chan struct{})
		failed := func(err error) {
			j.err = err
			send(j, false)
		}
		if end-off < chunkHeadSize {
			failed(corruptAt(off, "%d bytes before the trailer, too few for a chunk header", end-off))
			return
		}
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			failed(readError(off, "chunk header", err, size))
			return
		}
		n := int64(binary.LittleEndian.Uint32(ch[0:4]))
		switch {
		case n == 0:
			failed(corruptAt(off, "empty chunk"))
			return
		case n > MaxChunkBytes:
			failed(corruptAt(off, "chunk claims %d bytes, over MaxChunkBytes = %d", n, MaxChunkBytes))
			return
		case n > end-off-chunkHeadSize:
			failed(corruptAt(off, "chunk claims %d bytes, but only %d remain before the trailer", n, end-off-chunkHeadSize))
			return
		}
		if int64(cap(j.buf)) < n {
			j.buf = make([]byte, n)
		}
		p := j.buf[:n]
		if _, err := io.ReadFull(br, p); err != nil {
			failed(readError(off, "chunk", err, size))
			return
		}
		j.n, j.crc = int(n), binary.LittleEndian.Uint32(ch[4:8])
		fileCRC = crc32.Update(crc32.Update(fileCRC, castagnoli, ch[:]), castagnoli, p)
		if !send(j, true) {
			return
		}
		off += chunkHeadSize + n
	}
	cr.off, cr.fileCRC = off, fileCRC
}

// decode is a decoding goroutine.
func (cr *chunkReader) decode() {
	defer cr.wg.Done()
	var d chunkDecoder
	for j := range cr.work {
		select {
		case <-cr.quit:
			close(j.done) // nobody waits for it
			continue
		default:
		}
		p := j.buf[:j.n]
		switch {
		case crc32.Checksum(p, castagnoli) != j.crc:
			j.err = corruptAt(j.off, "chunk checksum mismatch")
		default:
			var err error
			j.tasks, j.extras, j.extra, err = d.decode(p, j.tasks, j.extras)
			switch {
			case err != nil:
				j.err = corruptAt(j.off, "chunk does not decode: %v", err)
			case len(j.tasks) == 0 && j.extra.empty():
				j.err = corruptAt(j.off, "chunk holds no task, no queue, no schedule and no outbox hold")
			}
		}
		close(j.done)
	}
}
