package record

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "append the encodings that changed to testdata/encoding.golden")

const goldenFile = "testdata/encoding.golden"

// TestGoldenEncoding pins the on-disk format. testdata/encoding.golden holds
// lines "NUMBER NAME HEX": the encoding of a record of type NAME with every
// field set by fill, one line per version of the type, oldest first.
//
//   - The newest line of each type is what Encode writes today, byte for
//     byte, under the same number.
//   - Every line, old ones included, still decodes: to the filled record,
//     except for fields added after it was written, which decode to their
//     zero value (what an old record means). So a log written by any
//     earlier release still reads the same.
//
// A new record type, or a new field, fails until -update appends a line;
// -update never rewrites or removes a line.
func TestGoldenEncoding(t *testing.T) {
	t.Parallel()
	golden := readGolden(t)
	var add bytes.Buffer
	for _, r := range filledRecords(t) {
		name := TypeOf(r).String()
		typ, enc, err := Encode(nil, r)
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		lines := golden[name]
		if n := len(lines); n == 0 || !bytes.Equal(lines[n-1].payload, enc) {
			fmt.Fprintf(&add, "%d %s %x\n", typ, name, enc)
		}
		if *update {
			continue
		}
		if len(lines) == 0 {
			t.Errorf("%s has no line in %s: run go test ./internal/record -run TestGoldenEncoding -update to pin its encoding", name, goldenFile)
			continue
		}
		newest := lines[len(lines)-1]
		if !bytes.Equal(enc, newest.payload) {
			t.Errorf("%s encodes to\n%x\n%s pins\n%x\nan existing field's encoding is forever; if only a new field adds bytes, run go test ./internal/record -run TestGoldenEncoding -update", name, enc, goldenFile, newest.payload)
		}
		for i, l := range lines {
			if l.typ != uint16(typ) {
				t.Errorf("%s is record type %d, line %d of %s says %d: a record type number is forever", name, typ, l.line, goldenFile, l.typ)
			}
			got, err := Decode(typ, l.payload)
			if err != nil {
				t.Errorf("line %d of %s (%s) does not decode: %v", l.line, goldenFile, name, err)
				continue
			}
			old := i < len(lines)-1
			for _, d := range diffFields(reflect.ValueOf(got).Elem(), reflect.ValueOf(r).Elem(), name) {
				if old && d.gotZero {
					continue // a field added since
				}
				t.Errorf("line %d of %s decodes differently: %s", l.line, goldenFile, d)
			}
		}
	}
	for name, lines := range golden {
		if typ := Type(lines[0].typ); typ.String() != name {
			t.Errorf("line %d of %s pins record type %d %s, which the registry no longer has under that number: a record type is never removed or renumbered while a log may hold it", lines[0].line, goldenFile, typ, name)
		}
	}
	if *update && add.Len() > 0 {
		f, err := os.OpenFile(goldenFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(add.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

type goldenLine struct {
	line    int
	typ     uint16
	payload []byte
}

// readGolden reads the lines of goldenFile by record name, in file order.
func readGolden(t *testing.T) map[string][]goldenLine {
	t.Helper()
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		if *update && os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	out := map[string][]goldenLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var (
			l    = goldenLine{line: n}
			name string
			hx   string
		)
		if _, err := fmt.Sscan(sc.Text(), &l.typ, &name, &hx); err != nil {
			t.Fatalf("%s:%d: %q: %v", goldenFile, n, sc.Text(), err)
		}
		if l.payload, err = hex.DecodeString(hx); err != nil {
			t.Fatalf("%s:%d: %q: %v", goldenFile, n, sc.Text(), err)
		}
		out[name] = append(out[name], l)
	}
	return out
}
