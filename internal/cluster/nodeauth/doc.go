// Package nodeauth lets a node of a cluster prove that a request it
// forwards to another node comes from a node of the same cluster, and
// carry the principal of the caller it forwards for (docs/design/cluster.md,
// "Trust between nodes").
//
// Every node reads the cluster secret from the database at start
// (LoadSecret: 32 random bytes, created by the first node). A forwarded
// request carries the forwarding node's id, the caller's principal, the
// time and the procedure, and an HMAC-SHA-256 over them with the secret;
// the receiving node recomputes it and compares in constant time, and
// accepts it within MaxSkew of its own clock. A process without the secret
// (a client) cannot make a valid signature, so it cannot pass off a request
// as forwarded, nor claim a principal.
//
// What it does not do: hide anything (run nodes over TLS for that) or stop
// a replay of a captured request within MaxSkew on a network an attacker
// can read; TLS between nodes closes both.
package nodeauth
