package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/groupcommit"
)

// The on-disk format is described in doc.go; keep the two in step.
const (
	segmentMagic      = "TENUWAL\x00"
	formatVersion     = 1
	segmentHeaderSize = 24 // magic 8 | version 4 | header crc 4 | first LSN 8
	frameHeaderSize   = 20 // length 4 | crc 4 | type 2 | reserved 2 | lsn 8
	segmentExt        = ".wal"
	tmpExt            = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrClosed is returned by Append and Wait after Close. It is the
	// group-commit core's, as are ErrTooLarge and ErrInvalidEntry: the
	// cluster's log returns the same.
	ErrClosed = groupcommit.ErrClosed
	// ErrTooLarge is returned by Append for a payload over MaxRecordBytes.
	ErrTooLarge = groupcommit.ErrTooLarge
	// ErrInvalidEntry is returned by Append for an entry with type 0, which
	// is reserved so that zeroed disk space never decodes as a record.
	ErrInvalidEntry = groupcommit.ErrInvalidEntry
	// ErrCorrupt matches every *CorruptionError.
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrCompacted is returned by Replay when records it was asked for are no
	// longer on disk.
	ErrCompacted = errors.New("wal: requested lsn is below the first lsn on disk")
)

// CorruptionError reports a segment that cannot be read as written: a bad
// header, a frame that fails its checks with valid data after it, or a gap in
// the LSN sequence. Open returns it without modifying any file.
type CorruptionError struct {
	Segment string // path of the segment file
	Offset  int64  // byte offset of the bad header or frame in Segment
	LSN     uint64 // LSN expected at Offset, 0 if unknown
	Reason  string
	// Advice says what to do, when the general advice (restore, or cut the
	// segment at Offset) does not fit.
	Advice string
}

func (e *CorruptionError) Error() string {
	lsn := ""
	if e.LSN != 0 {
		lsn = fmt.Sprintf(" (expected lsn %d)", e.LSN)
	}
	advice := e.Advice
	if advice == "" {
		advice = fmt.Sprintf("restore the data directory from a backup "+
			"or deliberately truncate the segment at offset %d (losing every record from there on)", e.Offset)
	}
	return fmt.Sprintf("wal: corrupt segment %s at offset %d%s: %s; the log was not modified: run `tenure wal verify`, then %s",
		e.Segment, e.Offset, lsn, e.Reason, advice)
}

// gapError reports that seg does not start where the segment before it
// ends (at next-1).
func gapError(seg segmentInfo, next uint64) *CorruptionError {
	e := &CorruptionError{Segment: seg.path, LSN: next}
	if seg.first < next {
		e.Reason = fmt.Sprintf("segment starts at lsn %d but the previous segment ends at lsn %d: records are repeated", seg.first, next-1)
		return e
	}
	e.Reason = fmt.Sprintf("segment starts at lsn %d but the previous segment ends at lsn %d: records %d-%d are missing (a segment file deleted or renamed?)",
		seg.first, next-1, next, seg.first-1)
	e.Advice = fmt.Sprintf("put the missing segment %s back (from a backup); or, to give up every record from lsn %d on, "+
		"move %s and every later segment out of the directory: the next start then names the records lost and how to accept their loss",
		segmentName(next), next, filepath.Base(seg.path))
	return e
}

// Is makes errors.Is(err, ErrCorrupt) true for a *CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// segmentName is the file name of the segment whose first record has LSN
// first: 16 hex digits, so that lexical order is LSN order.
func segmentName(first uint64) string {
	return fmt.Sprintf("%016x%s", first, segmentExt)
}

// parseSegmentName returns the first LSN encoded in a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	first, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || first == 0 || hex != fmt.Sprintf("%016x", first) {
		return 0, false
	}
	return first, true
}

func encodeSegmentHeader(b []byte, first uint64) {
	_ = b[segmentHeaderSize-1]
	copy(b[0:8], segmentMagic)
	binary.LittleEndian.PutUint32(b[8:12], formatVersion)
	binary.LittleEndian.PutUint64(b[16:24], first)
	binary.LittleEndian.PutUint32(b[12:16], segmentHeaderCRC(b))
}

func segmentHeaderCRC(b []byte) uint32 {
	crc := crc32.Update(0, castagnoli, b[0:12])
	return crc32.Update(crc, castagnoli, b[16:24])
}

// decodeSegmentHeader returns the first LSN recorded in a segment header, or
// the reason the header is invalid.
func decodeSegmentHeader(b []byte) (uint64, string) {
	_ = b[segmentHeaderSize-1]
	if string(b[0:8]) != segmentMagic {
		return 0, fmt.Sprintf("bad magic %q, not a tenure wal segment", b[0:8])
	}
	if crc := binary.LittleEndian.Uint32(b[12:16]); crc != segmentHeaderCRC(b) {
		return 0, "segment header checksum mismatch"
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != formatVersion {
		return 0, fmt.Sprintf("unsupported format version %d (this build reads version %d)", v, formatVersion)
	}
	first := binary.LittleEndian.Uint64(b[16:24])
	if first == 0 {
		return 0, "segment header claims first lsn 0"
	}
	return first, ""
}

// frameHeader is a decoded frame header.
type frameHeader struct {
	length   uint32 // payload bytes
	crc      uint32
	typ      uint16
	reserved uint16
	lsn      uint64
}

func (h frameHeader) frameBytes() int64 { return frameHeaderSize + int64(h.length) }

func decodeFrameHeader(b []byte) frameHeader {
	_ = b[frameHeaderSize-1]
	return frameHeader{
		length:   binary.LittleEndian.Uint32(b[0:4]),
		crc:      binary.LittleEndian.Uint32(b[4:8]),
		typ:      binary.LittleEndian.Uint16(b[8:10]),
		reserved: binary.LittleEndian.Uint16(b[10:12]),
		lsn:      binary.LittleEndian.Uint64(b[12:20]),
	}
}

// frameCRC is the checksum of a frame: CRC-32C over header bytes 8..20
// (type, reserved, lsn), then the payload. The length is not covered: a wrong
// length moves the payload window, which the checksum then catches.
func frameCRC(hdr, payload []byte) uint32 {
	crc := crc32.Update(0, castagnoli, hdr[8:frameHeaderSize])
	return crc32.Update(crc, castagnoli, payload)
}

// appendFrame appends the frame for (typ, lsn, payload) to dst. It is the only
// frame encoder; the caller has checked the payload size.
func appendFrame(dst []byte, typ uint16, lsn uint64, payload []byte) []byte {
	off := len(dst)
	n := frameHeaderSize + len(payload)
	if cap(dst)-off < n {
		dst = growBytes(dst, n)
	}
	dst = dst[:off+n]
	hdr := dst[off : off+frameHeaderSize]
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint16(hdr[8:10], typ)
	binary.LittleEndian.PutUint16(hdr[10:12], 0)
	binary.LittleEndian.PutUint64(hdr[12:20], lsn)
	copy(dst[off+frameHeaderSize:], payload)
	binary.LittleEndian.PutUint32(hdr[4:8], frameCRC(hdr, payload))
	return dst
}

// growBytes returns b with room for n more bytes, at least doubling so that
// appends stay amortised O(1).
func growBytes(b []byte, n int) []byte {
	c := max(2*cap(b), len(b)+n, 4096)
	nb := make([]byte, len(b), c)
	copy(nb, b)
	return nb
}

// frameProblem says why the bytes at an offset are not a valid frame. The
// zero value means the frame is valid. Problems are values, not formatted
// errors, so that decoding never allocates.
type frameProblem uint8

const (
	frameOK           frameProblem = iota
	frameShortHeader               // fewer than frameHeaderSize bytes left
	frameTooLarge                  // length over MaxRecordBytes
	frameShortPayload              // payload runs past the end of the data
	frameBadCRC                    // checksum mismatch
	frameBadReserved               // checksum fine, reserved field not zero
	frameZeroType                  // checksum fine, type 0
)

func (p frameProblem) String() string {
	switch p {
	case frameOK:
		return "ok"
	case frameShortHeader:
		return "frame header cut short"
	case frameTooLarge:
		return "frame length exceeds MaxRecordBytes"
	case frameShortPayload:
		return "frame payload cut short"
	case frameBadCRC:
		return "frame checksum mismatch"
	case frameBadReserved:
		return "frame reserved field is not zero"
	case frameZeroType:
		return "frame has type 0"
	}
	return "unknown frame problem"
}

// torn reports whether a problem can be the result of a write that was cut
// short. The others are only possible if the bytes changed after a complete
// frame was written (or were never written by this package).
func (p frameProblem) torn() bool {
	return p == frameShortHeader || p == frameTooLarge || p == frameShortPayload || p == frameBadCRC
}

// checkFrame checks a complete frame whose header bytes are hdr.
func checkFrame(h frameHeader, hdr, payload []byte) frameProblem {
	if frameCRC(hdr, payload) != h.crc {
		return frameBadCRC
	}
	if h.reserved != 0 {
		return frameBadReserved
	}
	if h.typ == 0 {
		return frameZeroType
	}
	return frameOK
}
