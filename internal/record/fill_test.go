package record

import (
	"fmt"
	"reflect"
	"testing"
)

// fill sets every field of the struct that v points to, nested structs
// included, to a non-zero value that no other field of it holds, so that a
// conversion that drops a field or swaps two shows in a round trip.
//
// The values are part of testdata/encoding.golden: a change to them fails
// TestGoldenEncoding for every line already there. So the fields are
// numbered in order, and a field added to a nested struct that records
// hold in their middle (appended) is numbered after all the others: the
// fields that follow the struct keep their values.
func fill(t testing.TB, v reflect.Value) {
	t.Helper()
	n := 0
	var later []func()
	var walk func(v reflect.Value, path, name string)
	walk = func(v reflect.Value, path, name string) {
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if appended[v.Type().Name()+"."+f.Name] {
					fv, fpath := v.Field(i), path+"."+f.Name
					later = append(later, func() { walk(fv, fpath, f.Name) })
					continue
				}
				walk(v.Field(i), path+"."+f.Name, f.Name)
			}
			return
		}
		if !v.CanSet() {
			t.Fatalf("fill: %s is unexported: records hold exported fields only", path)
		}
		if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.New(v.Type().Elem()))
			walk(v.Elem(), path, name)
			return
		}
		n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("%s-%d", name, n))
		case reflect.Slice:
			switch v.Type().Elem().Kind() {
			case reflect.Uint8:
				v.SetBytes([]byte{byte(n), 0, 0xff})
			case reflect.String:
				v.Set(reflect.ValueOf([]string{fmt.Sprintf("%s-%d-a", name, n), fmt.Sprintf("%s-%d-b", name, n)}))
			case reflect.Uint32:
				v.Set(reflect.ValueOf([]uint32{uint32(n), uint32(n) + 1}))
			case reflect.Int64:
				v.Set(reflect.ValueOf([]int64{1_700_000_000_000_000_000 + int64(n)*1_000_003, int64(n)}))
			case reflect.Struct:
				// One element, filled as a struct of its own (the tasks a
				// record creates).
				s := reflect.MakeSlice(v.Type(), 1, 1)
				walk(s.Index(0), path+"[0]", name)
				v.Set(s)
			default:
				t.Fatalf("fill: %s is a %s: teach fill to set it", path, v.Type())
			}
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int64:
			// An instant in 2023 (or as many nanoseconds): all 8 bytes in use.
			v.SetInt(1_700_000_000_000_000_000 + int64(n)*1_000_003)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
			v.SetInt(-int64(n)) // negative: exercises zigzag encodings
		case reflect.Uint64:
			v.SetUint(1<<40 + uint64(n))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
			v.SetUint(uint64(n))
		case reflect.Float32, reflect.Float64:
			v.SetFloat(float64(n) + 0.25)
		default:
			t.Fatalf("fill: %s has kind %s: teach fill to set it", path, v.Kind())
		}
	}
	v = v.Elem()
	walk(v, v.Type().Name(), v.Type().Name())
	for i := 0; i < len(later); i++ { // a field walked later may hold one to walk later still
		later[i]()
	}
}

// appended are the fields (Type.Field) added to a nested struct of
// records after their lines were pinned.
var appended = map[string]bool{
	"ScheduleDef.Kind":       true,
	"TaskCreated.Remote":     true,
	"TaskCommitted.Deliver":  true,
	"TaskCompleted.Deliver":  true,
	"TasksSubmitted.Deliver": true,
	"TasksSubmitted.Parent":  true,
}

// fieldDiff is one field in which two records differ.
type fieldDiff struct {
	path      string // Type.Field.Sub
	got, want any
	gotZero   bool // got holds the field's zero value
}

func (d fieldDiff) String() string {
	return fmt.Sprintf("%s: got %#v, want %#v", d.path, d.got, d.want)
}

// diffFields lists the fields in which got and want, two values of one
// struct type, differ.
func diffFields(got, want reflect.Value, path string) []fieldDiff {
	if want.Kind() == reflect.Pointer && want.Type().Elem().Kind() == reflect.Struct && !got.IsNil() && !want.IsNil() {
		got, want = got.Elem(), want.Elem()
	}
	if want.Kind() == reflect.Struct {
		var out []fieldDiff
		for i := range want.NumField() {
			out = append(out, diffFields(got.Field(i), want.Field(i), path+"."+want.Type().Field(i).Name)...)
		}
		return out
	}
	if want.Kind() == reflect.Slice && want.Type().Elem().Kind() == reflect.Struct && got.Len() == want.Len() {
		// Element by element, so that a field added to the element since
		// (TaskCreated.Remote in a spawn) is told apart.
		var out []fieldDiff
		for i := range want.Len() {
			out = append(out, diffFields(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if !reflect.DeepEqual(got.Interface(), want.Interface()) {
		return []fieldDiff{{path: path, got: got.Interface(), want: want.Interface(), gotZero: got.IsZero()}}
	}
	return nil
}
