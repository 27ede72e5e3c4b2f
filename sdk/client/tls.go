package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// LoadTLSConfig returns a TLS configuration for Options.TLSConfig from PEM
// files: caFile, if not empty, holds the CA certificates the server's
// certificate must chain to, in place of the system's roots; certFile and
// keyFile, both or neither, are the client certificate and its private key
// to present to a server that requires one. The files are read once.
func LoadTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("client: CA file %s holds no PEM certificate (-----BEGIN CERTIFICATE-----) that parses: give the certificate of the CA, in PEM", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("client: a client certificate needs both its certificate file and its key file")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: client certificate %s with key %s: %w: give the PEM certificate and the PEM private key it was issued for", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// tlsRefused reports whether err is a TLS handshake that failed for good
// (ErrTLSRefused):
// this client does not trust the server's certificate, or the server
// refused this client (no certificate, or one it does not trust). Retrying
// cannot help.
func tlsRefused(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		op      *net.OpError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		// A TLS alert from the server: crypto/tls reports it so.
		(errors.As(err, &op) && op.Op == "remote error")
}
