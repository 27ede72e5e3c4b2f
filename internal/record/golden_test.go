package record

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/encoding.golden with the current encodings")

const goldenFile = "testdata/encoding.golden"

// TestGoldenEncoding pins the on-disk format: the encoding of one filled
// record of every type must stay byte for byte what testdata/encoding.golden
// holds, and those bytes must decode to the same record. A record type
// without a line there fails until the file is regenerated with -update
// (which pins the new type's encoding from then on).
func TestGoldenEncoding(t *testing.T) {
	t.Parallel()
	golden := readGolden(t)
	var out bytes.Buffer
	for _, r := range filledRecords(t) {
		name := TypeOf(r).String()
		typ, enc, err := Encode(nil, r)
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		fmt.Fprintf(&out, "%d %s %x\n", typ, name, enc)
		if *update {
			continue
		}
		want, ok := golden[name]
		if !ok {
			t.Errorf("%s has no line in %s: run go test ./internal/record -run TestGoldenEncoding -update to pin its encoding", name, goldenFile)
			continue
		}
		if want.typ != uint16(typ) {
			t.Errorf("%s is record type %d, %s pins %d: a record type number is forever", name, typ, goldenFile, want.typ)
		}
		if !bytes.Equal(enc, want.payload) {
			t.Errorf("%s encodes to\n%x\n%s pins\n%x\nthe encoding of a record type is forever: only new fields may add bytes", name, enc, goldenFile, want.payload)
		}
		got, err := Decode(typ, want.payload)
		if err != nil {
			t.Errorf("decode the pinned %s: %v", name, err)
			continue
		}
		for _, d := range diffFields(reflect.ValueOf(got).Elem(), reflect.ValueOf(r).Elem(), name) {
			t.Errorf("the pinned %s decodes differently: %s", name, d)
		}
	}
	if *update {
		if err := os.WriteFile(goldenFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type goldenLine struct {
	typ     uint16
	payload []byte
}

// readGolden reads lines "NUMBER NAME HEX".
func readGolden(t *testing.T) map[string]goldenLine {
	t.Helper()
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		if *update && os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	out := map[string]goldenLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var (
			l    goldenLine
			name string
			hx   string
		)
		if _, err := fmt.Sscan(sc.Text(), &l.typ, &name, &hx); err != nil {
			t.Fatalf("%s: line %q: %v", goldenFile, sc.Text(), err)
		}
		if l.payload, err = hex.DecodeString(strings.TrimSpace(hx)); err != nil {
			t.Fatalf("%s: line %q: %v", goldenFile, sc.Text(), err)
		}
		out[name] = l
	}
	return out
}
