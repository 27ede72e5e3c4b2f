// Package ui serves the dashboard: the web pages built from ui/ (`make ui`)
// into dist/, which is committed and embedded in the binary, so that a
// server built from a fresh clone serves it without Node.js. The pages
// speak only the public API, as any client; see docs/design/architecture.md, "The
// dashboard".
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed dist
var dist embed.FS

// CSP is the Content-Security-Policy of every answer: the page loads its
// own script and stylesheet and calls its own origin, nothing else.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded asset, read once.
type file struct {
	body  []byte
	etag  string
	ctype string
}

// Handler serves the dashboard from the assets embedded in the binary:
// / is its page, /assets/NAME its files; any other path is 404.
func Handler() http.Handler {
	return handler(dist)
}

// handler serves the files of root's dist/ directory.
func handler(root fs.FS) http.Handler {
	files := map[string]file{}
	_ = fs.WalkDir(root, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(b)
		}
		files["/"+strings.TrimPrefix(p, "dist/")] = file{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path
		if name == "/" {
			name = "/index.html"
		}
		f, ok := files[name]
		if !ok || (!strings.HasPrefix(name, "/assets/") && name != "/index.html") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// The assets keep their names from build to build: check each time.
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
