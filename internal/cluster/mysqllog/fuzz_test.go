package mysqllog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tenurehq/tenure/internal/wal"
)

// FuzzRowRecords decodes arbitrary bytes as a round row. It must not
// panic; what it refuses is ErrCorrupt; what it accepts re-encodes to the
// same bytes, with no record of type 0 or over the limit.
func FuzzRowRecords(f *testing.F) {
	const maxRecord = 1 << 10
	valid := appendRound(nil, []wal.Entry{{Type: 1, Payload: []byte("x")}, {Type: 7, Payload: []byte("hello, round")}})
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(appendRound(nil, []wal.Entry{{Type: 2}}))
	f.Add([]byte{0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []wal.Entry
		err := RowRecords(5, roundType, b, maxRecord, func(lsn uint64, e wal.Entry) error {
			if lsn != 5+uint64(len(got)) {
				t.Fatalf("record %d at lsn %d", len(got), lsn)
			}
			got = append(got, e)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("refused with %v, not ErrCorrupt", err)
			}
			return
		}
		for _, e := range got {
			if e.Type == 0 || len(e.Payload) > maxRecord {
				t.Fatalf("accepted a record of type %d, %d bytes", e.Type, len(e.Payload))
			}
		}
		if n, err := rowRecords(5, roundType, b); err != nil || n != uint64(len(got)) {
			t.Fatalf("the head counts %d, %v; the row decodes to %d records", n, err, len(got))
		}
		if re := appendRound(nil, got); !bytes.Equal(re, b) {
			t.Fatalf("re-encoded round differs:\n got %x\nwant %x", re, b)
		}
	})
}
