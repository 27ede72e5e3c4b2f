package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// The offline tools read a data directory directly, never through a
// server, and never modify it.

// dataFlags are the flags every offline tool shares.
type dataFlags struct {
	dataDir   string
	forceRead bool
}

func (f *dataFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", envOr("TENURE_DATA_DIR", "./tenure-data"), "data directory to read (env TENURE_DATA_DIR)")
	fs.BoolVar(&f.forceRead, "force-read", false, "read even while a server holds the data directory (its newest records may be half-written and show as a torn tail)")
}

// open checks the data directory and takes the shared lock that keeps a
// server from starting meanwhile (unless --force-read).
func (f dataFlags) open(stderr io.Writer) (release func(), err error) {
	if fi, err := os.Stat(f.dataDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("no data directory at %s (pass --data-dir)", f.dataDir)
	}
	if f.forceRead {
		fmt.Fprintln(stderr, "warning: --force-read: a running server may be writing; its last records may look torn")
		return func() {}, nil
	}
	release, err = node.LockShared(f.dataDir)
	if err != nil {
		return nil, fmt.Errorf("%w; stop the server first, or pass --force-read to read anyway", err)
	}
	return release, nil
}

// openVerified opens the data directory (open) and verifies its log end
// to end; release undoes the open.
func (f dataFlags) openVerified(stderr io.Writer) (release func(), rep *wal.VerifyReport, err error) {
	if release, err = f.open(stderr); err != nil {
		return nil, nil, err
	}
	if rep, err = wal.Verify(f.walOptions(), nil); err != nil {
		release()
		return nil, nil, err
	}
	return release, rep, nil
}

func (f dataFlags) walOptions() wal.Options {
	return wal.Options{Dir: filepath.Join(f.dataDir, node.WALDir), MaxRecordBytes: 64 << 20}
}

func (f dataFlags) snapshots() snapshot.Dir {
	return snapshot.Dir{Path: filepath.Join(f.dataDir, node.SnapshotDir)}
}

func decodeEntry(lsn uint64, e wal.Entry) (state.Record, error) {
	r, err := record.Decode(record.Type(e.Type), e.Payload)
	if err != nil {
		return nil, fmt.Errorf("record at lsn %d: %w", lsn, err)
	}
	return r, nil
}

// walVerifyCmd is `tenure wal verify`.
type walVerifyCmd struct{ data dataFlags }

func (*walVerifyCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "verify [flags]",
		Short: "check every WAL frame and every snapshot of a data directory (offline)",
		Long: `Check every WAL frame and every snapshot of a data directory, and that the
records after the newest snapshot apply. Exit 1 with the file and offset of
the first problem, or the records lost from the WAL that a snapshot or the
WAL's tail file proves it held.`,
	}
}

func (c *walVerifyCmd) define(fs *pflag.FlagSet) { c.data.add(fs) }

func (c *walVerifyCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	stdout, stderr, df := a.stdout, a.stderr, c.data
	release, err := df.open(stderr)
	if err != nil {
		return err
	}
	defer release()
	fail := func(format string, args ...any) error {
		fmt.Fprintf(stdout, "FAIL "+format+"\n", args...)
		return exitError{1}
	}

	// Every frame of every segment, and every payload decodes.
	rep, err := wal.Verify(df.walOptions(), func(lsn uint64, e wal.Entry) error {
		_, err := decodeEntry(lsn, e)
		return err
	})
	if ce, ok := errors.AsType[*wal.CorruptionError](err); ok {
		return fail("%s at offset %d (lsn %d): %s", ce.Segment, ce.Offset, ce.LSN, ce.Reason)
	}
	if err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}

	// Every snapshot, completely.
	store := df.snapshots()
	lsns, err := store.List()
	if err != nil {
		return err
	}
	var valid []uint64
	ahead := uint64(0) // the newest snapshot after the log's end
	for _, lsn := range lsns {
		_, sum, err := store.Read(lsn)
		if ce, ok := errors.AsType[*snapshot.CorruptError](err); ok {
			return fail("%s at offset %d: %s", ce.Path, ce.Offset, ce.Reason)
		}
		if err != nil {
			return err
		}
		if lsn > rep.LastLSN {
			ahead = lsn
		} else {
			valid = append(valid, lsn)
		}
		fmt.Fprintf(stdout, "snapshot %s: lsn %d, %d tasks, %d bytes\n", store.File(lsn), lsn, sum.Tasks, sum.Bytes)
	}
	discarded, err := store.Discarded()
	if err != nil {
		return err
	}
	for _, p := range discarded {
		fmt.Fprintf(stdout, "note: %s: set aside by a server start (damaged, or past the log's end); never read again, delete it once no longer needed\n", p)
	}
	// A snapshot is saved only once the log holds its records: one that
	// verifies and ends after the log's end proves records are gone. So
	// does the WAL's tail file, naming records the log no longer has.
	if ahead > 0 || rep.Missing != nil {
		lost := coordinator.LSNRange{First: rep.LastLSN + 1, Last: ahead}
		var known []string
		if ahead > 0 {
			known = append(known, fmt.Sprintf("%s verifies and ends at lsn %d", store.File(ahead), ahead))
		}
		if m := rep.Missing; m != nil {
			known = append(known, m.String())
			lost.Last = max(lost.Last, m.Last)
		}
		return fail("%s; but the log's last record is lsn %d: records %s (at least) are gone from the log, and acknowledged work with them; "+
			"the server refuses to start: restore the data directory from a backup, or give the records up with `tenure server --accept-lost-records %s`",
			strings.Join(known, "; and "), rep.LastLSN, lost, lost)
	}

	// The log and the snapshots together must reach every record.
	if rep.FirstLSN > 1 && (len(valid) == 0 || valid[len(valid)-1]+1 < rep.FirstLSN) {
		return fail("%s: the log starts at lsn %d, and no snapshot holds the records before it", df.walOptions().Dir, rep.FirstLSN)
	}
	// The records after the newest snapshot (or all of them) must apply.
	st, from, err := startState(store, valid, rep.LastLSN, stderr)
	if err != nil {
		return err
	}
	if _, err := replayInto(df, st, from, rep.LastLSN); err != nil {
		return fail("%v", err)
	}
	if err := st.Invariants(); err != nil {
		return fail("state after lsn %d breaks invariants: %v", rep.LastLSN, err)
	}
	fmt.Fprintf(stdout, "OK: %d WAL segments, records %d..%d (%d records); %d snapshots; the state after lsn %d has %d tasks\n",
		len(rep.Segments), rep.FirstLSN, rep.LastLSN, rep.Records, len(lsns), st.LastLSN(), st.Len())
	return nil
}

// startState loads the newest snapshot in lsns (oldest first) at or below
// at that reads, and returns it with the LSN replay continues from. Without
// one it returns an empty state and LSN 1. Damaged snapshots are reported
// on stderr and skipped.
func startState(store snapshot.Dir, lsns []uint64, at uint64, stderr io.Writer) (*state.State, uint64, error) {
	for i := len(lsns) - 1; i >= 0; i-- {
		if lsns[i] > at {
			continue
		}
		st, err := store.Load(lsns[i])
		if err != nil {
			fmt.Fprintf(stderr, "warning: skipping snapshot: %v\n", err)
			continue
		}
		return st, lsns[i] + 1, nil
	}
	return state.New(), 1, nil
}

var errStop = errors.New("stop")

// replayInto applies the records from..to of the log to st and returns how
// many it applied.
func replayInto(df dataFlags, st *state.State, from, to uint64) (int, error) {
	if from > to {
		return 0, nil
	}
	n := 0
	_, err := wal.ReplayDir(df.walOptions(), from, func(lsn uint64, e wal.Entry) error {
		if lsn > to {
			return errStop
		}
		r, err := decodeEntry(lsn, e)
		if err != nil {
			return err
		}
		if err := st.Apply(lsn, r); err != nil {
			return err
		}
		n++
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return n, err
}

// walDumpCmd is `tenure wal dump`.
type walDumpCmd struct {
	data     dataFlags
	task     string
	from, to uint64
}

func (*walDumpCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "dump [--task ID] [--from LSN] [--to LSN] [flags]", Short: "print WAL records as JSON lines, by task and LSN range (offline)"}
}

func (c *walDumpCmd) define(fs *pflag.FlagSet) {
	c.data.add(fs)
	fs.StringVar(&c.task, "task", "", "only records that touch this task")
	fs.Uint64Var(&c.from, "from", 0, "first LSN to print (default: the first in the log)")
	fs.Uint64Var(&c.to, "to", 0, "last LSN to print (default: the last in the log)")
}

func (c *walDumpCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	stdout, stderr, df := a.stdout, a.stderr, c.data
	if c.to != 0 && c.from > c.to {
		return usageError{fmt.Sprintf("--from %d is after --to %d", c.from, c.to)}
	}
	release, rep, err := df.openVerified(stderr)
	if err != nil {
		return err
	}
	defer release()
	start := max(c.from, rep.FirstLSN)
	if c.from != 0 && c.from < rep.FirstLSN {
		fmt.Fprintf(stderr, "note: records below lsn %d were deleted (a snapshot holds their effect); starting at %d\n", rep.FirstLSN, rep.FirstLSN)
	}
	w := json.NewEncoder(stdout)
	type line struct {
		LSN    uint64          `json:"lsn"`
		Type   string          `json:"type"`
		Record json.RawMessage `json:"record"`
	}
	_, err = wal.ReplayDir(df.walOptions(), start, func(lsn uint64, e wal.Entry) error {
		if c.to != 0 && lsn > c.to {
			return errStop
		}
		r, err := decodeEntry(lsn, e)
		if err != nil {
			return err
		}
		if c.task != "" && r.Task() != c.task {
			return nil
		}
		m, err := record.Message(r)
		if err != nil {
			return err
		}
		b, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		return w.Encode(line{LSN: lsn, Type: record.TypeOf(r).String(), Record: b})
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return err
}

// walStateCmd is `tenure wal state`.
type walStateCmd struct {
	data   dataFlags
	at     uint64
	taskID string
	json   bool
}

func (*walStateCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "state [--at LSN] [--task ID] [--json] [flags]", Short: "show the state as it was after a given LSN (offline)"}
}

func (c *walStateCmd) define(fs *pflag.FlagSet) {
	c.data.add(fs)
	fs.Uint64Var(&c.at, "at", 0, "show the state after this record (default: the last one)")
	fs.StringVar(&c.taskID, "task", "", "also show this task")
	fs.BoolVar(&c.json, "json", false, "print JSON")
}

func (c *walStateCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	stdout, stderr, df := a.stdout, a.stderr, c.data
	at := c.at
	release, rep, err := df.openVerified(stderr)
	if err != nil {
		return err
	}
	defer release()
	if at == 0 {
		at = rep.LastLSN
	}
	if at > rep.LastLSN {
		return fmt.Errorf("--at %d is after the log's last record, lsn %d", at, rep.LastLSN)
	}
	store := df.snapshots()
	lsns, err := store.List()
	if err != nil {
		return err
	}
	st, from, err := startState(store, lsns, at, stderr)
	if err != nil {
		return err
	}
	if from < rep.FirstLSN {
		oldest := rep.FirstLSN - 1
		for _, l := range lsns {
			if l+1 >= rep.FirstLSN {
				oldest = min(oldest, l)
			}
		}
		return fmt.Errorf("the state after lsn %d is no longer available: the log starts at lsn %d and the oldest usable snapshot is at lsn %d; pick --at %d or later",
			at, rep.FirstLSN, oldest, oldest)
	}
	snapAt := from - 1
	n, err := replayInto(df, st, from, at)
	if err != nil {
		return err
	}
	var (
		t      *state.Task
		beside state.Beside
	)
	if c.taskID != "" {
		if t = st.Task(c.taskID); t == nil {
			return fmt.Errorf("no task %q in the state after lsn %d (never created, created later, or purged by retention)", c.taskID, at)
		}
		beside = st.Beside(t)
	}
	byState := map[string]int{}
	for ts := state.Waiting; ts < state.NumStates; ts++ {
		byState[ts.String()] = st.Count(ts)
	}
	if c.json {
		out := struct {
			LSN          uint64          `json:"lsn"`
			Epoch        uint64          `json:"epoch"`
			FromSnapshot uint64          `json:"fromSnapshot"`
			Replayed     int             `json:"replayed"`
			Tasks        int             `json:"tasks"`
			ByState      map[string]int  `json:"byState"`
			Task         json.RawMessage `json:"task,omitempty"`
		}{LSN: st.LastLSN(), Epoch: st.Epoch(), FromSnapshot: snapAt, Replayed: n, Tasks: st.Len(), ByState: byState}
		if t != nil {
			if out.Task, err = protojson.Marshal(snapshot.TaskMessage(t, beside)); err != nil {
				return err
			}
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	source := "the whole log"
	if snapAt > 0 {
		source = fmt.Sprintf("snapshot at lsn %d", snapAt)
	}
	fmt.Fprintf(stdout, "state after lsn %d (%s + %d records replayed), epoch %d\n%d tasks\n", st.LastLSN(), source, n, st.Epoch(), st.Len())
	names := make([]string, 0, len(byState))
	for k := range byState {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return stateOrder(names[i]) < stateOrder(names[j]) })
	for _, k := range names {
		fmt.Fprintf(stdout, "  %-10s %d\n", k, byState[k])
	}
	if t != nil {
		printStateTask(stdout, t, beside)
	}
	return nil
}

func stateOrder(name string) int {
	for ts := state.Waiting; ts < state.NumStates; ts++ {
		if ts.String() == name {
			return int(ts)
		}
	}
	return 99
}

// printStateTask prints t and what the state keeps beside it.
func printStateTask(w io.Writer, t *state.Task, beside state.Beside) {
	ts := func(v state.Time) string {
		if v == 0 {
			return "-"
		}
		return v.Std().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(w, "\ntask %s\n  namespace %s, queue %s, priority %d\n  state %s, attempt %d of %d\n  created %s (lsn %d), updated %s\n",
		t.ID, t.Namespace, t.Queue, t.Priority, t.State, t.Attempt, t.Retry.MaxAttempts, ts(t.CreatedAt), t.CreatedLSN, ts(t.UpdatedAt))
	if t.RequestID != "" {
		fmt.Fprintf(w, "  request id %s\n", t.RequestID)
	}
	if beside.Deadline != 0 {
		fmt.Fprintf(w, "  deadline %s\n", ts(beside.Deadline))
	}
	if tc := beside.Trace; tc.Parent != "" {
		fmt.Fprintf(w, "  traceparent %s\n", tc.Parent)
		if tc.State != "" {
			fmt.Fprintf(w, "  tracestate %s\n", tc.State)
		}
	}
	if t.FailureReason != "" {
		fmt.Fprintf(w, "  failure %s\n", t.FailureReason)
	}
	fmt.Fprintf(w, "  payload %q\n", t.Payload)
	if t.Result != nil {
		fmt.Fprintf(w, "  result %q (committed by lease %s)\n", t.Result, t.CommittedBy)
	}
	for i, e := range t.Executions {
		cur := ""
		if i == t.LeaseIndex() {
			cur = " (current lease)"
		}
		fmt.Fprintf(w, "  execution %d: lease %s, worker %s, %s, leased %s, expiry %s%s\n",
			e.Attempt, e.LeaseID, e.WorkerID, e.Status, ts(e.LeasedAt), ts(e.LeaseExpiry), cur)
		if r := beside.Report; i == t.LeaseIndex() && r.At != 0 {
			fmt.Fprintf(w, "    progress %s at %s\n", r.Report, ts(r.At))
		}
	}
	lsns := make([]string, len(t.LSNs()))
	for i, l := range t.LSNs() {
		lsns[i] = fmt.Sprint(l)
	}
	fmt.Fprintf(w, "  records at lsn %s\n", strings.Join(lsns, ", "))
}
