package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
)

// decodeFrame decodes the frame at the start of b with the primitives the
// scanner, the tail search and Replay share. Payload aliases b.
func decodeFrame(b []byte, maxRecordBytes int) (h frameHeader, payload []byte, n int, p frameProblem) {
	if len(b) < frameHeaderSize {
		return h, nil, 0, frameShortHeader
	}
	h = decodeFrameHeader(b)
	if int64(h.length) > int64(maxRecordBytes) {
		return h, nil, 0, frameTooLarge
	}
	end := frameHeaderSize + int(h.length)
	if end > len(b) {
		return h, nil, 0, frameShortPayload
	}
	payload = b[frameHeaderSize:end]
	return h, payload, end, checkFrame(h, b[:frameHeaderSize], payload)
}

func FuzzDecodeFrame(f *testing.F) {
	const maxRecord = 1 << 10
	valid := appendFrame(nil, 3, 42, []byte("hello, wal"))
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:frameHeaderSize-1])
	f.Add(appendFrame(nil, 1, 1, nil))
	f.Add(make([]byte, 64))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, n, p := decodeFrame(b, maxRecord)
		if p != frameOK {
			if (p == frameShortHeader || p == frameShortPayload) && n != 0 {
				t.Fatalf("problem %v, yet n = %d", p, n)
			}
			return
		}
		// A frame that decodes re-encodes to the same bytes.
		if re := appendFrame(nil, h.typ, h.lsn, payload); !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", re, b[:n])
		}
		if h.typ == 0 || h.reserved != 0 || len(payload) > maxRecord {
			t.Fatalf("accepted an invalid frame %+v", h)
		}
	})
}

// FuzzOpen runs recovery on a segment with a valid header and arbitrary
// frames. It must not panic, must allocate no more than its buffers (a
// corrupt length must not make it allocate what it claims), and must either
// refuse with a *CorruptionError or yield a log whose records all replay.
// noSyncFS skips fsyncs, which only slow fuzzing down.
var noSyncFS = &faultFS{FS: fsys.OS, skipSync: true}

func FuzzOpen(f *testing.F) {
	const maxRecord = 1 << 10
	var body []byte
	for i := 1; i <= 5; i++ {
		body = appendFrame(body, uint16(i), uint64(i), bytes.Repeat([]byte{byte(i)}, i*30))
	}
	f.Add(body)
	f.Add(body[:len(body)-7])
	f.Add(append(bytes.Clone(body), make([]byte, 100)...))
	flipped := bytes.Clone(body)
	flipped[len(flipped)/3] ^= 0x10
	f.Add(flipped)
	f.Add(appendFrame(nil, 1, 1, make([]byte, maxRecord)))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		dir := t.TempDir()
		var hdr [segmentHeaderSize]byte
		encodeSegmentHeader(hdr[:], 1)
		path := filepath.Join(dir, segmentName(1))
		if err := os.WriteFile(path, append(hdr[:], body...), 0o644); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l, err := Open(Options{Dir: dir, MaxRecordBytes: maxRecord, FS: noSyncFS})
		runtime.ReadMemStats(&after)
		// Buffers: 64 KiB reader, 256 KiB scan window, 32 KiB chunk, one
		// record; 4 MiB leaves room for the runtime and nothing else.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
			t.Fatalf("Open allocated %d bytes on a %d-byte segment", alloc, len(body))
		}
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("Open failed without a *CorruptionError: %v", err)
			}
			return
		}
		defer l.Close()
		var n uint64
		if err := l.Replay(1, func(lsn uint64, e Entry) error {
			n++
			return nil
		}); err != nil || n != l.LastLSN() {
			t.Fatalf("Replay after a successful Open: %d records, %v; want %d", n, err, l.LastLSN())
		}
		if lsn, err := l.Append([]Entry{{Type: 1, Payload: []byte("x")}}); err != nil || lsn != n+1 {
			t.Fatalf("Append = %d, %v; want %d", lsn, err, n+1)
		}
	})
}
