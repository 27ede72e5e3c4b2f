//go:build linux

package clustertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/testenv"
)

// Database servers of their own, started by the tests that need more than
// the shared one: a three-node MariaDB Galera cluster on loopback ports
// 3307-3309 (StartGalera), and a single MariaDB that a test stops and
// brings back (StartMariaDB). Each server has its own data directory under
// a temporary directory and runs as the mysql user (its state transfers
// run rsync, which must write into the data directory). The ports are
// fixed, so only one process of the machine uses a set of them at a time:
// a file lock per set (galera, mariadb), taken before starting and
// released after stopping, makes a second test binary wait; the pids of
// the servers are written beside the lock, so servers a killed test binary
// left behind are stopped by the next.

// Programs the servers need.
const (
	mariadbd       = "/usr/sbin/mariadbd"
	installDB      = "mariadb-install-db"
	galeraProvider = "/usr/lib/galera/libgalera_smm.so"
	lockPrefix     = "/tmp/tenure-test-servers-" // + the set's name + .lock or .pids
	serverTag      = "tenure-test-server-"       // in every data directory's path
	readyWait      = 3 * time.Minute             // a hung start fails, nothing else
)

// GaleraMissing returns why the Galera tests cannot run on this machine
// ("" if they can): what to install.
func GaleraMissing() string {
	if m := MariaDBMissing(); m != "" {
		return m
	}
	if _, err := os.Stat(galeraProvider); err != nil {
		return "galera-4 is not installed (" + galeraProvider + "): apt-get install galera-4"
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		return "rsync is not installed (Galera's state transfer uses it): apt-get install rsync"
	}
	return ""
}

// MariaDBMissing returns why a MariaDB server of a test's own cannot run
// here ("" if it can).
func MariaDBMissing() string {
	if _, err := os.Stat(mariadbd); err != nil {
		return "mariadb-server is not installed (" + mariadbd + "): apt-get install mariadb-server"
	}
	if _, err := exec.LookPath(installDB); err != nil {
		return "mariadb-install-db is not on PATH: apt-get install mariadb-server"
	}
	return testenv.UserMissing("a test's MariaDB server", "mysql", "mariadb-server")
}

// Server is one mariadbd of a test.
type Server struct {
	Name    string
	Port    int
	dir     string // its data directory
	cnf     string // its option file
	errLog  string
	logf    func(string, ...any)
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	runPIDs *pidFile
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// DSN is the DSN of database db on the server, as root.
func (s *Server) DSN(db string) string { return "root@tcp(" + s.Addr() + ")/" + db }

// start runs mariadbd with extra arguments and returns at once.
func (s *Server) start(extra ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := append([]string{"--defaults-file=" + s.cnf}, extra...)
	cmd := exec.Command(mariadbd, args...)
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin:"+os.Getenv("PATH"))
	out, err := os.OpenFile(s.errLog+".stdout", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("clustertest: starting %s: %w", s.Name, err)
	}
	out.Close()
	s.cmd = cmd
	s.exited = make(chan struct{})
	done := s.exited
	s.runPIDs.add(cmd.Process.Pid)
	go func() {
		cmd.Wait()
		close(done)
	}()
	return nil
}

// Kill sends the server SIGKILL (kill -9) and waits until it has exited.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop shuts the server down cleanly (SIGTERM) and waits until it has
// exited.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// signal sends the server's process sig and waits until it has exited
// (killing it if it has not within readyWait).
func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	testenv.Stop(cmd, exited, sig, readyWait)
	s.runPIDs.remove(cmd.Process.Pid)
}

// running reports whether the server process runs.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Status returns the server's global status variables whose names start
// with prefix.
func (s *Server) Status(ctx context.Context, prefix string) (map[string]string, error) {
	db, err := cluster.OpenDBWith(s.DSN(""), cluster.DBOptions{CheckInterval: -1})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return status(ctx, db, prefix)
}

func status(ctx context.Context, db *sql.DB, prefix string) (map[string]string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE '"+prefix+"%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// waitUntil polls cond every 100 ms until it holds, the server exits, or
// readyWait passes.
func (s *Server) waitUntil(what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := clock.Real.Now().Add(readyWait)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if !s.running() {
			return fmt.Errorf("clustertest: %s exited before %s (its log: %s): %v", s.Name, what, s.errLog, last)
		}
		if clock.Real.Now().After(deadline) {
			return fmt.Errorf("clustertest: %s: not %s within %v (its log: %s): %v", s.Name, what, readyWait, s.errLog, last)
		}
		clock.Sleep(context.Background(), clock.Real, 100*time.Millisecond)
	}
}

// Servers is the set of servers a test started: they share the lock on
// the ports and a directory.
type Servers struct {
	dir  string
	lock *os.File
	pids *pidFile
	logf func(string, ...any)
	all  []*Server
}

// newServers takes the lock on the ports of set (waiting for another test
// binary that holds it), stops servers of the set a killed test binary
// left behind, and makes a directory for the data directories.
func newServers(set string, logf func(string, ...any)) (*Servers, error) {
	lock, err := testenv.Lock(lockPrefix + set + ".lock")
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	pids := &pidFile{path: lockPrefix + set + ".pids"}
	pids.killLeftovers(logf)
	dir, err := os.MkdirTemp("", serverTag)
	if err != nil {
		lock.Close()
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		lock.Close()
		return nil, err
	}
	return &Servers{dir: dir, lock: lock, pids: pids, logf: logf}, nil
}

// add prepares server name on port: its data directory (initialised unless
// empty is set: a Galera joiner gets its data by state transfer) and its
// option file with the lines of options.
func (ss *Servers) add(name string, port int, empty bool, options ...string) (*Server, error) {
	s := &Server{Name: name, Port: port, dir: filepath.Join(ss.dir, name), errLog: filepath.Join(ss.dir, name+".err"), logf: ss.logf, runPIDs: ss.pids}
	s.cnf = filepath.Join(ss.dir, name+".cnf")
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	cnf := []string{
		"[mariadbd]",
		"datadir=" + s.dir,
		"port=" + strconv.Itoa(port),
		"bind-address=127.0.0.1",
		"socket=" + filepath.Join(ss.dir, name+".sock"),
		"pid-file=" + filepath.Join(ss.dir, name+".pid"),
		"log-error=" + s.errLog,
		"user=mysql",
		"innodb-log-file-size=16M",
		"innodb-buffer-pool-size=64M",
		"max-connections=500",
		"skip-name-resolve",
	}
	cnf = append(cnf, options...)
	if err := os.WriteFile(s.cnf, []byte(strings.Join(cnf, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	if !empty {
		out, err := exec.Command(installDB, "--no-defaults", "--datadir="+s.dir, "--user=mysql",
			"--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=16M").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("clustertest: %s %s: %w\n%s", installDB, s.dir, err, out)
		}
	}
	if err := chownMySQL(ss.dir); err != nil {
		return nil, err
	}
	ss.all = append(ss.all, s)
	return s, nil
}

// Close stops every server (SIGKILL: the data is thrown away), removes the
// directory and releases the port lock.
func (ss *Servers) Close() {
	for _, s := range ss.all {
		s.Kill()
	}
	os.RemoveAll(ss.dir)
	ss.lock.Close()
}

// chownMySQL gives the tree at dir to the mysql user.
func chownMySQL(dir string) error {
	uid, gid, err := testenv.UserIDs("mysql")
	if err != nil {
		return err
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// pidFile lists the pids of the servers running now, so that the next
// test binary can stop them if this one is killed before it does.
type pidFile struct {
	path string
	mu   sync.Mutex
}

func (p *pidFile) read() []int {
	data, _ := os.ReadFile(p.path)
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (p *pidFile) write(pids []int) {
	var b strings.Builder
	for _, n := range pids {
		fmt.Fprintln(&b, n)
	}
	os.WriteFile(p.path, []byte(b.String()), 0o644)
}

func (p *pidFile) add(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.write(append(p.read(), pid))
}

func (p *pidFile) remove(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keep []int
	for _, n := range p.read() {
		if n != pid {
			keep = append(keep, n)
		}
	}
	p.write(keep)
}

// killLeftovers kills the listed pids that are still test servers (their
// command line names a data directory of this package's), and empties the
// list. The caller holds the port lock, so whoever started them is gone.
func (p *pidFile) killLeftovers(logf func(string, ...any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pid := range p.read() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), serverTag) {
			continue
		}
		logf("clustertest: stopping test server pid %d left behind by an earlier test run", pid)
		syscall.Kill(pid, syscall.SIGKILL)
		for range 100 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
				break
			}
			clock.Sleep(context.Background(), clock.Real, 50*time.Millisecond)
		}
	}
	p.write(nil)
}

// execCopy copies the contents of directory from into directory to.
func execCopy(from, to string) ([]byte, error) {
	return exec.Command("cp", "-a", from+"/.", to+"/").CombinedOutput()
}
