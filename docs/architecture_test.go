package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// module is the path of the repository's Go module.
const module = "github.com/tenurehq/tenure/"

// TestArchitectureLayers: the drawing of the packages in
// docs/design/architecture.md is true of the imports as `go list` gives
// them: every package of the module that is not only tests is on one line
// of it, or among the packages only tests import; and every import of a
// package of the drawing is of a package on a line below its own.
func TestArchitectureLayers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("design", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	layer, helpers := drawing(t, doc)
	if len(layer) < 20 || len(helpers) < 5 {
		t.Fatalf("read %d packages from the drawing and %d from the helpers: the markers moved", len(layer), len(helpers))
	}
	imports := goList(t)
	for pkg, deps := range imports {
		_, drawn := layer[pkg]
		if !drawn && !helpers[pkg] {
			t.Errorf("package %s is not in the drawing of docs/design/architecture.md: add it to the line above every package it imports (%s), "+
				"or to the packages only tests import", pkg, strings.Join(deps, ", "))
			continue
		}
		if helpers[pkg] {
			continue
		}
		for _, d := range deps {
			l, ok := layer[d]
			switch {
			case helpers[d]:
				t.Errorf("%s imports %s, which the drawing says only tests import", pkg, d)
			case !ok:
				t.Errorf("%s imports %s, which the drawing of docs/design/architecture.md lacks: add it below %s", pkg, d, pkg)
			case l >= layer[pkg]:
				t.Errorf("%s imports %s, but the drawing of docs/design/architecture.md puts %s on a line not below it: move one of them", pkg, d, d)
			}
		}
	}
	for pkg := range layer {
		if _, ok := imports[pkg]; !ok && !strings.HasPrefix(pkg, "sdk/") {
			t.Errorf("the drawing of docs/design/architecture.md names %s, which is not a package of the module", pkg)
		}
	}
}

// drawing reads the layers of the drawing (bottom line 0) and the
// packages only tests import, by path in the module.
func drawing(t *testing.T, doc string) (layer map[string]int, helpers map[string]bool) {
	t.Helper()
	block := func(name string) string {
		_, rest, ok := strings.Cut(doc, "<!-- "+name+":start -->")
		b, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
		if !ok || !ok2 {
			t.Fatalf("docs/design/architecture.md has no <!-- %s:start --> … <!-- %s:end -->", name, name)
		}
		return b
	}
	var lines [][]string
	for line := range strings.Lines(block("layers")) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "```") {
			lines = append(lines, f)
		}
	}
	layer = map[string]int{}
	for i, f := range lines {
		for _, name := range f {
			pkg := pathOf(name)
			if _, dup := layer[pkg]; dup {
				t.Errorf("the drawing names %s twice", name)
			}
			layer[pkg] = len(lines) - 1 - i
		}
	}
	helpers = map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(block("helpers"), -1) {
		if strings.Contains(m[1], " ") || strings.Contains(m[1], ".") {
			continue // not a package: Server.Serve
		}
		helpers[pathOf(m[1])] = true
	}
	return layer, helpers
}

// pathOf is the path in the module of a name of the drawing: under
// internal/ unless it is a command, the SDK, e2e or docs.
func pathOf(name string) string {
	for _, top := range []string{"cmd/", "sdk/", "e2e", "docs"} {
		if strings.HasPrefix(name, top) {
			return name
		}
	}
	return "internal/" + name
}

// goList returns what each package of the module that has files other
// than tests imports of the module and of its SDK, by path in the module.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{len .GoFiles}} {{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] == "0" {
			continue
		}
		pkg := strings.TrimPrefix(f[1], module)
		var deps []string
		for _, d := range f[2:] {
			if p, ok := strings.CutPrefix(d, module); ok {
				deps = append(deps, p)
			}
		}
		imports[pkg] = deps
	}
	if len(imports) < 20 {
		t.Fatalf("go list named %d packages: %s", len(imports), out)
	}
	return imports
}
