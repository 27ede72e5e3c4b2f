package wal_test

// Fault-injection acceptance tests of the durability contract (doc.go) on
// the in-memory disk of package faultfs: fsync and write errors are fatal and
// never retried, and after a write error, a torn write or a power loss at
// any operation of a scripted run, reopening recovers every acknowledged
// record intact and nothing that was never appended.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/wal"
)

const faultDir = "/data/wal"

var errInjected = errors.New("injected fault")

// faultOptions uses segments small enough that the scripts rotate often.
func faultOptions(f fsys.FS) wal.Options {
	return wal.Options{Dir: faultDir, FS: f, SegmentBytes: 512}
}

// faultEntry is the entry that gets LSN lsn in every run of this file, so a
// replayed record can be checked knowing only its LSN. Every ninth is larger
// than a segment and goes alone into a fresh one.
func faultEntry(lsn uint64) wal.Entry {
	n := int(lsn*37) % 200
	if lsn%9 == 0 {
		n = 700
	}
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(lsn*13 + uint64(j)*7)
	}
	return wal.Entry{Type: uint16(1 + lsn%7), Payload: p}
}

// faultEntries are the n entries after lsn last.
func faultEntries(last uint64, n int) []wal.Entry {
	es := make([]wal.Entry, n)
	for j := range es {
		es[j] = faultEntry(last + 1 + uint64(j))
	}
	return es
}

// scriptRun is what a scripted run got to before its first error.
type scriptRun struct {
	appended uint64 // last LSN a successful Append returned
	acked    uint64 // last LSN whose Wait returned nil
	err      error  // the first error, nil if the script completed
}

// runScript appends 16 batches of 1 to 4 faultEntry records, closing and
// reopening the log after the eighth, and stops at the first error. After an Append
// or Wait error it checks that the failure is sticky.
func runScript(t testing.TB, f fsys.FS) (run scriptRun) {
	t.Helper()
	l, err := wal.Open(faultOptions(f))
	if err != nil {
		return scriptRun{err: err}
	}
	defer func() {
		if l != nil {
			l.Close()
		}
	}()
	for b := 1; b <= 16; b++ {
		if b == 9 {
			if err := l.Close(); err != nil {
				run.err = err
				return run
			}
			if l, err = wal.Open(faultOptions(f)); err != nil {
				run.err = err
				return run
			}
			if got := l.LastLSN(); got != run.acked {
				t.Fatalf("reopened in the script at lsn %d, want %d", got, run.acked)
			}
		}
		last := l.LastLSN()
		es := faultEntries(last, 1+b%4)
		lsn, err := l.Append(es)
		if err != nil {
			run.err = err
			return run
		}
		if lsn != last+uint64(len(es)) {
			t.Fatalf("Append returned lsn %d, want %d", lsn, last+uint64(len(es)))
		}
		run.appended = lsn
		if err := l.Wait(context.Background(), lsn); err != nil {
			run.err = err
			checkSticky(t, l, lsn, err)
			return run
		}
		run.acked = lsn
	}
	err = l.Close()
	l = nil
	if err != nil {
		run.err = err
	}
	return run
}

// checkSticky checks a log whose Wait(lsn) failed with err: it stays
// failed, refuses appends with the same error, and DurableLSN did not reach
// lsn.
func checkSticky(t testing.TB, l *wal.Log, lsn uint64, err error) {
	t.Helper()
	if l.Err() == nil {
		t.Fatalf("Wait(%d) failed with %v but Err() = nil", lsn, err)
	}
	if d := l.DurableLSN(); d >= lsn {
		t.Fatalf("Wait(%d) failed but DurableLSN = %d", lsn, d)
	}
	if _, aerr := l.Append([]wal.Entry{faultEntry(lsn + 1)}); aerr == nil || aerr.Error() != l.Err().Error() {
		t.Fatalf("Append after a failure = %v, want the sticky %v", aerr, l.Err())
	}
	if werr := l.Wait(context.Background(), lsn); werr == nil {
		t.Fatalf("second Wait(%d) after a failure = nil", lsn)
	}
}

// checkRecovered opens the log on f twice and checks that it holds exactly
// the records 1..k, intact, with run.acked <= k <= run.appended. It returns
// k.
func checkRecovered(t testing.TB, f fsys.FS, run scriptRun, what string) uint64 {
	t.Helper()
	var k uint64
	for round := range 2 {
		l, err := wal.Open(faultOptions(f))
		if err != nil {
			t.Fatalf("%s: reopen %d refused: %v", what, round+1, err)
		}
		if m := l.Missing(); m != nil {
			// The tail file named a record that did not survive: it
			// claimed more than was durable.
			t.Fatalf("%s: reopen %d finds records missing: %v", what, round+1, m)
		}
		next := uint64(1)
		err = l.Replay(1, func(lsn uint64, e wal.Entry) error {
			want := faultEntry(lsn)
			if lsn != next {
				return fmt.Errorf("replayed lsn %d, want %d", lsn, next)
			}
			if e.Type != want.Type || !bytes.Equal(e.Payload, want.Payload) {
				return fmt.Errorf("record %d: type %d, %d bytes; want type %d, %d bytes: not the record appended",
					lsn, e.Type, len(e.Payload), want.Type, len(want.Payload))
			}
			next++
			return nil
		})
		cerr := l.Close()
		if err != nil {
			t.Fatalf("%s: replay: %v", what, err)
		}
		if cerr != nil {
			t.Fatalf("%s: close: %v", what, cerr)
		}
		got := next - 1
		if got != l.LastLSN() {
			t.Fatalf("%s: replayed up to %d, LastLSN %d", what, got, l.LastLSN())
		}
		if got < run.acked {
			t.Fatalf("%s: recovered %d records, but %d were acknowledged (run %+v)", what, got, run.acked, run)
		}
		if got > run.appended {
			t.Fatalf("%s: recovered %d records, but only %d were appended (run %+v)", what, got, run.appended, run)
		}
		if round == 1 && got != k {
			t.Fatalf("%s: second reopen recovered %d records, the first %d", what, got, k)
		}
		k = got
	}
	return k
}

// countScript runs the script on a fresh disk and returns the number of
// operations before it and its trace.
func countScript(t *testing.T) (base int, ops []faultfs.Op) {
	t.Helper()
	f := faultfs.NewWithDir("/data")
	base = f.Ops()
	run := runScript(t, f)
	if run.err != nil || run.acked != run.appended || run.acked < 30 {
		t.Fatalf("fault-free script: %+v", run)
	}
	ops = f.Trace()[base:]
	checkRecovered(t, f, run, "fault-free")
	return base, ops
}

func TestFaultFatalErrors(t *testing.T) {
	for _, kind := range []faultfs.Kind{faultfs.OpSync, faultfs.OpWrite} {
		t.Run(string(kind), func(t *testing.T) {
			f := faultfs.NewWithDir("/data")
			l, err := wal.Open(faultOptions(f))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for lsn := uint64(1); lsn <= 10; lsn++ {
				if _, err := l.AppendSync(context.Background(), []wal.Entry{faultEntry(lsn)}); err != nil {
					t.Fatal(err)
				}
			}
			acked := l.DurableLSN()
			start := f.Ops()
			f.FailNext(kind, errInjected)

			// Several records queued, then waited for concurrently. The
			// writer may fail on the first before the others are appended:
			// then their Append fails instead.
			run := scriptRun{acked: acked, appended: acked}
			var lsns []uint64
			for range 4 {
				lsn, err := l.Append([]wal.Entry{faultEntry(l.LastLSN() + 1)})
				if err != nil {
					if !errors.Is(err, errInjected) {
						t.Fatalf("Append = %v, want the injected error", err)
					}
					continue
				}
				lsns = append(lsns, lsn)
				run.appended = lsn
			}
			if len(lsns) == 0 {
				t.Fatal("no Append succeeded")
			}
			errs := make([]error, len(lsns))
			var wg sync.WaitGroup
			for i, lsn := range lsns {
				wg.Go(func() { errs[i] = l.Wait(context.Background(), lsn) })
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, errInjected) {
					t.Fatalf("Wait(%d) = %v, want the injected error", lsns[i], err)
				}
			}
			if !errors.Is(l.Err(), errInjected) {
				t.Fatalf("Err = %v", l.Err())
			}
			if _, err := l.Append([]wal.Entry{faultEntry(l.LastLSN() + 1)}); !errors.Is(err, errInjected) {
				t.Fatalf("later Append = %v, want the injected error", err)
			}
			if d := l.DurableLSN(); d != acked {
				t.Fatalf("DurableLSN = %d after the failure, want %d", d, acked)
			}
			if err := l.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close = %v, want the injected error", err)
			}
			if d := l.DurableLSN(); d != acked {
				t.Fatalf("DurableLSN = %d after Close, want %d", d, acked)
			}

			// Exactly one operation failed, and after it nothing was written
			// or synced again: no retry, not even at Close.
			failedAt := -1
			for _, op := range f.Trace()[start:] {
				switch {
				case op.Err != nil && failedAt >= 0:
					t.Fatalf("second failed operation %+v", op)
				case op.Err != nil:
					if op.Kind != kind {
						t.Fatalf("failed operation %+v, want a %s", op, kind)
					}
					failedAt = op.N
				case failedAt >= 0 && (op.Kind == faultfs.OpSync || op.Kind == faultfs.OpSyncDir || op.Kind == faultfs.OpWrite):
					t.Fatalf("%+v after the failed operation %d: the log retried", op, failedAt)
				}
			}
			if failedAt < 0 {
				t.Fatal("no operation failed")
			}

			lost := f.PowerLoss()
			if k := checkRecovered(t, lost, run, "after power loss"); k != acked {
				t.Fatalf("after power loss: recovered %d records, want exactly the %d acknowledged", k, acked)
			}
			checkRecovered(t, f, run, "after restart")
		})
	}
}

// TestFaultAtEveryOp fails, then tears, each operation of the script in
// turn.
func TestFaultAtEveryOp(t *testing.T) {
	base, ops := countScript(t)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	tears := 0
	for i := 1; i <= len(ops); i++ {
		op := ops[i-1]
		what := fmt.Sprintf("op %d (%s %s)", i, op.Kind, op.Path)

		f := faultfs.NewWithDir("/data")
		f.FailAt(base+i, errInjected)
		run := runScript(t, f)
		if tr := f.Trace(); len(tr) < base+i {
			t.Fatalf("%s: the rerun stopped after %d operations (%+v): the script is not deterministic", what, len(tr)-base, run)
		}
		if got := f.Trace()[base+i-1]; got.Kind != op.Kind || got.Err == nil {
			t.Fatalf("%s: the rerun's op is %+v: the script is not deterministic", what, got)
		}
		if !errors.Is(run.err, errInjected) {
			t.Fatalf("%s failed, but the script got %v: a failure was swallowed", what, run.err)
		}
		lost := f.PowerLoss()
		checkRecovered(t, f, run, what+" failed, restart")
		checkRecovered(t, lost, run, what+" failed, power loss")

		if op.Kind != faultfs.OpWrite || op.Bytes < 2 {
			continue
		}
		tears++
		n := 1 + rng.IntN(op.Bytes-1)
		what = fmt.Sprintf("%s torn after %d of %d bytes (seed %#x)", what, n, op.Bytes, seed)
		f = faultfs.NewWithDir("/data")
		f.TearAt(base+i, n)
		run = runScript(t, f)
		if !errors.Is(run.err, syscall.EIO) {
			t.Fatalf("%s: the script got %v, want the write error", what, run.err)
		}
		lost = f.PowerLoss()
		checkRecovered(t, f, run, what+", restart")
		checkRecovered(t, lost, run, what+", power loss")
	}
	if tears < 20 {
		t.Fatalf("only %d writes torn; the script is too small", tears)
	}
}

// TestFaultPowerLossAtEveryOp cuts the power after each operation of the
// script in turn; the rebooted disk must hold every acknowledged record.
// The plain power loss keeps only fsynced data; the Keep variants also keep
// a random prefix of the unsynced data, as a disk that wrote some of its
// dirty pages back in order.
func TestFaultPowerLossAtEveryOp(t *testing.T) {
	base, ops := countScript(t)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	beyond := 0 // runs that recovered unacknowledged records
	for i := 1; i <= len(ops); i++ {
		f := faultfs.NewWithDir("/data")
		f.CutPowerAfter(base + i)
		run := runScript(t, f)
		what := fmt.Sprintf("power cut after op %d of %d (%s %s)", i, len(ops), ops[i-1].Kind, ops[i-1].Path)
		if !f.PowerCut() {
			t.Fatalf("%s: the script never reached it", what)
		}
		if i < len(ops) && !errors.Is(run.err, faultfs.ErrPowerCut) {
			t.Fatalf("%s: the script got %v, want ErrPowerCut", what, run.err)
		}
		checkRecovered(t, f.PowerLoss(), run, what)
		for r := range 3 {
			if k := checkRecovered(t, f.PowerLossKeep(rng), run, fmt.Sprintf("%s, keep %d (seed %#x)", what, r, seed)); k > run.acked {
				beyond++
			}
		}
	}
	t.Logf("%d operations; %d kept-page reboots recovered unacknowledged records", len(ops), beyond)
}

// TestFaultNoSpace: writes fail with a message about disk space, nothing
// acknowledged is lost, a restart works while the disk is still full (and
// appends keep failing), and once there is space again appends succeed.
func TestFaultNoSpace(t *testing.T) {
	for _, tear := range []bool{false, true} {
		t.Run(fmt.Sprintf("tear=%v", tear), func(t *testing.T) {
			f := faultfs.NewWithDir("/data")
			f.TearWrites(tear)
			l, err := wal.Open(faultOptions(f))
			if err != nil {
				t.Fatal(err)
			}
			appendOne := func(l *wal.Log) error {
				_, err := l.AppendSync(context.Background(), []wal.Entry{faultEntry(l.LastLSN() + 1)})
				return err
			}
			for range 5 {
				if err := appendOne(l); err != nil {
					t.Fatal(err)
				}
			}
			run := scriptRun{acked: 5, appended: 6}
			f.SetFull(true)
			err = appendOne(l)
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "out of disk space") {
				t.Fatalf("append on a full disk = %v, want ENOSPC saying so", err)
			}
			l.Close()

			// Recovery needs no space: the log opens, and refuses again.
			l, err = wal.Open(faultOptions(f))
			if err != nil {
				t.Fatalf("reopen on a full disk: %v", err)
			}
			if got := l.LastLSN(); got != 5 {
				t.Fatalf("reopened on a full disk at lsn %d, want 5", got)
			}
			if err := appendOne(l); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append after reopening on a full disk = %v", err)
			}
			l.Close()
			checkRecovered(t, f.PowerLoss(), run, "full disk, power loss")

			f.SetFull(false)
			l, err = wal.Open(faultOptions(f))
			if err != nil {
				t.Fatal(err)
			}
			for range 20 { // enough to rotate segments
				if err := appendOne(l); err != nil {
					t.Fatalf("append once there is space: %v", err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			run = scriptRun{acked: 25, appended: 25}
			checkRecovered(t, f.PowerLoss(), run, "space again, power loss")
		})
	}
}

// tornDisk returns a disk whose log holds records 1..10 followed by the
// first half of record 11's frame, all durable: what a crash in the middle
// of a write leaves once the kernel has written the page back.
func tornDisk(t testing.TB) *faultfs.FS {
	t.Helper()
	f := faultfs.NewWithDir("/data")
	l, err := wal.Open(faultOptions(f))
	if err != nil {
		t.Fatal(err)
	}
	for lsn := uint64(1); lsn <= 10; lsn++ {
		if _, err := l.AppendSync(context.Background(), []wal.Entry{faultEntry(lsn)}); err != nil {
			t.Fatal(err)
		}
	}
	f.TearWrites(true)
	f.SetFull(true)
	if _, err := l.AppendSync(context.Background(), []wal.Entry{faultEntry(11)}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("torn append = %v", err)
	}
	l.Close()
	f.SetFull(false)
	f.WriteBack()
	return f.PowerLoss()
}

// TestFaultPowerLossDuringRecovery cuts the power at each operation of a
// restart that must first truncate a torn tail (truncate, fsync, then
// append): the acknowledged records before and after the restart survive.
func TestFaultPowerLossDuringRecovery(t *testing.T) {
	torn := tornDisk(t)
	restart := func(f fsys.FS) scriptRun {
		run := scriptRun{acked: 10, appended: 11}
		l, err := wal.Open(faultOptions(f))
		if err != nil {
			run.err = err
			return run
		}
		defer l.Close()
		for b := 1; b <= 5; b++ {
			last := l.LastLSN()
			es := faultEntries(last, b%3+1)
			lsn, err := l.Append(es)
			if err != nil {
				run.err = err
				return run
			}
			run.appended = max(run.appended, lsn)
			if err := l.Wait(context.Background(), lsn); err != nil {
				run.err = err
				return run
			}
			run.acked = lsn
		}
		run.err = l.Close()
		return run
	}

	d := torn.PowerLoss()
	run := restart(d)
	if run.err != nil || run.acked != 10+11 {
		t.Fatalf("fault-free restart: %+v", run)
	}
	ops := d.Trace()
	if ops[0].Kind != faultfs.OpTruncate {
		t.Fatalf("the restart began with %+v, want the truncation of the torn tail", ops[0])
	}
	checkRecovered(t, d, run, "fault-free restart")

	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := 1; i <= len(ops); i++ {
		d := torn.PowerLoss()
		d.CutPowerAfter(i)
		run := restart(d)
		what := fmt.Sprintf("power cut after op %d of %d of the restart (%s %s)", i, len(ops), ops[i-1].Kind, ops[i-1].Path)
		checkRecovered(t, d.PowerLoss(), run, what)
		for r := range 3 {
			checkRecovered(t, d.PowerLossKeep(rng), run, fmt.Sprintf("%s, keep %d (seed %#x)", what, r, seed))
		}
	}
}

// TestFaultPowerLossOutOfOrderPages cuts the power after each operation of
// the script on a disk that writes dirty pages back in any order. doc.go
// documents the limitation this meets: an unacknowledged batch whose later
// page reached the disk while an earlier one did not (a hole, then a valid
// frame) is reported as corruption, and Open refuses to start. The property
// here is the weaker one that still holds: Open either recovers every
// acknowledged record intact or refuses with ErrCorrupt; it never loses an
// acknowledged record silently.
func TestFaultPowerLossOutOfOrderPages(t *testing.T) {
	base, ops := countScript(t)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	reboots, refused := 0, 0
	for i := 1; i <= len(ops); i++ {
		f := faultfs.NewWithDir("/data")
		f.CutPowerAfter(base + i)
		run := runScript(t, f)
		for r := range 3 {
			what := fmt.Sprintf("power cut after op %d (%s %s), out-of-order pages %d (seed %#x)", i, ops[i-1].Kind, ops[i-1].Path, r, seed)
			lost := f.PowerLossPages(rng, 64)
			reboots++
			l, err := wal.Open(faultOptions(lost))
			if errors.Is(err, wal.ErrCorrupt) {
				refused++
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			l.Close()
			checkRecovered(t, lost, run, what)
		}
	}
	t.Logf("%d reboots with out-of-order pages: %d refused as corrupt (the documented limitation), the rest recovered every acknowledged record", reboots, refused)
}

// TestFaultPowerLossUnderSyncNoneAfterRolls: under SyncNone, a power loss
// takes the records written since the last fsync, acknowledged ones too,
// but never records the tail file names: it names the first records of a
// new segment only once they are fsynced. So the log reopens without
// records missing, whatever the power loss kept, and holds at least every
// record up to the tail file's.
func TestFaultPowerLossUnderSyncNoneAfterRolls(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	for cut := 1; cut <= 120; cut += 7 {
		f := faultfs.NewWithDir("/data")
		opts := faultOptions(f)
		opts.Sync = wal.SyncNone
		l, err := wal.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		for lsn := uint64(1); lsn <= uint64(cut); lsn++ {
			if _, err := l.AppendSync(context.Background(), []wal.Entry{faultEntry(lsn)}); err != nil {
				t.Fatal(err)
			}
		}
		for r, disk := range []*faultfs.FS{f.PowerLoss(), f.PowerLossKeep(rng), f.PowerLossKeep(rng)} {
			opts := faultOptions(disk)
			opts.Sync = wal.SyncNone
			l2, err := wal.Open(opts)
			if err != nil {
				t.Fatalf("after %d records, power loss %d (seed %#x): %v", cut, r, seed, err)
			}
			if m := l2.Missing(); m != nil {
				t.Fatalf("after %d records, power loss %d (seed %#x): the tail file named records that were not durable: %v", cut, r, seed, m)
			}
			l2.Close()
		}
		l.Close()
	}
}
