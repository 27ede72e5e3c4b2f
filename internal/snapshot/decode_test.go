package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/snapshot/snapshotpb"
	"github.com/tenurehq/tenure/internal/state"
)

// referenceDecode is Decode as it was before chunks were decoded
// concurrently and without the intermediate protobuf messages: one chunk
// after the other, each by proto.Unmarshal and taskFromMessage. Decode must
// accept and refuse exactly what it does, with the same errors.
func referenceDecode(r io.Reader, size int64) (*state.State, Summary, error) {
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
	br := bufio.NewReader(r)
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
	var ch [chunkHeadSize]byte
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
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return readErr(off, "chunk", err)
		}
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(ch[4:8]) {
			return corrupt(off, "chunk checksum mismatch")
		}
		fileCRC = crc32.Update(crc32.Update(fileCRC, castagnoli, ch[:]), castagnoli, p)
		var chunk snapshotpb.TaskChunk
		if err := proto.Unmarshal(p, &chunk); err != nil {
			return corrupt(off, "chunk does not decode: %v", err)
		}
		if len(chunk.Tasks) == 0 && len(chunk.Queues) == 0 && len(chunk.Workflows) == 0 {
			return corrupt(off, "chunk holds no task and no queue")
		}
		for _, m := range chunk.Queues {
			if err := loader.AddQueue(queueFromMessage(m)); err != nil {
				return corrupt(off, "%v", err)
			}
		}
		for _, m := range chunk.Workflows {
			if err := loader.AddWorkflow(workflowFromMessage(m)); err != nil {
				return corrupt(off, "%v", err)
			}
		}
		for _, m := range chunk.Tasks {
			t, x := taskFromMessage(m)
			if err := loader.Add(t, x.lease, x.beside); err != nil {
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

// sameDecode fails unless Decode and referenceDecode agree on b read as a
// file of size bytes: the same error (message and offset) or equal states,
// and the same summary.
func sameDecode(t *testing.T, what string, b []byte, size int64) {
	t.Helper()
	st, sum, err := Decode(bytes.NewReader(b), size)
	wst, wsum, werr := referenceDecode(bytes.NewReader(b), size)
	if fmt.Sprint(err) != fmt.Sprint(werr) || sum != wsum {
		t.Fatalf("%s: Decode = %+v, %v; before = %+v, %v", what, sum, err, wsum, werr)
	}
	if err == nil && !reflect.DeepEqual(st.Export(), wst.Export()) {
		t.Fatalf("%s: decoded states differ", what)
	}
	var ce, wce *CorruptError
	if errors.As(err, &ce) != errors.As(werr, &wce) || (ce != nil && *ce != *wce) {
		t.Fatalf("%s: errors %#v and %#v", what, ce, wce)
	}
}

// chunks returns the payloads of the chunks of a valid snapshot.
func chunks(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for off := headerSize; off < len(b)-trailerSize; {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		out = append(out, b[off+chunkHeadSize:off+chunkHeadSize+n])
		off += chunkHeadSize + n
	}
	return out
}

// slowChunk decodes a chunk payload the way Decode did before the fast path.
func slowChunk(p []byte) ([]*state.Task, []taskExtra, error) {
	var m snapshotpb.TaskChunk
	if err := proto.Unmarshal(p, &m); err != nil {
		return nil, nil, err
	}
	var (
		tasks  []*state.Task
		extras []taskExtra
	)
	for _, tm := range m.Tasks {
		t, x := taskFromMessage(tm)
		tasks = append(tasks, t)
		extras = append(extras, x)
	}
	return tasks, extras, nil
}

// checkFastChunk fails if the fast path accepts p but means something else
// than proto.Unmarshal and taskFromMessage, and returns whether it accepted.
func checkFastChunk(t *testing.T, p []byte) bool {
	t.Helper()
	var d chunkDecoder
	q := bytes.Clone(p)
	tasks, extras, ok := d.fast(q, nil, nil)
	if !ok {
		return false
	}
	// Whatever the tasks hold must be theirs: spoil the buffer.
	for i := range q {
		q[i] = 0xaa
	}
	want, wantExtras, err := slowChunk(p)
	if err != nil {
		t.Fatalf("fast path accepted a chunk that proto refuses: %v", err)
	}
	if len(tasks) == 0 && len(want) == 0 {
		return true
	}
	if !reflect.DeepEqual(tasks, want) || !reflect.DeepEqual(extras, wantExtras) {
		t.Fatalf("fast path decodes a chunk differently:\n got %+v %v\nwant %+v %v", tasks, extras, want, wantExtras)
	}
	return true
}

// queuesOnly reports whether chunk payload p holds queues and no task: the
// first chunk Encode writes when the state keeps something of its queues,
// which the fast path leaves to proto.Unmarshal.
func queuesOnly(t *testing.T, p []byte) bool {
	var c snapshotpb.TaskChunk
	if err := proto.Unmarshal(p, &c); err != nil {
		t.Fatal(err)
	}
	return len(c.Tasks) == 0 && len(c.Queues) > 0
}

// TestFastChunkPath: every chunk of tasks Encode writes takes the fast path, which
// decodes it as proto.Unmarshal and taskFromMessage do.
func TestFastChunkPath(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		s := randomState(t, 100+seed, 50+int(seed)*30)
		for i, p := range chunks(t, encode(t, s)) {
			if !checkFastChunk(t, p) && !queuesOnly(t, p) {
				t.Fatalf("seed %d: chunk %d of Encode's output does not take the fast path", seed, i)
			}
		}
	}
	for i, p := range chunks(t, encode(t, soakState(t, 3000))) {
		if !checkFastChunk(t, p) && !queuesOnly(t, p) {
			t.Fatalf("soak state: chunk %d does not take the fast path", i)
		}
	}
}

// TestDecodeMatchesReference damages a snapshot of several chunks in many
// ways: Decode reports exactly what the sequential decoder did.
func TestDecodeMatchesReference(t *testing.T) {
	t.Parallel()
	s := soakState(t, 3500)
	b := encode(t, s)
	if n := len(chunks(t, b)); n < 4 {
		t.Fatalf("%d chunks, want at least 4", n)
	}
	sameDecode(t, "intact", b, int64(len(b)))
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100 {
		i := rng.IntN(len(b))
		c := bytes.Clone(b)
		c[i] ^= 1 << rng.IntN(8)
		sameDecode(t, fmt.Sprintf("flip in byte %d", i), c, int64(len(c)))
		n := rng.IntN(len(b))
		sameDecode(t, fmt.Sprintf("cut at %d", n), b[:n], int64(len(b)))
		sameDecode(t, fmt.Sprintf("cut at %d, size told", n), b[:n], int64(n))
		// Damage in two chunks: the first one in the file is reported.
		j := rng.IntN(len(b))
		c[j] ^= 1 << rng.IntN(8)
		sameDecode(t, fmt.Sprintf("flips in bytes %d and %d", i, j), c, int64(len(c)))
	}
	sameDecode(t, "extra byte", append(bytes.Clone(b), 0), int64(len(b)))
	sameDecode(t, "longer size", b, int64(len(b))+1)

	// A consistent file whose first chunk holds an invalid task and whose
	// last chunk is damaged: the invalid task is reported.
	img := s.Image()
	img.Queues = nil // so that the first chunk holds tasks
	bad := *img.Tasks[5]
	bad.Attempt = 99
	img.Tasks[5] = &bad
	var buf bytes.Buffer
	if _, err := Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	c := buf.Bytes()
	c[len(c)-trailerSize-10] ^= 1
	sameDecode(t, "invalid task, then a damaged chunk", c, int64(len(c)))
	_, _, err := Decode(bytes.NewReader(c), int64(len(c)))
	if ce, ok := errors.AsType[*CorruptError](err); !ok || ce.Offset != headerSize {
		t.Fatalf("got %v, want the invalid task of the first chunk", err)
	}
}

// TestDecodeOddButValidChunks: chunks that are valid protobuf but not in
// the shape Encode writes (fields out of order, repeated, unpacked, unknown)
// fall back to proto.Unmarshal and mean what they always meant.
func TestDecodeOddButValidChunks(t *testing.T) {
	t.Parallel()
	s := randomState(t, 21, 150)
	img := s.Image()
	var msgs []*snapshotpb.TaskSnapshot
	for i, tk := range img.Tasks {
		msgs = append(msgs, TaskMessage(tk, img.Beside(i)))
	}
	reencode := func(edit func(p []byte) []byte) []byte {
		var out []byte
		for _, m := range msgs {
			p, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			p = edit(p)
			out = binary.AppendUvarint(append(out, 0x0a), uint64(len(p)))
			out = append(out, p...)
		}
		// The workflows the tasks name, after them (a reader takes them
		// anywhere).
		for _, w := range img.Workflows {
			p, err := proto.Marshal(workflowMessage(w))
			if err != nil {
				t.Fatal(err)
			}
			out = binary.AppendUvarint(append(out, 0x22), uint64(len(p)))
			out = append(out, p...)
		}
		return out
	}
	edits := map[string]func(p []byte) []byte{
		"unknown field":       func(p []byte) []byte { return append(p, 0xa8, 0x1f, 0x01) }, // field 501, varint 1
		"task id twice":       func(p []byte) []byte { return append(p, 0x0a, 0x01, 'x') },
		"lsns unpacked":       func(p []byte) []byte { return append(p, 0x98, 0x01, 0x07) }, // field 19, varint 7
		"empty retry policy":  func(p []byte) []byte { return append(p, 0x32, 0x00) },
		"invalid utf-8 queue": func(p []byte) []byte { return append(p, 0x1a, 0x01, 0xff) },
		"wrong wire type":     func(p []byte) []byte { return append(p, 0x0d, 0, 0, 0, 0) }, // field 1 as fixed32
		"truncated":           func(p []byte) []byte { return p[:len(p)-1] },
		"field zero":          func(p []byte) []byte { return append(p, 0x00, 0x00) },
		"end group":           func(p []byte) []byte { return append(p, 0x0c) },
		"unchanged":           func(p []byte) []byte { return p },
		"priority overflowing": func(p []byte) []byte {
			return append(p, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)
		},
	}
	for name, edit := range edits {
		p := reencode(edit)
		checkFastChunk(t, p)
		// Wrap it in a consistent file.
		var f []byte
		var hdr [headerSize]byte
		encodeHeader(hdr[:], img.LastLSN, img.Epoch)
		f = append(f, hdr[:]...)
		f = binary.LittleEndian.AppendUint32(f, uint32(len(p)))
		f = binary.LittleEndian.AppendUint32(f, crc32.Checksum(p, castagnoli))
		f = append(f, p...)
		var tr [trailerSize]byte
		copy(tr[0:8], endMagic)
		binary.LittleEndian.PutUint64(tr[8:16], uint64(len(msgs)))
		binary.LittleEndian.PutUint32(tr[16:20], 1)
		binary.LittleEndian.PutUint32(tr[20:24], crc32.Update(crc32.Checksum(f, castagnoli), castagnoli, tr[:20]))
		f = append(f, tr[:]...)
		sameDecode(t, name, f, int64(len(f)))
	}
}

// FuzzDecodeChunk: whatever chunk payload the fast path accepts, it decodes
// as proto.Unmarshal and taskFromMessage do.
func FuzzDecodeChunk(f *testing.F) {
	for _, seed := range []uint64{31, 32} {
		for _, p := range chunks(f, encode(f, randomState(f, seed, 60))) {
			f.Add(p)
		}
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		checkFastChunk(t, p)
	})
}

// TestFastChunkPathNumbers: out-of-range numbers are cut down as proto does
// (the Loader then refuses what is invalid).
func TestFastChunkPathNumbers(t *testing.T) {
	t.Parallel()
	big := uint64(1<<64 - 1)
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.VarintType)
	e = protowire.AppendVarint(e, 1<<32+5)
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	e = protowire.AppendString(e, "lease")
	e = protowire.AppendTag(e, 4, protowire.VarintType)
	e = protowire.AppendVarint(e, big)
	e = protowire.AppendTag(e, 5, protowire.VarintType)
	e = protowire.AppendVarint(e, 7)
	e = protowire.AppendTag(e, 12, protowire.VarintType)
	e = protowire.AppendVarint(e, big-2)
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, "a")
	m = protowire.AppendTag(m, 5, protowire.VarintType)
	m = protowire.AppendVarint(m, big)
	m = protowire.AppendTag(m, 8, protowire.VarintType)
	m = protowire.AppendVarint(m, big-4)
	m = protowire.AppendTag(m, 13, protowire.VarintType)
	m = protowire.AppendVarint(m, 1<<40+3)
	m = protowire.AppendTag(m, 14, protowire.VarintType)
	m = protowire.AppendVarint(m, 1<<33+1)
	m = protowire.AppendTag(m, 16, protowire.BytesType)
	m = protowire.AppendString(m, "lease")
	m = protowire.AppendTag(m, 18, protowire.BytesType)
	m = protowire.AppendBytes(m, e)
	m = protowire.AppendTag(m, 18, protowire.BytesType)
	m = protowire.AppendBytes(m, e)
	m = protowire.AppendTag(m, 19, protowire.BytesType)
	m = protowire.AppendBytes(m, protowire.AppendVarint(protowire.AppendVarint(nil, 1), big))
	m = protowire.AppendTag(m, 20, protowire.VarintType)
	m = protowire.AppendVarint(m, 2)
	var p []byte
	p = protowire.AppendTag(p, 1, protowire.BytesType)
	p = protowire.AppendBytes(p, m)
	if !checkFastChunk(t, p) {
		t.Fatal("the fast path refused a plain chunk")
	}
}
