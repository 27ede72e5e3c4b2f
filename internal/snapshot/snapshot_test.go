package snapshot

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// randomState applies n generated records to a fresh state.
func randomState(t testing.TB, seed uint64, n int) *state.State {
	t.Helper()
	s := state.New()
	statetest.New(seed).Run(s, n, t.Fatalf)
	return s
}

func encode(t testing.TB, s *state.State) []byte {
	t.Helper()
	var buf bytes.Buffer
	sum, err := Encode(&buf, s.Image())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Bytes != int64(buf.Len()) || sum.Tasks != s.Len() || sum.LastLSN != s.LastLSN() {
		t.Fatalf("summary %+v for %d bytes, %d tasks", sum, buf.Len(), s.Len())
	}
	return buf.Bytes()
}

func decode(b []byte) (*state.State, Summary, error) {
	return Decode(bytes.NewReader(b), int64(len(b)))
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		s := randomState(t, seed, 20+int(seed)*40)
		b := encode(t, s)
		got, sum, err := decode(b)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(s.Export(), got.Export()) {
			t.Fatalf("seed %d: decoded state differs from the original", seed)
		}
		if sum.Tasks != s.Len() || sum.Epoch != s.Epoch() {
			t.Fatalf("seed %d: summary %+v", seed, sum)
		}
		if err := got.Invariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRoundTripEmptyAndManyChunks(t *testing.T) {
	t.Parallel()
	empty := state.New()
	got, sum, err := decode(encode(t, empty))
	if err != nil || got.Len() != 0 || got.LastLSN() != 0 || sum.Chunks != 0 {
		t.Fatalf("empty state: %v, %+v", err, sum)
	}

	// More tasks than one chunk holds.
	g := statetest.New(1)
	g.Purge = false
	s := state.New()
	for s.Len() < 2*chunkMaxTasks+10 {
		g.Run(s, 100, t.Fatalf)
	}
	b := encode(t, s)
	got, sum, err = decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Chunks < 3 {
		t.Fatalf("%d tasks in %d chunks, want at least 3", s.Len(), sum.Chunks)
	}
	if !reflect.DeepEqual(s.Export(), got.Export()) {
		t.Fatal("decoded state differs")
	}
}

// TestEveryDamageIsDetected flips every bit of a small snapshot, cuts it
// at every length and appends a byte: each must fail to decode, never
// decode to something else.
func TestEveryDamageIsDetected(t *testing.T) {
	t.Parallel()
	b := encode(t, randomState(t, 3, 40))
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, _, err := decode(c); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("flip of bit %d of byte %d: err = %v, want ErrCorrupt", bit, i, err)
			}
		}
	}
	for n := range len(b) {
		if _, _, err := decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut at %d: err = %v", n, err)
		}
	}
	if _, _, err := Decode(bytes.NewReader(append(bytes.Clone(b), 0)), int64(len(b))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("extra byte: %v", err)
	}
}

func TestCorruptErrorsNameOffset(t *testing.T) {
	t.Parallel()
	b := encode(t, randomState(t, 4, 200))
	c := bytes.Clone(b)
	c[headerSize+chunkHeadSize+3] ^= 0xff // inside the first chunk's payload
	_, _, err := decode(c)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Offset != headerSize || !strings.Contains(ce.Reason, "chunk checksum") {
		t.Fatalf("got %v, want a chunk checksum error at offset %d", err, headerSize)
	}
	// A huge claimed length is refused before anything is allocated.
	c = bytes.Clone(b)
	copy(c[headerSize:], []byte{0xff, 0xff, 0xff, 0x7f})
	if _, _, err := decode(c); err == nil || !strings.Contains(err.Error(), "MaxChunkBytes") {
		t.Fatalf("huge chunk length: %v", err)
	}
}

// TestChunkContentIsChecked re-checksums a chunk whose content is not a
// valid state (a consistent file that lies), which only the Loader catches.
func TestChunkContentIsChecked(t *testing.T) {
	t.Parallel()
	s := state.New()
	g := statetest.New(5)
	g.Purge = false
	g.Run(s, 30, t.Fatalf)
	img := s.Image()
	img.Tasks = append(img.Tasks, img.Tasks[0]) // the same task twice, out of order
	var buf bytes.Buffer
	if _, err := Encode(&buf, img); err == nil {
		t.Fatal("Encode accepted tasks out of creation order")
	}
	img = s.Image()
	bad := *img.Tasks[0]
	bad.Attempt = 99 // more attempts than executions
	img.Tasks[0] = &bad
	buf.Reset()
	if _, err := Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if _, _, err := decode(buf.Bytes()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "attempt 99") {
		t.Fatalf("invalid content: %v", err)
	}
}

func TestFileNames(t *testing.T) {
	t.Parallel()
	for _, lsn := range []uint64{0, 1, 0xabc, 1<<64 - 1} {
		if got, ok := ParseFileName(FileName(lsn)); !ok || got != lsn {
			t.Fatalf("ParseFileName(FileName(%d)) = %d, %v", lsn, got, ok)
		}
	}
	for _, bad := range []string{"snap-1.tsnap", "snap-00000000000000AB.tsnap", "snap-0000000000000001.tsnap.tmp", "x-0000000000000001.tsnap"} {
		if _, ok := ParseFileName(bad); ok {
			t.Fatalf("ParseFileName(%q) accepted", bad)
		}
	}
}

func TestDir(t *testing.T) {
	t.Parallel()
	f := faultfs.New()
	d := Dir{FS: f, Path: "/data/snapshots"}
	if lsns, err := d.List(); err != nil || len(lsns) != 0 {
		t.Fatalf("List of a missing directory: %v %v", lsns, err)
	}
	s := randomState(t, 6, 100)
	info, err := d.Write(s.Image())
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/data/snapshots/"+FileName(s.LastLSN()) || info.Tasks != s.Len() {
		t.Fatalf("info %+v", info)
	}
	// Durable at once: a power loss right after keeps it.
	d.FS = f.PowerLoss()
	got, err := d.Load(s.LastLSN())
	if err != nil || !reflect.DeepEqual(got.Export(), s.Export()) {
		t.Fatalf("after power loss: %v", err)
	}
	if lsns, _ := d.List(); !reflect.DeepEqual(lsns, []uint64{s.LastLSN()}) {
		t.Fatalf("List = %v", lsns)
	}
	// A file renamed by hand is refused.
	if err := d.FS.Rename(d.File(s.LastLSN()), d.File(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(7); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "renamed by hand") {
		t.Fatalf("renamed file: %v", err)
	}
	if err := d.Remove(7); err != nil {
		t.Fatal(err)
	}
	if lsns, _ := d.List(); len(lsns) != 0 {
		t.Fatalf("List after Remove = %v", lsns)
	}
}

// TestWriteIsAtomic cuts the power after every operation of a snapshot
// write, with every way the disk may have written back dirty pages: after
// the reboot there is either no snapshot or one that decodes to exactly the
// state written, never one that verifies but is wrong. Leftover temporary
// files are removed by Clean and never listed.
func TestWriteIsAtomic(t *testing.T) {
	t.Parallel()
	s := randomState(t, 8, 400)
	want := s.Export()
	img := s.Image()

	probe := faultfs.New()
	if _, err := (Dir{FS: probe, Path: "/d/snapshots"}).Write(img); err != nil {
		t.Fatal(err)
	}
	ops := probe.Ops()
	rng := rand.New(rand.NewPCG(1, 2))
	complete := 0
	for cut := 1; cut <= ops; cut++ {
		f := faultfs.New()
		f.CutPowerAfter(cut)
		_, werr := (Dir{FS: f, Path: "/d/snapshots"}).Write(img)
		if cut < ops && werr == nil {
			t.Fatalf("cut after op %d of %d: Write reported success", cut, ops)
		}
		for v, disk := range []*faultfs.FS{f.PowerLoss(), f.PowerLossKeep(rng), f.PowerLossPages(rng, 512)} {
			d := Dir{FS: disk, Path: "/d/snapshots"}
			lsns, err := d.List()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Clean(); err != nil {
				t.Fatal(err)
			}
			for _, lsn := range lsns {
				got, err := d.Load(lsn)
				if err != nil {
					// A snapshot that fails to verify is reported, never used.
					// With the directory fsynced only after the file, it
					// cannot even exist under its final name unless complete.
					t.Fatalf("cut after op %d, variant %d: listed snapshot does not load: %v", cut, v, err)
				}
				if !reflect.DeepEqual(got.Export(), want) {
					t.Fatalf("cut after op %d, variant %d: snapshot verifies but differs", cut, v)
				}
				complete++
			}
			if names, _ := disk.ReadDirNames("/d/snapshots"); len(names) > len(lsns) {
				t.Fatalf("cut after op %d: Clean left %v", cut, names)
			}
		}
	}
	if complete == 0 {
		t.Fatal("no cut point kept the snapshot; the test proves nothing")
	}
}

// TestWriteFailuresLeaveNoSnapshot fails every operation of a write in
// turn: Write returns the error and no snapshot appears.
func TestWriteFailuresLeaveNoSnapshot(t *testing.T) {
	t.Parallel()
	img := randomState(t, 9, 100).Image()
	probe := faultfs.New()
	if _, err := (Dir{FS: probe, Path: "/d/s"}).Write(img); err != nil {
		t.Fatal(err)
	}
	for op := 1; op <= probe.Ops(); op++ {
		f := faultfs.New()
		f.FailAt(op, nil)
		d := Dir{FS: f, Path: "/d/s"}
		_, err := d.Write(img)
		if err == nil {
			t.Fatalf("failure of op %d not reported", op)
		}
		lsns, _ := d.List()
		last := probe.Trace()[op-1]
		if len(lsns) != 0 && last.Kind != faultfs.OpSyncDir {
			t.Fatalf("failed op %d (%v): snapshot %v exists", op, last.Kind, lsns)
		}
	}
}

// TestDiscardKeepsEarlierDiscards: discarding a snapshot at an LSN whose
// earlier snapshot was discarded already (a loss accepted before, then the
// log grew past that LSN again) keeps both files, durably; Discarded lists
// them and nothing else, and List ignores them.
func TestDiscardKeepsEarlierDiscards(t *testing.T) {
	t.Parallel()
	f := faultfs.New()
	d := Dir{FS: f, Path: "/data/snapshots"}
	first := randomState(t, 7, 50)
	second := randomState(t, 8, 30)
	lsn := first.LastLSN()
	for second.LastLSN() < lsn {
		if err := second.Apply(second.LastLSN()+1, &state.Fence{Epoch: second.LastLSN() + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if second.LastLSN() != lsn {
		t.Fatalf("the test needs two different states at one lsn: %d and %d", lsn, second.LastLSN())
	}
	var moved []string
	for _, s := range []*state.State{first, second} {
		if _, err := d.Write(s.Image()); err != nil {
			t.Fatal(err)
		}
		where, err := d.Discard(lsn)
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, where)
	}
	want := []string{d.File(lsn) + ".discarded", d.File(lsn) + ".discarded.2"}
	if !reflect.DeepEqual(moved, want) {
		t.Fatalf("Discard moved the files to %v, want %v", moved, want)
	}
	d.FS = f.PowerLoss()
	for i, s := range []*state.State{first, second} {
		got, _, err := ReadFile(d.FS, want[i], lsn)
		if err != nil || !reflect.DeepEqual(got.Export(), s.Export()) {
			t.Fatalf("%s after a power loss: %v (or another state)", want[i], err)
		}
	}
	if err := d.FS.MkdirAll("/data/snapshots", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"notes.discarded", FileName(lsn) + ".discarded.x", FileName(lsn) + ".discarded.1", FileName(lsn) + ".tmp"} {
		fl, err := d.FS.OpenFile("/data/snapshots/"+other, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fl.Close()
	}
	if got, err := d.Discarded(); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Discarded = %v, %v; want %v", got, err, want)
	}
	if lsns, err := d.List(); err != nil || len(lsns) != 0 {
		t.Fatalf("List = %v, %v; want none", lsns, err)
	}
}
