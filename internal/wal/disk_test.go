package wal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// diskOf counts the segment files in dir and their bytes.
func diskOf(t *testing.T, dir string) Disk {
	t.Helper()
	var d Disk
	for _, f := range segmentFiles(t, dir) {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		d.Segments++
		d.Bytes += info.Size()
	}
	return d
}

// TestDisk: Disk matches the segment files on disk through rotations, a
// compaction and a reopen.
func TestDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, Options{Dir: dir, SegmentBytes: 1024})
	check := func(when string) {
		t.Helper()
		if got, want := l.Disk(), diskOf(t, dir); got != want {
			t.Fatalf("%s: Disk() = %+v, on disk %+v", when, got, want)
		}
	}
	check("fresh")
	appendN(t, l, 1, 200)
	check("after rotations")
	if l.Disk().Segments < 5 {
		t.Fatalf("%d segments, want at least 5", l.Disk().Segments)
	}
	files := segmentFiles(t, dir)
	third, _ := parseSegmentName(filepath.Base(files[2]))
	if _, err := l.DeleteBefore(third); err != nil {
		t.Fatal(err)
	}
	check("after a compaction")
	mustClose(t, l)
	l = openLog(t, Options{Dir: dir, SegmentBytes: 1024})
	check("after a reopen")
	appendN(t, l, 201, 220)
	check("after appending again")
}

// countingObserver counts what a Log reports.
type countingObserver struct {
	mu              sync.Mutex
	writes, records int
	syncs           int
}

func (o *countingObserver) Wrote(records int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes++
	o.records += records
}

func (o *countingObserver) Synced(time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.syncs++
}

// TestObserver: the Observer is told of every write (with its records) and
// every fsync of segment data that Stats counts.
func TestObserver(t *testing.T) {
	t.Parallel()
	o := &countingObserver{}
	l := openLog(t, Options{Dir: t.TempDir(), SegmentBytes: 1024, Observer: o})
	appendN(t, l, 1, 100)
	mustClose(t, l)
	st := l.Stats()
	o.mu.Lock()
	defer o.mu.Unlock()
	if uint64(o.writes) != st.Batches || uint64(o.records) != st.Records || uint64(o.syncs) != st.Fsyncs || st.Fsyncs == 0 {
		t.Fatalf("observed %d writes of %d records and %d fsyncs; Stats: %+v", o.writes, o.records, o.syncs, st)
	}
}
