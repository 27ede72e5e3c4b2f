package coordinator

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

const crashDirEnv = "TENURE_TEST_CRASH_DIR"

// TestCrashChild is the child half of TestCrashRecovery: it serves a
// coordinator on a real, fsynced WAL under load and prints one line per
// acknowledged operation, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestCrashRecovery")
	}
	l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Sync: wal.SyncAlways, SegmentBytes: 256 << 10})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	c, err := Open(context.Background(), l, Config{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	ack := func(kind, id string) {
		mu.Lock()
		fmt.Fprintln(out, kind, id)
		out.Flush()
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			w := fmt.Sprintf("w%d", g)
			for i := 0; ; i++ {
				res, err := c.Submit(ctx, SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprintf("%s-%d", w, i))})
				if err != nil {
					fmt.Println("ERR", err)
					os.Exit(2)
				}
				ack("S", res.Task.ID)
				ls, err := c.Lease(ctx, LeaseRequest{WorkerID: w, Queue: "q"})
				if err != nil || len(ls) == 0 {
					continue
				}
				if i%3 == 0 {
					if _, err := c.Commit(ctx, ls[0].TaskID, ls[0].LeaseID, []byte("r")); err == nil {
						ack("M", ls[0].TaskID)
					}
					continue
				}
				if err := c.Complete(ctx, ls[0].TaskID, ls[0].LeaseID, []byte("r")); err == nil {
					ack("C", ls[0].TaskID)
				}
			}
		})
	}
	wg.Wait()
}

// TestCrashRecovery kills a process that appends under load at a random
// point (kill -9: no Close, no flush), reopens its WAL, and checks that
// every operation it acknowledged survived: submitted tasks exist, commits
// are committed, completions are complete. Several rounds share one data
// directory, so recovery of a log that already survived crashes is tested
// too.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	all := map[string]string{}
	for round := range 4 {
		acks := 50 + rng.IntN(1500)
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		got := 0
		for got < acks && sc.Scan() {
			kind, id, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "S":
				if all[id] == "" {
					all[id] = "S"
				}
			case "M", "C":
				all[id] = kind
			default:
				t.Fatalf("child: %s", sc.Text())
			}
			got++
		}
		cmd.Process.Kill() // SIGKILL: no deferred close runs
		cmd.Wait()
		if got < acks {
			t.Fatalf("round %d: child stopped after %d acknowledgements", round, got)
		}
		l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Sync: wal.SyncAlways, SegmentBytes: 256 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st := state.New()
		if err := Replay(l, st, 1); err != nil {
			t.Fatalf("round %d: replay: %v", round, err)
		}
		l.Close()
		if err := st.Invariants(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for id, kind := range all {
			task := st.Task(id)
			switch {
			case task == nil:
				t.Fatalf("round %d: acknowledged task %s is lost", round, id)
			case kind == "M" && task.CommittedBy == "":
				t.Fatalf("round %d: acknowledged commit of %s is lost (%s)", round, id, task.State)
			case kind == "C" && task.State != state.Completed:
				t.Fatalf("round %d: acknowledged completion of %s is lost (%s)", round, id, task.State)
			}
		}
		t.Logf("round %d: killed after %d acknowledgements; %d tasks checked, %d records replayed", round, got, len(all), st.LastLSN())
	}
}
