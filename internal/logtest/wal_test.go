package logtest_test

import (
	"testing"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/logtest"
	"github.com/tenurehq/tenure/internal/wal"
)

const walMaxRecordBytes = 64 << 10

// The embedded file WAL, on a real directory.
func TestWAL(t *testing.T) {
	logtest.Run(t, logtest.Subject{
		MaxRecordBytes: walMaxRecordBytes,
		New: func(t *testing.T) logtest.Instance {
			dir := t.TempDir()
			return logtest.Instance{
				Open: func(t *testing.T) logtest.Log {
					l, err := wal.Open(wal.Options{Dir: dir, MaxRecordBytes: walMaxRecordBytes, SegmentBytes: 16 << 10})
					if err != nil {
						t.Fatalf("wal.Open: %v", err)
					}
					return l
				},
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
					l, err := wal.Open(wal.Options{Dir: "/wal", FS: fs, MaxRecordBytes: walMaxRecordBytes, SegmentBytes: 16 << 10})
					if err != nil {
						t.Fatalf("wal.Open: %v", err)
					}
					return l
				},
				Break: func(t *testing.T) { fs.FailSyncs(nil) },
			}
		},
	})
}
