package mysqllog_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/wal"
)

// TestOneRowPerRound: a round is one row at its first LSN, whatever its
// size; a log written one row per record (by an older tenure) continues
// with rounds after its last record, and replays as one log, from any LSN,
// a page of rows at a time.
func TestOneRowPerRound(t *testing.T) {
	t.Parallel()
	db, id, l := newLog(t)
	l.Close()
	for lsn := range uint64(3) { // the older format: records 1..3
		if _, err := db.Exec("INSERT INTO partition_log (partition_id, lsn, type, payload) VALUES (?, ?, 1, ?)", id, lsn+1, fmt.Sprintf("old-%d", lsn+1)); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, db, id, 0, mysqllog.Options{ReplayPageRecords: 2})
	if l.LastLSN() != 3 {
		t.Fatalf("opened after three record rows at last lsn %d, want 3", l.LastLSN())
	}
	appendWait(t, l, payloads(4, "a")) // 4..7
	appendWait(t, l, payloads(1, "b")) // 8
	appendWait(t, l, payloads(3, "c")) // 9..11
	rows := count(t, db, "SELECT COUNT(*) FROM partition_log WHERE partition_id = ? AND type = 0", id)
	if rows != 3 || logRows(t, db, id) != 6 {
		t.Fatalf("%d round rows and %d rows in all; want 3 rounds after the 3 record rows", rows, logRows(t, db, id))
	}
	want := []string{"old-1", "old-2", "old-3", "a-0", "a-1", "a-2", "a-3", "b-0", "c-0", "c-1", "c-2"}
	for from := uint64(1); from <= 11; from++ {
		var got []string
		err := l.Replay(from, func(lsn uint64, e wal.Entry) error {
			if lsn != from+uint64(len(got)) {
				return fmt.Errorf("lsn %d after %d records from %d", lsn, len(got), from)
			}
			got = append(got, string(e.Payload))
			return nil
		})
		if err != nil || !slices.Equal(got, want[from-1:]) {
			t.Fatalf("Replay(%d) = %v, %v; want %v", from, got, err, want[from-1:])
		}
	}
	l.Close()
	if l = openLog(t, db, id, 0, mysqllog.Options{}); l.LastLSN() != 11 {
		t.Fatalf("reopened at last lsn %d, want 11 (the end of the last round)", l.LastLSN())
	}
}

// TestCompactionKeepsStraddlingRound: compaction up to a snapshot in the
// middle of a round keeps the round's row whole (FirstLSN still moves),
// and deletes it once a later snapshot covers all of it.
func TestCompactionKeepsStraddlingRound(t *testing.T) {
	t.Parallel()
	db, id, l := newLog(t)
	appendWait(t, l, payloads(2, "a")) // 1..2
	appendWait(t, l, payloads(5, "b")) // 3..7
	snapshotAt := func(lsn uint64) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO partition_snapshots (partition_id, lsn, epoch, chunks, bytes, crc, tasks) VALUES (?, ?, 0, 0, 0, 0, 0)", id, lsn); err != nil {
			t.Fatal(err)
		}
	}
	snapshotAt(4)
	if n, err := l.DeleteBefore(5); err != nil || n != 1 {
		t.Fatalf("DeleteBefore(5) = %d, %v; want the row of 1..2 deleted", n, err)
	}
	if got := logLSNs(t, db, id); l.FirstLSN() != 5 || !slices.Equal(got, []uint64{3, 4, 5, 6, 7}) {
		t.Fatalf("first lsn %d, records %v; want 5, the round 3..7 kept whole", l.FirstLSN(), got)
	}
	if got := replayFrom(t, l, 5); len(got) != 3 || got[0].lsn != 5 {
		t.Fatalf("Replay(5) = %v, want 5..7", got)
	}
	if err := l.Replay(4, func(uint64, wal.Entry) error { return nil }); !errors.Is(err, wal.ErrCompacted) {
		t.Fatalf("Replay(4), below the first lsn = %v, want wal.ErrCompacted", err)
	}
	snapshotAt(7)
	if n, err := l.DeleteBefore(8); err != nil || n != 1 || logRows(t, db, id) != 0 || l.FirstLSN() != 8 {
		t.Fatalf("DeleteBefore(8) = %d, %v; %d rows left, first lsn %d; want the round deleted, first lsn 8", n, err, logRows(t, db, id), l.FirstLSN())
	}
	l.Close()
	if l = openLog(t, db, id, 0, mysqllog.Options{}); l.LastLSN() != 7 || l.FirstLSN() != 8 {
		t.Fatalf("reopened: first %d, last %d; want 8, 7", l.FirstLSN(), l.LastLSN())
	}
}

// TestRowRecordsCorrupt: a round row that does not decode is corruption.
func TestRowRecordsCorrupt(t *testing.T) {
	t.Parallel()
	rec := func(typ uint16, p string) []byte {
		b := binary.LittleEndian.AppendUint16(nil, typ)
		b = binary.AppendUvarint(b, uint64(len(p)))
		return append(b, p...)
	}
	round := func(n uint64, recs ...[]byte) []byte {
		b := binary.AppendUvarint(nil, n)
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	good := round(2, rec(1, "x"), rec(2, "yz"))
	var got []string
	if err := mysqllog.RowRecords(10, 0, good, 16, func(lsn uint64, e wal.Entry) error {
		got = append(got, fmt.Sprintf("%d:%d:%s", lsn, e.Type, e.Payload))
		return nil
	}); err != nil || !slices.Equal(got, []string{"10:1:x", "11:2:yz"}) {
		t.Fatalf("RowRecords = %v, %v", got, err)
	}
	for name, payload := range map[string][]byte{
		"no count":        nil,
		"zero records":    round(0),
		"short":           round(3, rec(1, "x"), rec(2, "yz")),
		"cut in a record": good[:len(good)-1],
		"trailing bytes":  append(slices.Clone(good), 0),
		"type 0 inside":   round(1, rec(0, "x")),
		"over the limit":  round(1, rec(1, "seventeen bytes!!")),
	} {
		err := mysqllog.RowRecords(10, 0, payload, 16, func(uint64, wal.Entry) error { return nil })
		if !errors.Is(err, mysqllog.ErrCorrupt) {
			t.Errorf("%s: RowRecords = %v, want ErrCorrupt", name, err)
		}
	}
}

// BenchmarkRound: one round of 64 records of 135 bytes (the cluster
// bench's average), appended and waited for, one after another: the
// latency of a round, which every write of a partition waits for.
func BenchmarkRound(b *testing.B) {
	_, _, l := newLog(b)
	es := make([]wal.Entry, 64)
	for i := range es {
		es[i] = wal.Entry{Type: 1, Payload: make([]byte, 135)}
	}
	b.ResetTimer()
	for b.Loop() {
		appendWait(b, l, es)
	}
}
