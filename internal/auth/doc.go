// Package auth authenticates callers of the API by bearer token and
// decides what each may call: the token file, its reloading, the parsing
// of the Authorization header, and the table of which role may call what
// (rules.go), which docs/guides/security.md shows.
//
// # Tokens
//
// A token is 256 random bits from crypto/rand with a recognisable prefix
// and a non-secret id:
//
//	tnr_<id>_<secret>     e.g. tnr_3f9a1c2e4b5d_q5Jx…(43 characters)
//
// where id is 12 lowercase hex digits (6 random bytes, not secret: logs and
// `tenure token list` show it) and secret is 32 random bytes in unpadded
// base64url. Only the SHA-256 of the whole token is stored. A slow key
// derivation (bcrypt, argon2) protects low-entropy passwords from guessing;
// a 256-bit random secret cannot be guessed, so one SHA-256 suffices and
// keeps every call's check cheap. A presented token is looked up by its id
// and its hash compared with subtle.ConstantTimeCompare (with an unknown id
// a dummy hash is compared too), so the answer's timing says nothing about
// the secret.
//
// # The token file
//
// `tenure server --auth-file FILE` reads the tokens from FILE, written by
// `tenure token create` (and `tenure token revoke`). It holds no secret,
// only hashes, but whoever can write it can grant access: keep it writable
// by the server's operator only (it is created 0600). It is UTF-8 text, one
// JSON object per line; blank lines and lines starting with # are ignored.
// The first other line names the format and its version:
//
//	{"format":"tenure-tokens","version":1}
//
// and every further one is one token:
//
//	{"name":"ci-bot","role":"worker","namespaces":["default"],"queues":["emails"],
//	 "id":"3f9a1c2e4b5d","sha256":"<64 lowercase hex digits>","created":"2025-01-02T03:04:05Z"}
//
// (on one line). name is 1 to 64 letters, digits and ._@:- and unique in
// the file: it is the principal the server records as who asked. role is
// admin, submitter, worker or reader. namespaces lists the namespaces the
// token may act in, or is ["*"] for every one; queues (worker tokens
// only, and required for them) likewise lists queues, or ["*"]. id and
// sha256 are the token's id and the hash of the whole token; created is
// informative. Unknown fields, a missing one, a duplicate name or id, and
// a version other than 1 are errors that name the line.
//
// # Reloading
//
// A Store rereads the file when it changes (a stat at most once per
// StoreOptions.CheckEvery, default 1 s, on the next call that presents a
// token) and when asked (Reload; the server calls it on SIGHUP). A file
// that no longer parses, or is gone, leaves the tokens loaded before in
// force and logs an error that says why; the next change is tried again.
package auth
