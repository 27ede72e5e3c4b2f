package tenurev1_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestDocNamesEveryCall: the package comment (doc.go) counts the API's
// services right and names each of them and each of their calls, as the
// generated descriptors have them.
func TestDocNamesEveryCall(t *testing.T) {
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	var services int
	protoregistry.GlobalFiles.RangeFilesByPackage("tenure.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			services++
			if !strings.Contains(doc, "//   - "+string(s.Name())+":") {
				t.Errorf("doc.go has no item for service %s (%s): add one naming its calls", s.Name(), f.Path())
			}
			for j := range s.Methods().Len() {
				m := s.Methods().Get(j).Name()
				if !regexp.MustCompile(`\b` + string(m) + `\b`).MatchString(doc) {
					t.Errorf("doc.go does not name %s.%s: add it to the item of %s", s.Name(), m, s.Name())
				}
			}
		}
		return true
	})
	words := []string{"", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if services >= len(words) || !strings.Contains(doc, "The API has "+words[services]+" services") {
		t.Errorf("doc.go does not say the API has %d services", services)
	}
}
