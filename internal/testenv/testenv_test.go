package testenv_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/testenv"
)

// TestLock: the lock is held until its file is closed; another open file
// of the path cannot take it meanwhile.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := testenv.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("taking the held lock = %v, want EWOULDBLOCK", err)
	}
	f.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("taking the lock after its file closed: %v", err)
	}
	if _, err := testenv.Lock(filepath.Join(t.TempDir(), "no", "dir")); err == nil {
		t.Fatal("a lock file in a directory that does not exist was taken")
	}
}

func TestUsers(t *testing.T) {
	if uid, gid, err := testenv.UserIDs("root"); err != nil || uid != 0 || gid != 0 {
		t.Fatalf("UserIDs(root) = %d, %d, %v", uid, gid, err)
	}
	if _, _, err := testenv.UserIDs("no-such-user-here"); err == nil {
		t.Fatal("UserIDs of an unknown user succeeded")
	}
	if m := testenv.UserMissing("a server", "no-such-user-here", "pkg"); !strings.Contains(m, "no no-such-user-here user (pkg creates it)") {
		t.Fatalf("UserMissing of an unknown user = %q", m)
	}
	m := testenv.UserMissing("a server", "root", "pkg")
	if (os.Geteuid() == 0) != (m == "") {
		t.Fatalf("UserMissing(root) as uid %d = %q", os.Geteuid(), m)
	}
}

func TestModuleRoot(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/tenurehq/tenure\n") {
		t.Fatalf("the go.mod of ModuleRoot: %.40q, %v", mod, err)
	}
}
