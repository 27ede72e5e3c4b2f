package logtest_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/logtest"
	"github.com/tenurehq/tenure/internal/wal"
)

const walMaxRecordBytes = 64 << 10

// openWAL opens the WAL of opts with the suite's record and segment sizes.
func openWAL(t *testing.T, opts wal.Options) logtest.Log {
	t.Helper()
	opts.MaxRecordBytes, opts.SegmentBytes = walMaxRecordBytes, 16<<10
	l, err := wal.Open(opts)
	if err != nil {
		t.Fatalf("wal.Open: %v", err)
	}
	return l
}

// The embedded file WAL, on a real directory.
func TestWAL(t *testing.T) {
	logtest.Run(t, logtest.Subject{
		MaxRecordBytes: walMaxRecordBytes,
		New: func(t *testing.T) logtest.Instance {
			dir := t.TempDir()
			return logtest.Instance{
				Open: func(t *testing.T) logtest.Log { return openWAL(t, wal.Options{Dir: dir}) },
			}
		},
	})
}

// The embedded file WAL on the fault-injecting file system, whose disk can
// be broken: every fsync fails from Break on.
func TestWALFaultFS(t *testing.T) {
	logtest.Run(t, logtest.Subject{
		MaxRecordBytes: walMaxRecordBytes,
		New: func(t *testing.T) logtest.Instance {
			fs := faultfs.New()
			return logtest.Instance{
				Open: func(t *testing.T) logtest.Log {
					fs.ClearFaults()
					return openWAL(t, wal.Options{Dir: "/wal", FS: fs})
				},
				Break: func(t *testing.T) { fs.FailSyncs(nil) },
			}
		},
	})
}
