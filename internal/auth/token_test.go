package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

var tokenShape = regexp.MustCompile(`^tnr_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$`)

func TestNewToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tok, id := NewToken()
		if !tokenShape.MatchString(tok) || !strings.HasPrefix(tok, "tnr_"+id+"_") {
			t.Fatalf("NewToken() = %q, %q: not tnr_<12 hex>_<43 base64url> with its id", tok, id)
		}
		got, err := TokenID(tok)
		if err != nil || got != id {
			t.Fatalf("TokenID(a new token) = %q, %v; want %q", got, err, id)
		}
		if seen[tok] {
			t.Fatalf("NewToken repeated %q", tok)
		}
		seen[tok] = true
	}
}

func TestTokenIDRefuses(t *testing.T) {
	t.Parallel()
	good, _ := NewToken()
	for _, tc := range []struct{ token, want string }{
		{"abc", "not a tenure token"},
		{"tnr_" + good[4:len(good)-1], "is 59 characters"},
		{good + "x", "is 61 characters"},
		{"tnr_ABCDEF123456" + good[16:], "not lowercase hex"},
		{good[:16] + "-" + good[17:], "is 60 characters, not"}, // the separator is not _
		{good[:len(good)-1] + "=", "not unpadded base64url"},
		{good[:20] + "+" + good[21:], "not unpadded base64url"},
	} {
		_, err := TokenID(tc.token)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TokenID(%q) = %v, want an error with %q", tc.token, err, tc.want)
		}
		if err != nil && len(tc.token) > 20 && strings.Contains(err.Error(), tc.token[17:]) {
			t.Errorf("TokenID(%q): the error repeats the secret: %v", tc.token, err)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	t.Parallel()
	tok, _ := NewToken()
	for _, tc := range []struct {
		value, want, wantErr string
	}{
		{"Bearer " + tok, tok, ""},
		{"bearer " + tok, tok, ""},
		{"BEARER   " + tok + " ", tok, ""},
		{"", "", "no token"},
		{tok, "", "a token without its scheme"},
		{"Basic dXNlcjpwYXNz", "", "not a bearer token"},
		{"Bearer", "", "not a bearer token"},
		{"Bearer    ", "", "no token after Bearer"},
		{"Bearer " + tok + " " + tok, "", "more than one word"},
	} {
		got, err := ParseAuthorization(tc.value)
		switch {
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("ParseAuthorization(%q) = %q, %v; want %q", tc.value, got, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseAuthorization(%q) = %q, %v; want an error with %q", tc.value, got, err, tc.wantErr)
		case err != nil && (strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), "dXNlcjpwYXNz")):
			t.Errorf("ParseAuthorization(%q): the error repeats the credentials: %v", tc.value, err)
		}
	}
	if _, err := ParseAuthorization(""); !errors.Is(err, ErrNoToken) {
		t.Errorf("ParseAuthorization(\"\") = %v, want ErrNoToken", err)
	}
}
