package record

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// recordsDoc is docs/design/records.md, relative to this package, and
// how the messages name it.
const (
	recordsDoc     = "../../docs/design/records.md"
	recordsDocName = "docs/design/records.md"
)

// TestEveryRecordIsDocumented: the table of records.md has a row
// "| NUMBER | `NAME` | …" for every row of the registry, under its number,
// and none for a record the registry does not have.
func TestEveryRecordIsDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(recordsDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| (\\d+) \\| `(\\w+)` \\|").FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		documented[string(m[2])] = n
	}
	if len(documented) == 0 {
		t.Fatalf("found no row \"| NUMBER | `NAME` |\" in %s: has its table of record types changed? update this test", recordsDocName)
	}
	for _, row := range registry {
		n, ok := documented[row.name]
		switch {
		case !ok:
			t.Errorf("%s has no row for record type %d %s: add \"| %d | `%s` | fields | precondition | effect |\" to its table of record types", recordsDocName, row.typ, row.name, row.typ, row.name)
		case n != int(row.typ):
			t.Errorf("%s gives %s number %d, the registry %d", recordsDocName, row.name, n, row.typ)
		}
		delete(documented, row.name)
	}
	for name, n := range documented {
		t.Errorf("%s has a row for record type %d %s, which the registry does not have", recordsDocName, n, name)
	}
}
