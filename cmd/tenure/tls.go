package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/sdk/client"
)

// tlsServerFlags are the TLS flags of `tenure server`.
type tlsServerFlags struct{ cert, key, clientCA, peerCA string }

func (f *tlsServerFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", envOr("TENURE_TLS_CERT", ""), "serve HTTPS (HTTP/2 and HTTP/1.1 over TLS) with this PEM certificate (chain, leaf first), with --tls-key; "+
		"the files are read again on SIGHUP and when they change (env TENURE_TLS_CERT)")
	fs.StringVar(&f.key, "tls-key", envOr("TENURE_TLS_KEY", ""), "the PEM private key of --tls-cert (env TENURE_TLS_KEY)")
	fs.StringVar(&f.clientCA, "tls-client-ca", envOr("TENURE_TLS_CLIENT_CA", ""), "require a client certificate issued by a CA of this PEM file from every client "+
		"(but /healthz and /readyz); needs --tls-cert (env TENURE_TLS_CLIENT_CA)")
	fs.StringVar(&f.peerCA, "tls-peer-ca", envOr("TENURE_TLS_PEER_CA", ""), "cluster mode: the other nodes' certificates must be issued by a CA of this PEM file "+
		"(default: --tls-client-ca, else the system's roots) (env TENURE_TLS_PEER_CA)")
}

// start checks the flags and reads the files. Without --tls-cert it
// returns nil: plain HTTP. Until ctx ends, SIGHUP reads the files again.
func (f *tlsServerFlags) start(ctx context.Context, clk clock.Clock, lg *slog.Logger, cluster bool) (*tlsfiles.Reloader, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, usageError{"--tls-cert and --tls-key go together: give both (the certificate and its private key), or neither for plain HTTP"}
	}
	if f.cert == "" {
		for _, n := range []struct{ flag, v string }{{"tls-client-ca", f.clientCA}, {"tls-peer-ca", f.peerCA}} {
			if n.v != "" {
				return nil, usageError{fmt.Sprintf("--%s needs --tls-cert and --tls-key: the server must serve TLS to check certificates", n.flag)}
			}
		}
		return nil, nil
	}
	if f.peerCA != "" && !cluster {
		return nil, usageError{"--tls-peer-ca is for cluster mode (--mysql): an embedded server calls no other node"}
	}
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.clientCA, PeerCAFile: f.peerCA, Clock: clk, Logger: lg})
	if err != nil {
		return nil, fmt.Errorf("TLS (%s): %w", f.flagsIn(err.Error()), err)
	}
	leaf := r.Certificate()
	if cluster && f.clientCA != "" && !clientAuthOK(leaf) {
		return nil, fmt.Errorf("--tls-cert %s: with --tls-client-ca, a node presents its certificate to the other nodes as a client certificate, "+
			"but this one is not for client authentication (its extended key usages lack clientAuth): issue it for both serverAuth and clientAuth", f.cert)
	}
	onSIGHUP(ctx, func() { r.Reload() }) // Reload logs what it did
	lg.Info("TLS on", "cert", f.cert, "serial", tlsfiles.Serial(leaf), "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC(),
		"client_ca", f.clientCA, "reload", "on SIGHUP, and when the files change")
	return r, nil
}

// flagsIn names the flags whose files msg mentions.
func (f *tlsServerFlags) flagsIn(msg string) string {
	var flags []string
	for _, n := range []struct{ flag, path string }{{"--tls-cert", f.cert}, {"--tls-key", f.key}, {"--tls-client-ca", f.clientCA}, {"--tls-peer-ca", f.peerCA}} {
		if n.path != "" && strings.Contains(msg, n.path) && !slices.Contains(flags, n.flag) {
			flags = append(flags, n.flag)
		}
	}
	if len(flags) == 0 {
		return "--tls-cert, --tls-key"
	}
	return strings.Join(flags, ", ")
}

// clientAuthOK reports whether c may authenticate a client: it names no
// extended key usage, or clientAuth (or any) among them.
func clientAuthOK(c *x509.Certificate) bool {
	return len(c.ExtKeyUsage) == 0 || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// tlsClientFlags are the TLS flags of the commands that call a server.
type tlsClientFlags struct{ caFile, certFile, keyFile string }

func (f *tlsClientFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.caFile, "ca-file", envOr("TENURE_CA_FILE", ""), "trust a server certificate issued by a CA of this PEM file, in place of the system's roots (env TENURE_CA_FILE)")
	fs.StringVar(&f.certFile, "cert-file", envOr("TENURE_CERT_FILE", ""), "present this PEM client certificate, with --key-file, to a server that requires one (env TENURE_CERT_FILE)")
	fs.StringVar(&f.keyFile, "key-file", envOr("TENURE_KEY_FILE", ""), "the PEM private key of --cert-file (env TENURE_KEY_FILE)")
}

// on reports whether a TLS flag is given.
func (f *tlsClientFlags) on() bool { return f.caFile != "" || f.certFile != "" || f.keyFile != "" }

// config returns the TLS configuration of the flags, nil without any.
func (f *tlsClientFlags) config() (*tls.Config, error) {
	if !f.on() {
		return nil, nil
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, usageError{"--cert-file and --key-file go together: give both (the client certificate and its private key), or neither"}
	}
	cfg, err := client.LoadTLSConfig(f.caFile, f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file, --cert-file, --key-file: %w", err)
	}
	return cfg, nil
}

// hintedError is an error with the hint runApp prints under it, in place
// of tlsHint's.
type hintedError struct {
	err  error
	hint string
}

func (e hintedError) Error() string { return e.err.Error() }
func (e hintedError) Unwrap() error { return e.err }

// dbHint gives an error connecting to the cluster database the hint of a
// TLS failure there: the flags are the DSN's tls parameter and
// --mysql-tls-ca, not the client's.
func dbHint(err error) error {
	var (
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	switch {
	case errors.As(err, &unknown):
		return hintedError{err, "the database's certificate is not issued by a CA tenure trusts: pass --mysql-tls-ca with the CA that issued it, and tls=custom in the DSN"}
	case errors.As(err, &host):
		return hintedError{err, fmt.Sprintf("the database's certificate is not for the host in the DSN: connect to a name or address it holds (%s)", certNames(host.Certificate))}
	case strings.Contains(err.Error(), "TLS requested but server does not support TLS"):
		return hintedError{err, "the database does not serve TLS: turn TLS on in the database, or remove tls=… from the DSN"}
	}
	return hintedError{err, ""}
}

// tlsHint says what to do about an error that a TLS handshake or a
// mismatch of http and https caused; "" for any other error.
func tlsHint(err error) string {
	var (
		hinted  hintedError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &hinted):
		return hinted.hint
	case errors.As(err, &unknown):
		return "the server's certificate is not issued by a CA this client trusts: pass --ca-file with the CA that issued it (or set TENURE_CA_FILE)"
	case errors.As(err, &host):
		return fmt.Sprintf("the server's certificate is not for the host in --addr: connect to a name or address it holds (%s)", certNames(host.Certificate))
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, not yet valid, or not for a server): the server needs a new one"
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "the server does not serve TLS: give --addr as http://host:port"
	case connect.CodeOf(err) == connect.CodeInternal && strings.HasSuffix(msg, "internal: 400 Bad Request"):
		// What a TLS server answers to plain HTTP.
		return "if the server serves TLS (it was started with --tls-cert), give --addr as https://host:port"
	case strings.Contains(msg, "remote error: tls:"), strings.Contains(msg, "http2: client conn could not be established"):
		return "the server refused the TLS connection: if it requires a client certificate, pass --cert-file and --key-file with one its client CA issued"
	}
	return ""
}

// certNames lists the names and addresses a certificate is for.
func certNames(c *x509.Certificate) string {
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
