package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

const (
	// handoffSettle is how long the handoff probe lets its Lease call reach
	// the server and start waiting before it submits. Loopback delivery
	// takes microseconds; the margin covers a scheduler hiccup.
	handoffSettle = 5 * time.Millisecond
	// handoffWait is the probe's long-poll wait.
	handoffWait = 5 * time.Second
	// probeSeedSalt keeps probe payloads apart from the main run's.
	probeSeedSalt = 0x70726f6265
	// fsyncProbeBytes is the size of one disk-probe write: a typical
	// group-commit write of a few records.
	fsyncProbeBytes = 512
)

// probe measures single operations with no other load, on queues of their
// own (<queue>-probe-submit and <queue>-probe-handoff), and completes the
// tasks it created so they do not linger.
func (r *runner) probe(ctx context.Context) (*Probe, error) {
	cfg := r.cfg
	p := &Probe{Rounds: cfg.ProbeRounds}
	if r.tg.dataDir != "" {
		l, err := diskFsync(r.tg.dataDir, cfg.ProbeRounds)
		if err != nil {
			return nil, err
		}
		p.DiskFsync = &l
	}
	sc, err := r.newClient(nil)
	if err != nil {
		return nil, err
	}
	wc, err := r.newClient(nil)
	if err != nil {
		return nil, err
	}
	subQ, handQ := cfg.Queue+"-probe-submit", cfg.Queue+"-probe-handoff"
	workerID := "bench-" + cfg.Queue + "-probe"
	// Open both clients' connections first: the probes measure calls, not
	// TCP handshakes.
	for _, c := range []*client.Client{sc, wc} {
		if _, err := c.Lease(ctx, client.LeaseRequest{WorkerID: workerID, Namespace: cfg.Namespace, Queue: handQ}); err != nil {
			return nil, fmt.Errorf("bench: probe: warming up: %w", err)
		}
	}
	payload := make([]byte, cfg.PayloadBytes)
	submit := func(queue string, i int) error {
		fillPayload(payload, cfg.Seed^probeSeedSalt, uint64(i))
		_, err := sc.Submit(ctx, client.SubmitRequest{
			Namespace: cfg.Namespace, Queue: queue, Payload: payload, RequestID: queue + "-" + strconv.Itoa(i),
		})
		return err
	}

	ds := make([]time.Duration, cfg.ProbeRounds)
	for i := range ds {
		t0 := now()
		if err := submit(subQ, i); err != nil {
			return nil, fmt.Errorf("bench: probe: submit %d: %w", i, err)
		}
		ds[i] = since(t0)
	}
	p.Submit = summarize(ds)

	type leased struct {
		at  time.Time
		lts []client.LeasedTask
		err error
	}
	for i := range ds {
		got := make(chan leased, 1)
		go func() {
			res, err := wc.Lease(ctx, client.LeaseRequest{
				WorkerID: workerID, Namespace: cfg.Namespace, Queue: handQ, MaxTasks: 1, Wait: handoffWait,
			})
			got <- leased{now(), res.Tasks, err}
		}()
		if err := sleep(ctx, handoffSettle); err != nil {
			<-got
			return nil, err
		}
		t0 := now()
		err := submit(handQ, i)
		l := <-got
		switch {
		case err != nil:
			return nil, fmt.Errorf("bench: probe: handoff submit %d: %w", i, err)
		case l.err != nil:
			return nil, fmt.Errorf("bench: probe: handoff lease %d: %w", i, l.err)
		case len(l.lts) != 1:
			return nil, fmt.Errorf("bench: probe: a Lease long-polling for %v did not receive the task submitted during its wait (round %d)", handoffWait, i)
		}
		ds[i] = l.at.Sub(t0)
		if err := wc.Complete(ctx, client.CompleteRequest{TaskID: l.lts[0].ID, LeaseID: l.lts[0].LeaseID}); err != nil {
			return nil, fmt.Errorf("bench: probe: completing the handoff task: %w", err)
		}
	}
	p.Handoff = summarize(ds)

	if err := drain(ctx, wc, workerID, cfg.Namespace, subQ, cfg.ProbeRounds); err != nil {
		return nil, fmt.Errorf("bench: probe: completing the submit probe's tasks: %w", err)
	}
	return p, nil
}

// drain leases and completes n tasks of queue.
func drain(ctx context.Context, c *client.Client, workerID, ns, queue string, n int) error {
	const parallel = 32
	for n > 0 {
		res, err := c.Lease(ctx, client.LeaseRequest{WorkerID: workerID, Namespace: ns, Queue: queue, MaxTasks: min(n, MaxLeaseBatch), Wait: time.Second})
		if err != nil {
			return err
		}
		lts := res.Tasks
		if len(lts) == 0 {
			return fmt.Errorf("%d tasks of %s are missing", n, queue)
		}
		n -= len(lts)
		var wg sync.WaitGroup
		errs := make([]error, len(lts))
		sem := make(chan struct{}, parallel)
		for i, lt := range lts {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				errs[i] = c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// diskFsync measures the latency of appending fsyncProbeBytes to a file in
// dir and fsyncing it, as the WAL does for each group commit.
func diskFsync(dir string, rounds int) (Latency, error) {
	path := filepath.Join(dir, "bench-fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return Latency{}, fmt.Errorf("bench: disk probe: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, fsyncProbeBytes)
	ds := make([]time.Duration, rounds)
	for i := range ds {
		t0 := now()
		if _, err := f.Write(buf); err != nil {
			return Latency{}, fmt.Errorf("bench: disk probe: %w", err)
		}
		if err := f.Sync(); err != nil {
			return Latency{}, fmt.Errorf("bench: disk probe: %w", err)
		}
		ds[i] = since(t0)
	}
	return summarize(ds), nil
}

// sleep waits d or until ctx ends, when it returns ctx's cause.
func sleep(ctx context.Context, d time.Duration) error {
	if clock.Sleep(ctx, clock.Real, d) != nil {
		return context.Cause(ctx)
	}
	return nil
}
