package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// LoadCAPool reads the PEM file path (one or more CA certificates) into a
// pool. The error names the file and what is wrong with it.
func LoadCAPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA file %s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate (-----BEGIN CERTIFICATE-----): give the certificate of the CA, in PEM", path)
	}
	return pool, nil
}

// LoadKeyPair reads a PEM certificate (chain, leaf first) and its PEM
// private key. The certificate's Leaf is set. The error names the file and
// what is wrong with it.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading the certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("reading the private key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate %s with key %s: %s: give the PEM certificate and the PEM private key it was issued for",
			certFile, keyFile, strings.TrimPrefix(err.Error(), "tls: "))
	}
	return cert, nil
}

// HandshakeRefused reports whether err is a TLS handshake that failed for
// good: this side does not trust the far side's certificate (another CA,
// expired or not yet valid, not for the name dialled), or the far side
// refused this one (a TLS alert: no certificate, or one it does not
// trust). Retrying cannot help until a certificate or a CA changes.
func HandshakeRefused(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		alert   tls.AlertError
		op      *net.OpError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &alert) ||
		// A TLS alert from the far side: crypto/tls reports it so.
		(errors.As(err, &op) && op.Op == "remote error")
}
