package clock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/testenv"
)

// direct are the functions of package time that read the wall clock or
// wait on it. Production code asks a clock.Clock instead, so that every
// time-based behaviour runs under the fake clock in tests.
var direct = map[string]bool{
	"Now": true, "Since": true, "Until": true, "After": true, "AfterFunc": true,
	"NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true,
}

// TestNoDirectTimeCalls fails for every call of a direct time function in
// a production (non-test) file of this module outside internal/clock,
// naming file and line.
func TestNoDirectTimeCalls(t *testing.T) {
	t.Parallel()
	root := testenv.ModuleRoot(t)
	own := filepath.Join(root, "internal", "clock")
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == own || (path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				// Another module (the SDK in sdk/): it cannot import this
				// one's clock, and its tests run its timing in a
				// testing/synctest bubble instead.
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, call := range directCalls(f) {
			rel, _ := filepath.Rel(root, fset.Position(call.Pos()).Filename)
			found = append(found, rel+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+": time."+call.Sel.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("looked at %d files under %s: not the module", files, root)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("%s: take the time from a clock.Clock (internal/clock), not from package time", f)
	}
}

// directCalls returns the uses of direct time functions in f, whatever
// name f imports package time under.
func directCalls(f *ast.File) []*ast.SelectorExpr {
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			name = "time"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" || name == "_" {
		return nil
	}
	var out []*ast.SelectorExpr
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name && direct[sel.Sel.Name] {
				out = append(out, sel)
			}
		}
		return true
	})
	return out
}

// TestDirectCallsFound: the check sees a direct call, also under another
// import name, and ignores time's types and constants.
func TestDirectCallsFound(t *testing.T) {
	t.Parallel()
	src := `package p
import tm "time"
var d tm.Duration = tm.Second
func f() { _ = tm.Now(); <-tm.After(d); tm.Sleep(d) }`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range directCalls(f) {
		got = append(got, s.Sel.Name)
	}
	if strings.Join(got, ",") != "Now,After,Sleep" {
		t.Fatalf("found %v, want Now, After and Sleep", got)
	}
}
