package auth

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// Fuzz targets; seed corpora are committed under testdata/fuzz. Run with
//
//	go test ./internal/auth -run '^$' -fuzz FuzzParseAuthorization
//	go test ./internal/auth -run '^$' -fuzz FuzzParseFile

// FuzzParseAuthorization: any header value is a token or a clear error,
// never a panic; an accepted token is one word of the value, and an error
// never repeats a long token.
func FuzzParseAuthorization(f *testing.F) {
	tok, _ := NewToken()
	f.Add("Bearer " + tok)
	f.Add("bearer  " + tok + " ")
	f.Add(tok)
	f.Add("Basic dXNlcjpwYXNz")
	f.Add("")
	f.Fuzz(func(t *testing.T, value string) {
		got, err := ParseAuthorization(value)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if got == "" || strings.ContainsAny(got, " \t") || !strings.Contains(value, got) {
			t.Fatalf("ParseAuthorization(%q) = %q: not one word of the value", value, got)
		}
		id, err := TokenID(got)
		if err != nil {
			if len(got) >= 20 && strings.Contains(err.Error(), got) {
				t.Fatalf("TokenID(%q): the error repeats the token: %v", got, err)
			}
			return
		}
		if len(got) != tokenLen || !strings.HasPrefix(got, tokenPrefix+id+"_") {
			t.Fatalf("TokenID(%q) = %q: not a token of tenure's shape", got, id)
		}
	})
}

// FuzzParseFile: any file parses or is a clear error, never a panic; what
// parses is valid, and written back it parses the same.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(header1 + "\n" + tokenLine("w1", "000000000001") + "\n"))
	f.Add([]byte("# c\n\n" + header1 + "\n" + `{"name":"ops","role":"admin","namespaces":["*"],"id":"000000000002","sha256":"` + testHash + `"}`))
	f.Add([]byte(`{"format":"tenure-tokens","version":2}`))
	f.Add([]byte(header1 + "\n" + tokenLine("w1", "000000000001", "worker", "reader") + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse(bytes.NewReader(data), "f")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		var out bytes.Buffer
		out.WriteString(header1 + "\n")
		for i := range tk.Entries {
			e := &tk.Entries[i]
			if err := e.Principal.Validate(); err != nil {
				t.Fatalf("entry %d parsed but is not valid: %v", i, err)
			}
			out.Write(e.encode())
			out.WriteByte('\n')
		}
		again, err := Parse(&out, "again")
		if err != nil {
			t.Fatalf("written back, the file does not parse: %v\n%s", err, out.String())
		}
		if len(again.Entries) != len(tk.Entries) {
			t.Fatalf("written back: %d entries, not %d", len(again.Entries), len(tk.Entries))
		}
		for i, a := range again.Entries {
			b := tk.Entries[i]
			if a.Name != b.Name || a.Role != b.Role || a.ID != b.ID || a.Hash != b.Hash || !a.Created.Equal(b.Created) ||
				!slices.Equal(a.Namespaces, b.Namespaces) || !slices.Equal(a.Queues, b.Queues) {
				t.Fatalf("written back, entry %d is %+v, not %+v", i, a, b)
			}
		}
	})
}
