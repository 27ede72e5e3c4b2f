package wal_test

import (
	"context"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/wal"
)

// The WAL creates <data-dir>/wal and its missing parents, and every new
// level must survive a power loss, not only the last one.
func TestFreshDataDirDurable(t *testing.T) {
	f := faultfs.New() // nothing durable but "/"
	l, err := wal.Open(wal.Options{Dir: "/srv/data/wal", FS: f})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.AppendSync(context.Background(), []wal.Entry{{Type: 1, Payload: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l, err = wal.Open(wal.Options{Dir: "/srv/data/wal", FS: f.PowerLoss()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.LastLSN(); got != 5 {
		t.Fatalf("after power loss: last lsn %d, want the 5 acknowledged", got)
	}
}
