package record

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// stateDir is the source of package state, relative to this package.
const stateDir = "../state"

// TestEveryStateRecordIsRegistered finds the record types of package state
// in its source (the types with both record methods, Task and apply) and
// fails for each one that has no row in the registry.
func TestEveryStateRecordIsRegistered(t *testing.T) {
	t.Parallel()
	records := stateRecordTypes(t)
	if len(records) == 0 {
		t.Fatalf("found no record types in %s: has the record interface changed? update stateRecordTypes", stateDir)
	}
	registered := map[string]bool{}
	statePkg := reflect.TypeFor[state.Record]().PkgPath()
	for _, row := range registry {
		if row.goType.Elem().PkgPath() == statePkg {
			registered[row.goType.Elem().Name()] = true
		}
	}
	for _, name := range records {
		if !registered[name] {
			t.Errorf("state.%s is a record (it has the Task and apply methods) but has no row in the registry: in internal/record/registry.go add a constant Type%s = %d (the next free number) and a row entry(Type%s, %q, toPB, fromPB) converting field by field to and from message %s of %s (docs/design/records.md, \"Adding a record type\")",
				name, name, nextType(), name, name, name, recordpb.File_tenure_record_v1_record_proto.Path())
		}
	}
	for _, row := range registry {
		if !slices.Contains(records, row.goType.Elem().Name()) {
			t.Errorf("registry row %q names %v, which is not a record type of package state", row.name, row.goType)
		}
	}
}

// stateRecordTypes parses the non-test Go files of package state and
// returns the names of the types whose pointer has both methods of
// state.Record.
func stateRecordTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stateDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			id, ok := star.X.(*ast.Ident)
			if !ok {
				continue
			}
			if methods[id.Name] == nil {
				methods[id.Name] = map[string]bool{}
			}
			methods[id.Name][fn.Name.Name] = true
		}
	}
	var out []string
	for name, m := range methods {
		if m["Task"] && m["apply"] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// nextType is the number a new record type takes: one above the highest
// in the registry.
func nextType() Type {
	var n Type
	for _, row := range registry {
		n = max(n, row.typ)
	}
	return n + 1
}

// TestEveryProtoMessageIsRegistered fails for each message of record.proto
// that is a record (no other message of the file uses it as a field, as
// TaskCreated uses RetryPolicy) but has no row in the registry.
func TestEveryProtoMessageIsRegistered(t *testing.T) {
	t.Parallel()
	file := recordpb.File_tenure_record_v1_record_proto
	helpers := map[protoreflect.FullName]bool{}
	msgs := file.Messages()
	for i := range msgs.Len() {
		fields := msgs.Get(i).Fields()
		for j := range fields.Len() {
			if m := fields.Get(j).Message(); m != nil {
				helpers[m.FullName()] = true
			}
		}
	}
	registered := map[protoreflect.FullName]bool{}
	for _, row := range registry {
		d := row.newMsg().ProtoReflect().Descriptor()
		if d.ParentFile() != file {
			t.Errorf("registry row %q uses message %s, which is not in %s", row.name, d.FullName(), file.Path())
		}
		registered[d.FullName()] = true
	}
	for i := range msgs.Len() {
		m := msgs.Get(i)
		if !helpers[m.FullName()] && !registered[m.FullName()] {
			t.Errorf("%s defines message %s, which has no row in the registry: in internal/record/registry.go add a constant Type%s = %d (the next free number) and a row entry(Type%s, %q, toPB, fromPB) converting field by field to and from its internal/state struct (docs/design/records.md, \"Adding a record type\")",
				file.Path(), m.FullName(), m.Name(), nextType(), m.Name(), m.Name())
		}
	}
}

// TestStatetestGeneratesEveryType: the generator of random valid logs, which
// the state, snapshot and replay tests run on, must produce every record
// type, or those tests never see it.
func TestStatetestGeneratesEveryType(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	generate(t, func(r state.Record) bool {
		seen[reflect.TypeOf(r)] = true
		return len(seen) < len(registry)
	})
	for _, row := range registry {
		if !seen[row.goType] {
			t.Errorf("statetest never generates %s: teach Gen.Next (internal/state/statetest/statetest.go) to produce it, only when its precondition holds, so that the state, snapshot and replay tests run on it", row.name)
		}
	}
}

// TestEveryRecordWithByIsAttributed: every record type the generator makes
// that has a By field (who asked) is attributed by state.Attribute, the one
// path by which the coordinator writes the caller's principal into the
// records of a call; and attributing changes nothing else. A type some of
// whose records keep their By (a ScheduleFired of the schedule's own tick)
// passes if any record of it takes the principal.
func TestEveryRecordWithByIsAttributed(t *testing.T) {
	t.Parallel()
	const who = "attribution-test-principal"
	type seen struct{ generated, attributed bool }
	withBy := map[reflect.Type]*seen{}
	for _, row := range registry {
		if f, ok := row.goType.Elem().FieldByName("By"); ok && f.Type.Kind() == reflect.String {
			withBy[row.goType] = &seen{}
		}
	}
	if len(withBy) == 0 {
		t.Fatal("no record type has a By field: has it been renamed? update this test")
	}
	left := len(withBy)
	generate(t, func(r state.Record) bool {
		typ := reflect.TypeOf(r)
		st, ok := withBy[typ]
		if !ok || st.attributed {
			return left > 0
		}
		st.generated = true
		c := reflect.New(typ.Elem())
		c.Elem().Set(reflect.ValueOf(r).Elem())
		state.Attribute([]state.Record{c.Interface().(state.Record)}, who)
		by := c.Elem().FieldByName("By")
		if by.String() == who {
			st.attributed = true
			left--
		}
		by.SetString(reflect.ValueOf(r).Elem().FieldByName("By").String())
		if !reflect.DeepEqual(c.Interface(), r) {
			t.Errorf("state.Attribute changed more than the By of %s: %+v became %+v", typ.Elem().Name(), r, c.Interface())
		}
		return left > 0
	})
	for typ, st := range withBy {
		name := typ.Elem().Name()
		switch {
		case !st.generated:
			t.Errorf("state.%s has a By field (who asked), but the statetest generator makes no %s, so this test cannot check that state.Attribute sets it: teach Gen.Next (internal/state/statetest/statetest.go) to produce it", name, name)
		case !st.attributed:
			t.Errorf("state.%s has a By field (who asked), but state.Attribute never sets it, so the coordinator does not record the caller's principal in it: "+
				"add `func (r *%s) attribute(by string) { r.By = by }` to internal/state/attribute.go", name, name)
		}
	}
}

// generate calls each with the records of random valid logs of the
// statetest generator, over a number of seeds, until it returns false.
func generate(t *testing.T, each func(state.Record) bool) {
	t.Helper()
	for seed := range uint64(300) {
		g := statetest.New(seed)
		for _, r := range g.Run(state.New(), 100, t.Fatalf) {
			if !each(r) {
				return
			}
		}
	}
}

// TestRegistryIndex: Decode and Type.String find every row under its
// number, and nothing under another. (A table with a zero or repeated
// number, name, Go type or message does not get this far: init panics with
// what checkRegistry says, see TestCheckRegistryCatches.)
func TestRegistryIndex(t *testing.T) {
	t.Parallel()
	for i, r := range byType {
		if r != nil && int(r.typ) != i {
			t.Errorf("byType[%d] holds row %d", i, r.typ)
		}
	}
	for _, row := range registry {
		if byType[row.typ] == nil || byType[row.typ].name != row.name {
			t.Errorf("row %q is not indexed under its number %d", row.name, row.typ)
		}
		if row.typ.String() != row.name {
			t.Errorf("Type(%d).String() = %q, want %q", row.typ, row.typ.String(), row.name)
		}
	}
	if got, want := Type(len(byType)).String(), fmt.Sprintf("Type(%d)", len(byType)); got != want {
		t.Errorf("unregistered type's name %q, want %q", got, want)
	}
}

// TestCheckRegistryCatches: checkRegistry, which init runs on the
// registry, names each kind of mistake a new row can make.
func TestCheckRegistryCatches(t *testing.T) {
	t.Parallel()
	good := registry[:2]
	with := func(mod func(r *row)) []row {
		rows := slices.Clone(good)
		extra := registry[2]
		mod(&extra)
		return append(rows, extra)
	}
	for _, tc := range []struct {
		name string
		rows []row
		want string
	}{
		{"zero number", with(func(r *row) { r.typ = 0 }), "has number 0"},
		{"repeated number", with(func(r *row) { r.typ = good[0].typ }), `rows "TaskCreated" and "LeaseExtended" share number 1`},
		{"no name", with(func(r *row) { r.name = "" }), "row 3 has no name"},
		{"repeated name", with(func(r *row) { r.name = good[1].name }), `rows 2 and 3 share name "LeaseGranted"`},
		{"repeated Go type", with(func(r *row) { r.goType = good[0].goType }), "share Go type *state.TaskCreated"},
		{"repeated message", with(func(r *row) { r.newMsg = func() proto.Message { return &recordpb.LeaseGranted{} } }), "share message tenure.record.v1.LeaseGranted"},
	} {
		errs := checkRegistry(tc.rows)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: checkRegistry = %v, want one error saying %q", tc.name, errs, tc.want)
		}
	}
}

func TestTypeOf(t *testing.T) {
	t.Parallel()
	if got := TypeOf(&state.Fence{}); got != TypeFence {
		t.Errorf("TypeOf(Fence) = %v", got)
	}
	if got := TypeOf(foreignRecord{}); got != 0 {
		t.Errorf("TypeOf(foreign) = %v, want 0", got)
	}
}
