// Package testenv is what the tests that need something of the machine
// share: skipping a test the machine cannot run (failing it instead under
// CI, which installs everything), a database of a test's own on a shared
// server, and the system user and the lock file of a database server a
// test starts of its own.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// SkipOrFail skips t, saying why (what is missing and how to get it);
// when CI is set it fails t instead, since .ci/run installs and starts
// everything the tests need, so that a missing piece never passes for a
// green run.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (and CI is set: .ci/run provides it)", why)
	}
	t.Skip("skipping: " + why)
}

// NewDatabase creates a database named prefix and a random suffix on the
// server of admin, for t, and returns its name. When t ends it drops the
// database (DROP DATABASE name dropOptions) and closes admin; a failed
// create closes admin at once.
func NewDatabase(t testing.TB, admin *sql.DB, prefix, dropOptions string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("testenv: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+dropOptions); err != nil {
			t.Errorf("testenv: dropping database %s: %v", name, err)
		}
		admin.Close()
	})
	return name
}

// UserMissing returns why server, run as the system user name, cannot be
// started here ("" if it can): there is no such user (pkg, the package
// that installs the server, creates it), or this process is not root,
// which starting a process as another user needs.
func UserMissing(server, name, pkg string) string {
	if _, err := user.Lookup(name); err != nil {
		return fmt.Sprintf("there is no %s user (%s creates it)", name, pkg)
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("%s runs as the %s user, which needs root to start it", server, name)
	}
	return ""
}

// UserIDs returns the uid and gid of the system user name.
func UserIDs(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, err
	}
	if uid, err = strconv.Atoi(u.Uid); err == nil {
		gid, err = strconv.Atoi(u.Gid)
	}
	return uid, gid, err
}

// Lock takes an exclusive lock on the file at path, creating it, and waits
// while another process (another test binary) holds it. Closing the file
// releases the lock.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}

// ModuleRoot returns the directory of the nearest go.mod at or above the
// test's working directory (its package's directory): the root of the
// module, where its documents are.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no go.mod at or above the test's directory")
		}
		dir = parent
	}
}

// Stop sends sig to the process of cmd and waits until it has exited
// (exited is closed), killing it if it has not within d.
func Stop(cmd *exec.Cmd, exited <-chan struct{}, sig os.Signal, d time.Duration) {
	cmd.Process.Signal(sig)
	t := clock.Real.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C():
		cmd.Process.Kill()
		<-exited
	}
}
