package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
)

// TestLockSurvivesDeletedLockFile: deleting LOCK under a running node, or
// replacing it with a new file, does not let a second node or an offline
// reader in; once the first node closes, the directory is free again.
// (flock locks belong to an open file description, so a second Open in
// this process conflicts with the first as another process would.)
func TestLockSurvivesDeletedLockFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(path string) error
		holder string // what the refusal says of the holder
	}{
		{"deleted", os.Remove, "unknown: its LOCK file was deleted"},
		{"replaced", func(path string) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.WriteFile(path, []byte("4242\n"), 0o644)
		}, "4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			cfg := node.Config{DataDir: dataDir, Snapshots: host.Schedule{Disabled: true}}
			n, err := node.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if err := tc.attack(filepath.Join(dataDir, "LOCK")); err != nil {
				t.Fatal(err)
			}
			_, err = node.Open(context.Background(), cfg)
			if !errors.Is(err, node.ErrLocked) || !strings.Contains(err.Error(), "server pid "+tc.holder) {
				t.Fatalf("second node after LOCK was %s: %v, want ErrLocked naming pid %q", tc.name, err, tc.holder)
			}
			if _, err := node.LockShared(dataDir); !errors.Is(err, node.ErrLocked) {
				t.Fatalf("offline reader after LOCK was %s: %v, want ErrLocked", tc.name, err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			n2, err := node.Open(context.Background(), cfg)
			if err != nil {
				t.Fatalf("open after the first node closed: %v", err)
			}
			defer n2.Close()
			if b, err := os.ReadFile(filepath.Join(dataDir, "LOCK")); err != nil || string(b) != fmt.Sprintln(os.Getpid()) {
				t.Fatalf("LOCK after a new start holds %q (%v), want our pid", b, err)
			}
		})
	}
}

// TestLockFileStillExcludes: a process of a release that locked only the
// LOCK file still keeps a node out, and is kept out.
func TestLockFileStillExcludes(t *testing.T) {
	dataDir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dataDir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := flockFile(f); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Open(context.Background(), node.Config{DataDir: dataDir}); !errors.Is(err, node.ErrLocked) {
		t.Fatalf("node while an older server holds LOCK: %v, want ErrLocked", err)
	}
	f.Close()
	n, err := node.Open(context.Background(), node.Config{DataDir: dataDir, Snapshots: host.Schedule{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	g, err := os.Open(filepath.Join(dataDir, "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := flockFile(g); err == nil {
		t.Fatal("an older server's lock on LOCK succeeded while a node runs")
	}
}

func flockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
