// Package certgen makes certificate authorities and the certificates they
// issue, in memory, with crypto/x509 (ECDSA P-256 keys, random 128-bit
// serials): for the tests of TLS, and for `tenure bench --tls`, which
// serves its embedded server with a certificate made for the run.
package certgen
