package mysqllog

import (
	"encoding/binary"
	"fmt"

	"github.com/tenurehq/tenure/internal/wal"
)

// A row of partition_log holds one record or one round of them
// (docs/design/formats.md, "Cluster mode: the database"). A record row has the record's
// type (never 0) and payload at its LSN. A round row, type roundType, sits
// at the LSN of the round's first record and holds the round's records in
// LSN order: their count (uvarint), then for each its type (2 bytes, little
// endian), the length of its payload (uvarint) and the payload. This
// binary writes round rows only; it reads both, so a log written by an
// older tenure, one row per record, replays unchanged.
const roundType = 0

// appendRound appends the payload of a round row of batch to dst.
func appendRound(dst []byte, batch []wal.Entry) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(batch)))
	for _, e := range batch {
		dst = binary.LittleEndian.AppendUint16(dst, e.Type)
		dst = binary.AppendUvarint(dst, uint64(len(e.Payload)))
		dst = append(dst, e.Payload...)
	}
	return dst
}

// roundBytes is the size of the payload of a round row of batch.
func roundBytes(batch []wal.Entry) int {
	n := binary.MaxVarintLen64
	for _, e := range batch {
		n += 2 + binary.MaxVarintLen64 + len(e.Payload)
	}
	return n
}

// uvarint is binary.Uvarint, refusing (k 0) an encoding longer than it
// needs to be: a row decodes only from the bytes appendRound makes.
func uvarint(b []byte) (v uint64, k int) {
	v, k = binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, 0
	}
	return v, k
}

// rowRecords returns how many records the row at lsn holds: 1 for a record
// row; for a round row, the count its payload begins with (head may be
// just the first binary.MaxVarintLen64 bytes of the payload).
func rowRecords(lsn uint64, typ uint16, head []byte) (uint64, error) {
	if typ != roundType {
		return 1, nil
	}
	n, k := uvarint(head)
	if k <= 0 || n == 0 {
		return 0, fmt.Errorf("%w: the round at lsn %d has no record count", ErrCorrupt, lsn)
	}
	return n, nil
}

// RowRecords calls fn for each record of the row of partition_log at lsn
// with typ and payload, in order with its LSN: the record itself, or each
// record of a round. The payloads fn sees are parts of payload. It
// returns fn's error unwrapped, or ErrCorrupt for a round that does not
// decode or a record whose payload is over maxRecord bytes or whose type
// is 0.
func RowRecords(lsn uint64, typ uint16, payload []byte, maxRecord int, fn func(lsn uint64, e wal.Entry) error) error {
	if typ != roundType {
		if len(payload) > maxRecord {
			return fmt.Errorf("%w: lsn %d has a %d-byte payload, over MaxRecordBytes = %d", ErrCorrupt, lsn, len(payload), maxRecord)
		}
		return fn(lsn, wal.Entry{Type: typ, Payload: payload})
	}
	n, k := uvarint(payload)
	if k <= 0 || n == 0 {
		return fmt.Errorf("%w: the round at lsn %d has no record count", ErrCorrupt, lsn)
	}
	b := payload[k:]
	for i := range n {
		at := lsn + i
		if len(b) < 2 {
			return fmt.Errorf("%w: the round at lsn %d ends inside record %d of %d", ErrCorrupt, lsn, at, n)
		}
		t := binary.LittleEndian.Uint16(b)
		size, k := uvarint(b[2:])
		if k <= 0 || size > uint64(len(b)-2-k) {
			return fmt.Errorf("%w: the round at lsn %d ends inside record %d of %d", ErrCorrupt, lsn, at, n)
		}
		if t == 0 {
			return fmt.Errorf("%w: lsn %d has type 0", ErrCorrupt, at)
		}
		if size > uint64(maxRecord) {
			return fmt.Errorf("%w: lsn %d has a %d-byte payload, over MaxRecordBytes = %d", ErrCorrupt, at, size, maxRecord)
		}
		p := b[2+k : 2+k+int(size)]
		b = b[2+k+int(size):]
		if err := fn(at, wal.Entry{Type: t, Payload: p}); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: the round at lsn %d has %d bytes after its %d records", ErrCorrupt, lsn, len(b), n)
	}
	return nil
}
