package auth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	testHash = "07f3f306afe4bded6418f7ce7275d78d42c74e11aac267cba1704c036c57a34c"
	header1  = `{"format":"tenure-tokens","version":1}`
)

// tokenLine is a valid line for a token named name with id id, with
// fields replaced as the test needs.
func tokenLine(name, id string, replace ...string) string {
	l := `{"name":"` + name + `","role":"worker","namespaces":["default"],"queues":["emails"],"id":"` + id + `","sha256":"` + testHash + `","created":"2025-01-02T03:04:05Z"}`
	return strings.NewReplacer(replace...).Replace(l)
}

func TestParse(t *testing.T) {
	t.Parallel()
	file := "# tokens of the test\n\n" + header1 + "\n" + tokenLine("w1", "000000000001") + "\n  # a comment\n" +
		`{"name":"ops","role":"admin","namespaces":["*"],"id":"000000000002","sha256":"` + testHash + `"}` + "\n"
	tk, err := Parse(strings.NewReader(file), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(tk.Entries) != 2 {
		t.Fatalf("%d entries, want 2", len(tk.Entries))
	}
	w := tk.Named("w1")
	if w == nil || w.Role != Worker || !slices.Equal(w.Namespaces, []string{"default"}) || !slices.Equal(w.Queues, []string{"emails"}) ||
		w.ID != "000000000001" || !w.Created.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) || w.Hash[0] != 0x07 {
		t.Errorf("w1 = %+v", w)
	}
	if tk.lookup("000000000002") != tk.Named("ops") || tk.lookup("000000000003") != nil {
		t.Errorf("lookup by id does not find the entries")
	}
}

// TestParseRefuses: every malformed file is refused with its line and
// what is wrong.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	ok := tokenLine("w1", "000000000001")
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "no header line"},
		{"comments only", "# nothing\n", "no header line"},
		{"no header", ok + "\n", "f:1: the first line is not the header"},
		{"other format", `{"format":"x","version":1}`, "f:1: the first line is not the header"},
		{"no version", `{"format":"tenure-tokens"}`, "f:1: the first line is not the header"},
		{"newer version", `{"format":"tenure-tokens","version":2}`, "f:1: token file version 2: this tenure reads version 1 only"},
		{"not JSON", header1 + "\nname=w1\n", "f:2: not a token's JSON object"},
		{"two objects", header1 + "\n" + ok + ok + "\n", "f:2: not a token's JSON object"},
		{"unknown field", header1 + "\n" + tokenLine("w1", "000000000001", `"id"`, `"colour":"red","id"`) + "\n", `unknown field "colour"`},
		{"unknown role", header1 + "\n" + tokenLine("w1", "000000000001", "worker", "writer") + "\n", `f:2: role "writer" is unknown: use admin, submitter, worker or reader`},
		{"bad name", header1 + "\n" + tokenLine("w 1", "000000000001") + "\n", `token name "w 1" has ' '`},
		{"long name", header1 + "\n" + tokenLine(strings.Repeat("n", 65), "000000000001") + "\n", "is not 1 to 64 characters"},
		{"no namespaces", header1 + "\n" + tokenLine("w1", "000000000001", `["default"]`, `[]`) + "\n", `token "w1" has no namespaces`},
		{"star and more", header1 + "\n" + tokenLine("w1", "000000000001", `["default"]`, `["*","a"]`) + "\n", "* already means every namespace"},
		{"repeated namespace", header1 + "\n" + tokenLine("w1", "000000000001", `["default"]`, `["a","a"]`) + "\n", `namespace "a" is listed twice`},
		{"bad namespace", header1 + "\n" + tokenLine("w1", "000000000001", `["default"]`, `["a b"]`) + "\n", `namespace "a b"`},
		{"worker without queues", header1 + "\n" + tokenLine("w1", "000000000001", `,"queues":["emails"]`, ``) + "\n", "worker token without queues"},
		{"reader with queues", header1 + "\n" + tokenLine("w1", "000000000001", "worker", "reader") + "\n", "queues are for worker tokens only"},
		{"bad id", header1 + "\n" + tokenLine("w1", "00000000000G") + "\n", `id "00000000000G" is not 12 lowercase hex digits`},
		{"short hash", header1 + "\n" + tokenLine("w1", "000000000001", testHash, testHash[:10]) + "\n", "sha256 is not 64 lowercase hex digits"},
		{"upper hash", header1 + "\n" + tokenLine("w1", "000000000001", testHash, strings.ToUpper(testHash)) + "\n", "sha256 is not 64 lowercase hex digits"},
		{"bad created", header1 + "\n" + tokenLine("w1", "000000000001", "2025-01-02T03:04:05Z", "yesterday") + "\n", `created "yesterday" is not an RFC 3339 time`},
		{"duplicate name", header1 + "\n" + ok + "\n" + tokenLine("w1", "000000000002") + "\n", `f:3: a second token named "w1"`},
		{"duplicate id", header1 + "\n" + ok + "\n" + tokenLine("w2", "000000000001") + "\n", `f:3: token "w2" has the id 000000000001 of another token`},
		{"long line", header1 + "\n" + strings.Repeat("x", maxLine+1) + "\n", "f:2: a line is longer than"},
	} {
		_, err := Parse(strings.NewReader(tc.file), "f")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Parse = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestCreateRevoke: tokens created are in the file (0600) with their
// hash, a duplicate name and a broken file are refused, and a revoke
// removes exactly one token and keeps every other line.
func TestCreateRevoke(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.jsonl")
	now := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	tok1, e1, err := Create(path, Principal{Name: "ops", Role: Admin, Namespaces: []string{"*"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the new token file: %v, %v; want mode 0600", st.Mode(), err)
	}
	// A comment an operator added stays through a revoke.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# mailer is for the mail service\n")
	f.Close()
	tok2, _, err := Create(path, Principal{Name: "mailer", Role: Worker, Namespaces: []string{"default"}, Queues: []string{"emails"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tk.Entries) != 2 || tk.Named("ops").Hash != HashOf(tok1) || tk.Named("mailer").Hash != HashOf(tok2) ||
		!tk.Named("ops").Created.Equal(now) || tk.Named("ops").ID != e1.ID {
		t.Fatalf("the file holds %+v", tk.Entries)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), tok1) || strings.Contains(string(data), tok1[17:]) {
		t.Fatalf("the token file holds a token:\n%s", data)
	}

	if _, _, err := Create(path, Principal{Name: "ops", Role: Reader, Namespaces: []string{"*"}}, now); err == nil || !strings.Contains(err.Error(), `already has a token named "ops"`) {
		t.Errorf("a second ops: %v", err)
	}
	if _, _, err := Create(path, Principal{Name: "r", Role: Reader, Namespaces: []string{"*"}, Queues: []string{"q"}}, now); err == nil || !strings.Contains(err.Error(), "queues are for worker tokens only") {
		t.Errorf("a reader with queues: %v", err)
	}

	removed, err := Revoke(path, "ops")
	if err != nil || removed.Name != "ops" {
		t.Fatalf("Revoke(ops) = %+v, %v", removed, err)
	}
	after, _ := os.ReadFile(path)
	if !strings.Contains(string(after), "# mailer is for the mail service") || strings.Contains(string(after), `"ops"`) {
		t.Errorf("after revoking ops:\n%s", after)
	}
	if tk, err := ReadFile(path); err != nil || len(tk.Entries) != 1 || tk.Named("mailer") == nil {
		t.Errorf("after revoking ops: %v %+v", err, tk)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("revoke changed the mode to %v", st.Mode())
	}
	if _, err := Revoke(path, "ops"); err == nil || !strings.Contains(err.Error(), `has no token named "ops"`) {
		t.Errorf("revoking ops twice: %v", err)
	}

	broken := filepath.Join(t.TempDir(), "broken")
	os.WriteFile(broken, []byte("not a token file\n"), 0o600)
	if _, _, err := Create(broken, Principal{Name: "x", Role: Reader, Namespaces: []string{"*"}}, now); err == nil || !strings.Contains(err.Error(), "nothing was added") {
		t.Errorf("Create on a broken file: %v", err)
	}
	if data, _ := os.ReadFile(broken); string(data) != "not a token file\n" {
		t.Errorf("Create changed a broken file: %q", data)
	}
}
