//go:build !go1.24

package client

import "net/http"

// h2c reports whether http2Only gives http:// URLs unencrypted HTTP/2:
// net/http has it from Go 1.24.
const h2c = false

// http2Only leaves t as it is: https:// URLs negotiate HTTP/2 over TLS
// (Transport.ForceAttemptHTTP2), and http:// URLs would speak HTTP/1.1,
// which gRPC cannot use (New refuses that combination).
func http2Only(t *http.Transport) {}
