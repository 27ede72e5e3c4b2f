//go:build go1.24

package client

import "net/http"

// h2c reports whether http2Only gives http:// URLs unencrypted HTTP/2.
const h2c = true

// http2Only makes t speak HTTP/2 only: unencrypted for http:// URLs, over
// TLS for https:// ones.
func http2Only(t *http.Transport) {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	t.Protocols = &p
}
