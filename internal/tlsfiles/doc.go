// Package tlsfiles is TLS from PEM files, for the server, the node-to-node
// calls of cluster mode and the clients.
//
// A Reloader holds a server's certificate, its key and, optionally, the CA
// that client certificates must chain to (mutual TLS). It serves them to
// every handshake through tls.Config.GetConfigForClient, so new
// connections take a new certificate without a restart:
//
//   - Reload rereads the files at once (tenure server calls it on SIGHUP).
//   - At a handshake, at most once per CheckEvery on the injected clock, the
//     files are compared with those last read (the file, its modification
//     time and size); when one differs, they are all read again.
//
// A reload either replaces everything or nothing: a missing, unreadable or
// mismatched file is logged as an error, and the certificate and CA in use
// stay in use (a server never serves without a certificate). Connections
// already open keep the certificate they were made with.
//
// PeerConfig and DialPeer are the client side of the same files, for one
// node calling another: the node presents its own (current) certificate
// when asked for one and verifies the far node's certificate, for the host
// it dialled, against the current peer CA, read again with the rest.
//
// With a client CA, a client certificate is verified in the handshake if
// given, and required by RequireClientCert, an HTTP handler in front of
// the API: a client without one is answered unauthenticated, with a
// message that says so, in its own protocol, rather than cut off in the
// handshake; the probes it names stay open to it.
//
// LoadCAPool and LoadKeyPair read the files once, with errors that name the
// file and say what it should hold. (The SDK, a module of its own, reads
// its client's files with the standard library's loaders.)
package tlsfiles
