package wal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	crashDirEnv  = "TENURE_WAL_CRASH_DIR"
	crashSeedEnv = "TENURE_WAL_CRASH_SEED"
	crashWorkers = 8
)

// crashPayload is what worker g writes as its seq-th record, so the parent
// can check a record knowing only (g, seq).
func crashPayload(g, seq int) []byte {
	p := fmt.Appendf(nil, "g=%d seq=%d ", g, seq)
	for i := range (g*31 + seq*17) % 700 {
		p = append(p, byte('a'+(g+seq+i)%26))
	}
	return p
}

// TestCrashChild is the child process of TestCrashKill9: it appends from
// several goroutines and prints "ack <lsn> <g> <seq>" only after Wait
// returned nil for that record, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrashKill9 as a child process")
	}
	l, err := Open(Options{Dir: dir, SegmentBytes: 64 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range crashWorkers {
		wg.Go(func() {
			line := make([]byte, 0, 64)
			for seq := range 1_000_000 { // bounded in case the parent never kills us
				lsn, err := l.AppendSync(context.Background(), []Entry{{Type: uint16(g + 1), Payload: crashPayload(g, seq)}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(2)
				}
				line = fmt.Appendf(line[:0], "ack %d %d %d\n", lsn, g, seq)
				mu.Lock()
				_, err = os.Stdout.Write(line) // unbuffered: one write per line
				mu.Unlock()
				if err != nil {
					os.Exit(3) // the parent is gone
				}
			}
		})
	}
	wg.Wait()
	l.Close()
	os.Exit(0)
}

type crashAck struct{ g, seq int }

func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir() // the same log across rounds: each round recovers the last one's crash
	acks := map[uint64]crashAck{}
	for round := range 5 {
		killAfter := 50 + rng.IntN(1951)
		n := crashRound(t, dir, killAfter, acks)
		t.Logf("round %d: killed after %d acks, %d read in all", round, killAfter, n)
		verifyCrashLog(t, dir, acks)
	}
}

// crashRound runs a child on dir, kills it with SIGKILL after it acknowledged
// killAfter records and adds every acknowledgement it printed to acks.
func crashRound(t *testing.T, dir string, killAfter int, acks map[uint64]crashAck) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(out)
	n := 0
	for sc.Scan() {
		var lsn uint64
		var a crashAck
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d", &lsn, &a.g, &a.seq); err != nil {
			continue // not ours (the test framework's output)
		}
		if prev, dup := acks[lsn]; dup {
			t.Fatalf("lsn %d acknowledged twice: %+v and %+v", lsn, prev, a)
		}
		acks[lsn] = a
		n++
		if n == killAfter && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
			// Keep reading: lines already in the pipe are acknowledgements too.
		}
	}
	io.Copy(io.Discard, out)
	werr := cmd.Wait()
	if !killed {
		killed = true
		t.Fatalf("child exited after %d acks (%v), before the kill; stderr:\n%s", n, werr, stderr.String())
	}
	return n
}

// verifyCrashLog checks that every acknowledged record is in the log with
// its payload, and that the log holds nothing else than records the
// children wrote, each worker's in order and without gaps.
func verifyCrashLog(t *testing.T, dir string, acks map[uint64]crashAck) {
	t.Helper()
	l, err := Open(Options{Dir: dir, SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatalf("Open after kill: %v", err)
	}
	defer l.Close()
	// Each round's children restart their workers' seq at 0, so order is
	// checked per round: a record with seq 0 starts a new sequence.
	next := map[int]int{}
	found := 0
	err = l.Replay(1, func(lsn uint64, e Entry) error {
		var g, seq int
		if _, err := fmt.Sscanf(string(e.Payload), "g=%d seq=%d ", &g, &seq); err != nil {
			return fmt.Errorf("lsn %d: unparsable payload %q", lsn, e.Payload)
		}
		if !bytes.Equal(e.Payload, crashPayload(g, seq)) || e.Type != uint16(g+1) {
			return fmt.Errorf("lsn %d: payload of (g %d, seq %d) differs from what was written", lsn, g, seq)
		}
		if seq != 0 && seq != next[g] {
			return fmt.Errorf("lsn %d: (g %d, seq %d) follows seq %d", lsn, g, seq, next[g]-1)
		}
		next[g] = seq + 1
		if a, ok := acks[lsn]; ok {
			if a.g != g || a.seq != seq {
				return fmt.Errorf("lsn %d was acknowledged as (g %d, seq %d) but holds (g %d, seq %d)", lsn, a.g, a.seq, g, seq)
			}
			found++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found != len(acks) {
		for lsn := range acks {
			if lsn > l.LastLSN() {
				t.Errorf("acknowledged lsn %d is missing; the log ends at %d", lsn, l.LastLSN())
			}
		}
		t.Fatalf("%d of %d acknowledged records found", found, len(acks))
	}
}
