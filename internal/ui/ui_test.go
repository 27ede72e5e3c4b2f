package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

// get answers GET path from h.
func get(t *testing.T, h http.Handler, path string, hdr ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// TestEmbeddedBuild: the committed build is embedded: its page is served
// at /, and every script and stylesheet the page names is served too,
// with its type. (Whether the build matches its source is CI's check.)
func TestEmbeddedBuild(t *testing.T) {
	t.Parallel()
	h := Handler()
	resp := get(t, h, "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), `<main id="main"`) {
		t.Fatalf("GET /: %d %s %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`).FindAllStringSubmatch(string(body), -1)
	if len(refs) < 2 {
		t.Fatalf("the page names %d assets, want a script and a stylesheet: %s", len(refs), body)
	}
	for _, m := range refs {
		r := get(t, h, m[1])
		if r.StatusCode != http.StatusOK {
			t.Errorf("GET %s (named by the page): %d", m[1], r.StatusCode)
		}
		ct := r.Header.Get("Content-Type")
		if strings.HasSuffix(m[1], ".js") && !strings.HasPrefix(ct, "text/javascript") || strings.HasSuffix(m[1], ".css") && !strings.HasPrefix(ct, "text/css") {
			t.Errorf("GET %s: Content-Type %q", m[1], ct)
		}
	}
}

// TestHandler: / and /assets/ files only, with the security headers and
// an ETag that a conditional GET answers with 304; anything else is 404.
func TestHandler(t *testing.T) {
	t.Parallel()
	h := handler(fstest.MapFS{
		"dist/index.html":    {Data: []byte("<!doctype html><p>hi")},
		"dist/assets/app.js": {Data: []byte("console.log(1)")},
		"dist/secret.txt":    {Data: []byte("not served")},
	})
	resp := get(t, h, "/")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != CSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
		resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Errorf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	etag := resp.Header.Get("ETag")
	if r := get(t, h, "/", "If-None-Match", etag); etag == "" || r.StatusCode != http.StatusNotModified {
		t.Errorf("GET / If-None-Match %s: %d", etag, r.StatusCode)
	}
	if r := get(t, h, "/assets/app.js"); r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET /assets/app.js: %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
	for _, p := range []string{"/secret.txt", "/assets/", "/assets/nope.js", "/index.htm", "/tenure.v1.TaskService/GetTask"} {
		if r := get(t, h, p); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, r.StatusCode)
		}
	}
}
