package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/snapshot/snapshotpb"
	"github.com/tenurehq/tenure/internal/state"
)

// The format is described in doc.go; keep the two in step.
const (
	magic          = "TENUSNAP"
	endMagic       = "TSNAPEND"
	formatVersion  = 1
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
	var (
		chunk   snapshotpb.TaskChunk
		size    int
		buf     []byte
		prevLSN uint64
	)
	flush := func() error {
		if len(chunk.Tasks) == 0 {
			return nil
		}
		var err error
		buf, err = proto.MarshalOptions{}.MarshalAppend(append(buf[:0], make([]byte, chunkHeadSize)...), &chunk)
		if err != nil {
			return fmt.Errorf("snapshot: encode chunk: %w", err)
		}
		n := len(buf) - chunkHeadSize
		if n > MaxChunkBytes {
			return fmt.Errorf("snapshot: a chunk of %d tasks encodes to %d bytes, over MaxChunkBytes = %d", len(chunk.Tasks), n, MaxChunkBytes)
		}
		binary.LittleEndian.PutUint32(buf[0:4], uint32(n))
		binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(buf[chunkHeadSize:], castagnoli))
		if _, err := cw.Write(buf); err != nil {
			return err
		}
		sum.Chunks++
		chunk.Tasks, size = chunk.Tasks[:0], 0
		return nil
	}
	for _, t := range img.Tasks {
		// The writer's side of the pair of checks the reader makes.
		if t.CreatedLSN <= prevLSN || t.CreatedLSN > img.LastLSN {
			return sum, fmt.Errorf("snapshot: internal error: task %q has creation lsn %d after %d (last lsn %d)", t.ID, t.CreatedLSN, prevLSN, img.LastLSN)
		}
		prevLSN = t.CreatedLSN
		m := TaskMessage(t)
		chunk.Tasks = append(chunk.Tasks, m)
		size += proto.Size(m)
		sum.Tasks++
		if len(chunk.Tasks) >= chunkMaxTasks || size >= chunkFillBytes {
			if err := flush(); err != nil {
				return sum, err
			}
		}
	}
	if err := flush(); err != nil {
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
	if v := binary.LittleEndian.Uint32(b[8:12]); v != formatVersion {
		return 0, 0, fmt.Sprintf("unsupported format version %d (this build reads version %d)", v, formatVersion)
	}
	return binary.LittleEndian.Uint64(b[16:24]), binary.LittleEndian.Uint64(b[24:32]), ""
}

// Decode reads a snapshot of size bytes from r and rebuilds its state,
// verifying every checksum and every task (see the package documentation).
// Errors about the content are *CorruptError (with an empty Path); read
// errors are returned wrapped.
func Decode(r io.Reader, size int64) (*state.State, Summary, error) {
	var sum Summary
	corrupt := func(off int64, format string, args ...any) (*state.State, Summary, error) {
		return nil, sum, &CorruptError{Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	readErr := func(off int64, what string, err error) (*state.State, Summary, error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return corrupt(off, "%s cut short (file shorter than its size %d)", what, size)
		}
		return nil, sum, fmt.Errorf("snapshot: read at offset %d: %w", off, err)
	}
	if size < headerSize+trailerSize {
		return corrupt(0, "file is %d bytes, shorter than a header and a trailer (%d)", size, headerSize+trailerSize)
	}
	br := bufio.NewReaderSize(r, 256<<10)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return readErr(0, "header", err)
	}
	lastLSN, epoch, reason := decodeHeader(hdr[:])
	if reason != "" {
		return corrupt(0, "%s", reason)
	}
	sum.LastLSN, sum.Epoch, sum.Bytes = lastLSN, epoch, size
	fileCRC := crc32.Update(0, castagnoli, hdr[:])

	loader := state.NewLoader(lastLSN, epoch)
	end := size - trailerSize
	off := int64(headerSize)
	var (
		ch      [chunkHeadSize]byte
		payload []byte
		chunk   snapshotpb.TaskChunk
	)
	for off < end {
		if end-off < chunkHeadSize {
			return corrupt(off, "%d bytes before the trailer, too few for a chunk header", end-off)
		}
		if _, err := io.ReadFull(br, ch[:]); err != nil {
			return readErr(off, "chunk header", err)
		}
		n := int64(binary.LittleEndian.Uint32(ch[0:4]))
		switch {
		case n == 0:
			return corrupt(off, "empty chunk")
		case n > MaxChunkBytes:
			return corrupt(off, "chunk claims %d bytes, over MaxChunkBytes = %d", n, MaxChunkBytes)
		case n > end-off-chunkHeadSize:
			return corrupt(off, "chunk claims %d bytes, but only %d remain before the trailer", n, end-off-chunkHeadSize)
		}
		if int64(cap(payload)) < n {
			payload = make([]byte, n)
		}
		p := payload[:n]
		if _, err := io.ReadFull(br, p); err != nil {
			return readErr(off, "chunk", err)
		}
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(ch[4:8]) {
			return corrupt(off, "chunk checksum mismatch")
		}
		fileCRC = crc32.Update(crc32.Update(fileCRC, castagnoli, ch[:]), castagnoli, p)
		if err := proto.Unmarshal(p, &chunk); err != nil {
			return corrupt(off, "chunk does not decode: %v", err)
		}
		if len(chunk.Tasks) == 0 {
			return corrupt(off, "chunk holds no task")
		}
		for _, m := range chunk.Tasks {
			t, lease := taskFromMessage(m)
			if err := loader.Add(t, lease); err != nil {
				return corrupt(off, "%v", err)
			}
			sum.Tasks++
		}
		sum.Chunks++
		off += chunkHeadSize + n
	}
	var tr [trailerSize]byte
	if _, err := io.ReadFull(br, tr[:]); err != nil {
		return readErr(off, "trailer", err)
	}
	if string(tr[0:8]) != endMagic {
		return corrupt(off, "bad trailer magic %q", tr[0:8])
	}
	if crc := crc32.Update(fileCRC, castagnoli, tr[:20]); crc != binary.LittleEndian.Uint32(tr[20:24]) {
		return corrupt(off, "file checksum mismatch")
	}
	if n := binary.LittleEndian.Uint64(tr[8:16]); n != uint64(sum.Tasks) {
		return corrupt(off, "trailer counts %d tasks, the chunks hold %d", n, sum.Tasks)
	}
	if n := binary.LittleEndian.Uint32(tr[16:20]); n != uint32(sum.Chunks) {
		return corrupt(off, "trailer counts %d chunks, the file holds %d", n, sum.Chunks)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err != nil {
			return readErr(off, "end of file", err)
		}
		return corrupt(size, "data after the trailer (file longer than its size %d)", size)
	}
	st, err := loader.State()
	if err != nil {
		return corrupt(off, "%v", err)
	}
	return st, sum, nil
}
