package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPublicSurface: what the SDK's packages export takes no positional
// bool (a call's options are fields of its request or options struct)
// and names no type of an internal package (which no application could
// import).
func TestPublicSurface(t *testing.T) {
	checked := 0
	for _, dir := range []string{".", "../worker", "../outbox"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			internal := map[string]bool{} // import names of internal packages
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
					n := path[strings.LastIndex(path, "/")+1:]
					if imp.Name != nil {
						n = imp.Name.Name
					}
					internal[n] = true
				}
			}
			usesInternal := func(n ast.Node) (found string) {
				ast.Inspect(n, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] {
							found = x.Name + "." + sel.Sel.Name
						}
					}
					return found == ""
				})
				return found
			}
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
						continue
					}
					checked++
					where := fset.Position(d.Pos()).String() + ": " + d.Name.Name
					for _, p := range d.Type.Params.List {
						if id, ok := p.Type.(*ast.Ident); ok && id.Name == "bool" {
							t.Errorf("%s takes a positional bool: make it a field of a request or options struct", where)
						}
					}
					if u := usesInternal(d.Type); u != "" {
						t.Errorf("%s names %s, a type of an internal package", where, u)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						ts, ok := s.(*ast.TypeSpec)
						if !ok || !ts.Name.IsExported() {
							continue
						}
						checked++
						st, isStruct := ts.Type.(*ast.StructType)
						if !isStruct {
							if u := usesInternal(ts.Type); u != "" {
								t.Errorf("%s: type %s names %s, a type of an internal package", fset.Position(ts.Pos()), ts.Name.Name, u)
							}
							continue
						}
						for _, fld := range st.Fields.List {
							exported := len(fld.Names) == 0 // embedded
							for _, n := range fld.Names {
								exported = exported || n.IsExported()
							}
							if u := usesInternal(fld.Type); exported && u != "" {
								t.Errorf("%s: a field of %s names %s, a type of an internal package", fset.Position(fld.Pos()), ts.Name.Name, u)
							}
						}
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d exported declarations: too few, the walk missed the packages", checked)
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		return t.IsExported()
	case *ast.IndexExpr:
		id, ok := t.X.(*ast.Ident)
		return ok && id.IsExported()
	}
	return false
}
