package e2e

// The event stream against the real binary: a consumer (`tenure events
// --follow --json`, a process of its own) follows the log from its first
// record while tasks are submitted and worked and the server is killed
// -9 and restarted; what it printed is compared with `tenure wal dump` of
// the same data directory.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// consumerProc is `tenure events` running, its stdout in a file.
type consumerProc struct {
	cmd     *exec.Cmd
	out     string
	done    chan struct{} // closed once it exited and was reaped
	waitErr error         // valid after done
}

// startConsumer runs `tenure events` with args, its stdout in a file of
// dir; cleanup kills it if it still runs.
func startConsumer(t *testing.T, dir string, args ...string) *consumerProc {
	t.Helper()
	c := &consumerProc{out: filepath.Join(dir, "events.jsonl"), done: make(chan struct{})}
	f, err := os.Create(c.out)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := os.Create(filepath.Join(dir, "events.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(tenureBin, append([]string{"events"}, args...)...)
	c.cmd.Stdout, c.cmd.Stderr = f, errs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.waitErr = c.cmd.Wait()
		f.Close()
		errs.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "events.stderr"))
			t.Logf("tenure events' stderr:\n%s", b)
		}
	})
	return c
}

// answers reads the answers the consumer printed so far (a last line
// still being written is left out).
func (c *consumerProc) answers(t *testing.T) []*tenurev1.WatchEventsResponse {
	t.Helper()
	f, err := os.Open(c.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*tenurev1.WatchEventsResponse
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		m := &tenurev1.WatchEventsResponse{}
		if err := protojson.Unmarshal(sc.Bytes(), m); err != nil {
			break // the last line, half written
		}
		out = append(out, m)
	}
	return out
}

// eventsLoad submits n tasks in batches with request ids (a batch sent
// again after a crash creates nothing twice) and works them with a few
// workers, through every restart of the server behind addr.
type eventsLoad struct {
	c         *client.Client
	n         int
	submitted atomic.Int64
	wg        sync.WaitGroup
}

func (l *eventsLoad) run(ctx context.Context) {
	l.wg.Go(func() {
		for i := 0; i < l.n && ctx.Err() == nil; {
			reqs := make([]client.SubmitRequest, min(100, l.n-i))
			for k := range reqs {
				reqs[k] = client.SubmitRequest{Queue: "events", RequestID: fmt.Sprintf("t-%d", i+k), Payload: fmt.Appendf(nil, "%d", i+k)}
			}
			if _, err := l.c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
				continue // the server is down: the same batch again
			}
			i += len(reqs)
			l.submitted.Store(int64(i))
		}
	})
	for w := range 4 {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				leased, err := l.c.Lease(ctx, client.LeaseRequest{WorkerID: fmt.Sprintf("w%d", w), Queue: "events", MaxTasks: 100, Wait: time.Second})
				if err != nil || len(leased.Tasks) == 0 {
					continue
				}
				items := make([]client.CompleteRequest, len(leased.Tasks))
				for k, lt := range leased.Tasks {
					items[k] = client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: lt.Payload}
				}
				l.c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items})
			}
		})
	}
}

// TestEventsKill9: a consumer follows the log from its first record while
// 50,000 tasks are submitted and worked and the server is killed -9 three
// times; reconnecting from its last cursor each time, it sees every
// record of the log exactly once, in LSN order, as `tenure wal dump`
// shows it.
func TestEventsKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000 tasks and three kills: not in -short")
	}
	const tasks = 50_000
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := startServerProc(t, data)
	addr := p.addr
	consumer := startConsumer(t, dir, "--addr", p.url(), "--follow", "--from", "oldest", "--json")
	c := sdkWith(t, p.url(), client.Options{MaxRetries: 100, RetryBackoff: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	load := &eventsLoad{c: c, n: tasks}
	load.run(ctx)
	for k := 1; k <= 3; k++ {
		eventually.True(t, fmt.Sprintf("%d tasks submitted", k*tasks/4), func() bool { return load.submitted.Load() >= int64(k*tasks/4) })
		p.kill9(t)
		t.Logf("kill -9 %d at %d tasks submitted", k, load.submitted.Load())
		p = start(t, launch{name: "server", addr: addr, args: func(addr string) []string { return serverArgs(data, addr, nil) }})
	}
	eventually.True(t, "every task completed", func() bool {
		q, err := c.GetQueue(ctx, client.GetQueueRequest{Queue: "events"})
		return err == nil && q.Tasks.Completed == tasks
	})
	cancel()
	load.wg.Wait()

	// The consumer catches up with the log's end, and stops.
	last := apitest.LastLSN(t, sdk(t, p.url()))
	eventually.True(t, fmt.Sprintf("the consumer printed lsn %d", last), func() bool {
		a := consumer.answers(t)
		if len(a) == 0 {
			return false
		}
		cur, err := events.ParseCursor(a[len(a)-1].GetCursor())
		return err == nil && cur.Of(0) >= last
	})
	consumer.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-consumer.done:
	case <-time.After(e2eExitTimeout):
		t.Fatalf("tenure events did not exit within %v of SIGTERM", e2eExitTimeout)
	}
	if consumer.waitErr != nil {
		t.Fatalf("tenure events after SIGTERM: %v", consumer.waitErr)
	}
	stop(t, p)
	checkAgainstDump(t, data, consumer.answers(t), last)
}

// checkAgainstDump checks the consumer's answers against `tenure wal dump`
// of data: every record once, in LSN order, with its type and task; every
// stream the consumer opened again started from the cursor it had.
func checkAgainstDump(t *testing.T, data string, answers []*tenurev1.WatchEventsResponse, last uint64) {
	t.Helper()
	type line struct {
		LSN    uint64          `json:"lsn"`
		Type   string          `json:"type"`
		Record json.RawMessage `json:"record"`
	}
	var dump []line
	for _, l := range strings.Split(strings.TrimSpace(mustCLI(t, "wal", "dump", "--data-dir", data)), "\n") {
		var d line
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("wal dump line %q: %v", l, err)
		}
		dump = append(dump, d)
	}
	if len(dump) == 0 || dump[0].LSN != 1 || uint64(len(dump)) < last {
		t.Fatalf("wal dump: %d records from lsn %v; the test needs the whole log (through %d)", len(dump), dump[0].LSN, last)
	}
	var evs []*tenurev1.Event
	starts, cursor := 0, ""
	for i, a := range answers {
		if len(a.GetEvents()) == 0 && !a.GetCaughtUp() && i > 0 {
			starts++
			if a.GetCursor() != cursor {
				t.Fatalf("answer %d starts a stream at %s, but the one before ended at %s", i, a.GetCursor(), cursor)
			}
		}
		evs = append(evs, a.GetEvents()...)
		cursor = a.GetCursor()
	}
	if len(evs) != len(dump) || uint64(len(evs)) < last {
		t.Fatalf("the consumer saw %d events, the log holds %d records (through lsn %d when it caught up)", len(evs), len(dump), last)
	}
	for i, ev := range evs {
		d := dump[i]
		var rec struct {
			TaskID string `json:"taskId"`
		}
		json.Unmarshal(d.Record, &rec)
		if ev.GetLsn() != d.LSN || ev.GetType() != d.Type || ev.GetTaskId() != rec.TaskID {
			t.Fatalf("event %d is lsn %d %s of task %q; the WAL has lsn %d %s of task %q", i, ev.GetLsn(), ev.GetType(), ev.GetTaskId(), d.LSN, d.Type, rec.TaskID)
		}
	}
	if starts < 3 {
		t.Fatalf("the consumer opened its stream again %d times; the server was killed 3 times", starts)
	}
	t.Logf("the consumer saw all %d records of the log once each, in LSN order, as wal dump shows them; it opened its stream again %d times, each from the cursor it had", last, starts)
}
