package outboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/testenv"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// Postgres is a PostgreSQL server of a test's own, which the test crashes
// and brings back: its own data directory in a temporary directory, on a
// loopback port, run as the postgres user. A file lock per port
// (/tmp/tenure-test-postgres-PORT.lock) makes a second test binary that
// wants the port wait.
type Postgres struct {
	Port int
	dir  string
	bin  string
	lock *os.File
	cred *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// PostgresMissing returns why a PostgreSQL server of a test's own cannot
// run here ("" if it can).
func PostgresMissing() string {
	if postgresBin() == "" {
		return "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres): apt-get install postgresql"
	}
	return testenv.UserMissing("the test's PostgreSQL", "postgres", "postgresql")
}

// postgresBin is the directory of the newest PostgreSQL installed ("" for
// none).
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a < b
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// StartPostgres initialises a PostgreSQL data directory (trust
// authentication, user postgres), starts the server on port and waits
// until it answers. Close stops it and removes its data.
func StartPostgres(port int) (*Postgres, error) {
	lock, err := testenv.Lock(fmt.Sprintf("/tmp/tenure-test-postgres-%d.lock", port))
	if err != nil {
		return nil, err
	}
	uid, gid, err := testenv.UserIDs("postgres")
	if err != nil {
		lock.Close()
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenure-test-postgres-")
	if err != nil {
		lock.Close()
		return nil, err
	}
	p := &Postgres{Port: port, dir: dir, bin: postgresBin(), lock: lock, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := os.Chown(dir, uid, gid); err != nil {
		p.Close()
		return nil, err
	}
	initdb := exec.Command(filepath.Join(p.bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		p.Close()
		return nil, fmt.Errorf("outboxtest: initdb: %w\n%s", err, out)
	}
	if err := p.Restart(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// DSN is the DSN of database db on the server.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Restart starts the server (again, after Crash or Stop) on its data
// directory and waits until it answers.
func (p *Postgres) Restart() error {
	p.mu.Lock()
	log, err := os.OpenFile(filepath.Join(p.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.dir, "-c", "max_connections=200", "-c", "fsync=on")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		p.mu.Unlock()
		return fmt.Errorf("outboxtest: starting postgres: %w", err)
	}
	log.Close()
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	p.mu.Unlock()
	deadline := clock.Real.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		db, err := outbox.Open(ctx, sdkoutbox.PostgreSQL, p.DSN("postgres"))
		cancel()
		if err == nil {
			db.Close()
			return nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
			return fmt.Errorf("outboxtest: postgres exited while starting:\n%s", out)
		default:
		}
		if clock.Real.Now().After(deadline) {
			return fmt.Errorf("outboxtest: postgres does not answer: %w", err)
		}
		clock.Sleep(context.Background(), clock.Real, 100*time.Millisecond)
	}
}

// Crash stops the server as a crash would (SIGQUIT: immediate shutdown,
// no checkpoint; the next start recovers from its log) and waits until it
// has exited.
func (p *Postgres) Crash() { p.signal(syscall.SIGQUIT) }

// Stop shuts the server down cleanly (SIGINT: fast shutdown).
func (p *Postgres) Stop() { p.signal(syscall.SIGINT) }

func (p *Postgres) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	testenv.Stop(cmd, exited, sig, time.Minute)
}

// Close stops the server, removes its data and releases the port.
func (p *Postgres) Close() {
	p.signal(syscall.SIGQUIT)
	os.RemoveAll(p.dir)
	p.lock.Close()
}
