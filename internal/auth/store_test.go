package auth

import (
	"bytes"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// bearerHeader is a request header carrying token.
func bearerHeader(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	tok, _, err := Create(path, Principal{Name: "mailer", Role: Worker, Namespaces: []string{"default"}, Queues: []string{"emails"}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(bearerHeader(tok))
	if err != nil || p.Name != "mailer" || p.Role != Worker {
		t.Fatalf("Authenticate(its token) = %+v, %v", p, err)
	}
	other, otherID := NewToken()
	sameID := tok[:17] + other[17:] // the right id, another secret
	for _, tc := range []struct {
		name string
		h    http.Header
		want string
	}{
		{"no header", http.Header{}, "no token"},
		{"two headers", http.Header{"Authorization": {"Bearer " + tok, "Bearer " + tok}}, "2 Authorization headers"},
		{"unknown id", bearerHeader(other), "unknown token tnr_" + otherID + "_…"},
		{"wrong secret", bearerHeader(sameID), "unknown token tnr_" + tok[4:16] + "_…"},
		{"malformed", bearerHeader("tnr_x"), "not a tenure token's 60"},
	} {
		p, err := s.Authenticate(tc.h)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Authenticate = %+v, %v; want an error with %q", tc.name, p, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), tok[17:]) || strings.Contains(err.Error(), other[17:])) {
			t.Errorf("%s: the error repeats a secret: %v", tc.name, err)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing"), StoreOptions{}); err == nil || !strings.Contains(err.Error(), "tenure token create --auth-file") {
		t.Errorf("Open(missing) = %v, want an error that says how to make one", err)
	}
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte(header1+"\n{}\n"), 0o600)
	if _, err := Open(broken, StoreOptions{}); err == nil || !strings.Contains(err.Error(), broken+":2:") {
		t.Errorf("Open(broken) = %v, want the line", err)
	}
}

// TestReload: a change to the file is seen at the first call after
// CheckEvery has passed on the store's clock (not before); a broken or
// missing file keeps the tokens in force and logs an error once; Reload
// (SIGHUP) rereads at once.
func TestReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	tok1, _, err := Create(path, Principal{Name: "one", Role: Reader, Namespaces: []string{"*"}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	s, err := Open(path, StoreOptions{Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	knows := func(tok string) bool {
		_, err := s.Authenticate(bearerHeader(tok))
		return err == nil
	}

	tok2, _, err := Create(path, Principal{Name: "two", Role: Reader, Namespaces: []string{"*"}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if knows(tok2) {
		t.Fatal("a token created now is known before CheckEvery passed")
	}
	clk.Advance(DefaultCheckEvery - time.Millisecond)
	if knows(tok2) {
		t.Fatal("a token created now is known before CheckEvery passed")
	}
	clk.Advance(time.Millisecond)
	if !knows(tok2) || !knows(tok1) {
		t.Fatal("after CheckEvery, the new token (or the old one) is unknown")
	}
	if !strings.Contains(logs.String(), "token file reloaded") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}

	// A broken file: the tokens stay, one error is logged, and a fixed
	// file is read again.
	good, _ := os.ReadFile(path)
	os.WriteFile(path, append(append([]byte{}, good...), "garbage\n"...), 0o600)
	logs.Reset()
	for range 3 {
		clk.Advance(DefaultCheckEvery)
		if !knows(tok1) || !knows(tok2) {
			t.Fatal("a broken file dropped the tokens in force")
		}
	}
	if n := strings.Count(logs.String(), "token file not reloaded"); n != 1 || !strings.Contains(logs.String(), path+":") {
		t.Errorf("a broken file logged %d errors, want 1 naming the file:\n%s", n, logs.String())
	}
	if _, err := Revoke(path, "two"); err == nil {
		t.Fatal("Revoke on a broken file succeeded")
	}
	os.WriteFile(path, good, 0o600)
	os.Chtimes(path, time.Now(), time.Now().Add(time.Second)) // a change even on a coarse clock
	if _, err := Revoke(path, "two"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultCheckEvery)
	if knows(tok2) || !knows(tok1) {
		t.Fatal("after revoking two: two is still known, or one is not")
	}

	// A missing file: the tokens stay; one error.
	os.Rename(path, path+".moved")
	logs.Reset()
	for range 3 {
		clk.Advance(DefaultCheckEvery)
		if !knows(tok1) {
			t.Fatal("a missing file dropped the tokens in force")
		}
	}
	if n := strings.Count(logs.String(), "token file not reloaded"); n != 1 {
		t.Errorf("a missing file logged %d errors, want 1:\n%s", n, logs.String())
	}
	if err := s.Reload(); err == nil {
		t.Error("Reload of a missing file succeeded")
	}

	// Reload rereads at once, without the clock.
	os.Rename(path+".moved", path)
	tok3, _, err := Create(path, Principal{Name: "three", Role: Reader, Namespaces: []string{"*"}}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil || !knows(tok3) {
		t.Fatalf("Reload = %v; the token created before it is known: %v", err, knows(tok3))
	}
}
