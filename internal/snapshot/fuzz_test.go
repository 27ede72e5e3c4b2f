package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"testing"

	"github.com/tenurehq/tenure/internal/state"
)

var writeCorpus = flag.Bool("write-corpus", false, "rewrite testdata/fuzz/FuzzDecodeSnapshot from fuzzSeeds")

// fuzzSeeds are valid snapshots and typical damage to them.
func fuzzSeeds(t testing.TB) [][]byte {
	small := encode(t, randomState(t, 11, 12))
	mid := encode(t, randomState(t, 12, 120))
	seeds := [][]byte{
		encode(t, state.New()),
		small,
		mid,
		small[:len(small)-1],
		small[:headerSize+5],
		append(bytes.Clone(small[:headerSize]), small[len(small)-trailerSize:]...),
		{},
	}
	flipped := bytes.Clone(mid)
	flipped[len(flipped)/2] ^= 0x10
	seeds = append(seeds, flipped)
	huge := bytes.Clone(small)
	binary.LittleEndian.PutUint32(huge[headerSize:], 0xfffffff0)
	seeds = append(seeds, huge)
	return seeds
}

// TestWriteFuzzCorpus writes the committed seed corpus when asked to
// (go test -run TestWriteFuzzCorpus -write-corpus ./internal/snapshot).
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("pass -write-corpus to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeSnapshot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range fuzzSeeds(t) {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzDecodeSnapshot: Decode never panics, never allocates much more than
// its input, and whatever it accepts is a valid state that encodes back to
// a snapshot decoding to the same state.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		st, sum, err := decode(b)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		// Generous: protobuf messages and state indexes cost a multiple of
		// their encoding, but never gigabytes for kilobytes.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(64*len(b))+(8<<20) {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(b), grew)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error is not ErrCorrupt: %v", err)
			}
			return
		}
		if err := st.Invariants(); err != nil {
			t.Fatalf("accepted a state that breaks invariants: %v", err)
		}
		if sum.Tasks != st.Len() || sum.LastLSN != st.LastLSN() {
			t.Fatalf("summary %+v for %d tasks at lsn %d", sum, st.Len(), st.LastLSN())
		}
		var buf bytes.Buffer
		if _, err := Encode(&buf, st.Image()); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		st2, _, err := decode(buf.Bytes())
		if err != nil {
			t.Fatalf("decode of re-encoding: %v", err)
		}
		if !reflect.DeepEqual(st.Export(), st2.Export()) {
			t.Fatal("re-encoding changed the state")
		}
	})
}
