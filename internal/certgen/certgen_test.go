package certgen_test

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/certgen/certtest"
	"github.com/tenurehq/tenure/internal/tlsfiles"
)

func TestIssuedCertificatesVerify(t *testing.T) {
	now := time.Now()
	ca, other := certtest.CA(t, "test ca"), certtest.CA(t, "other ca")
	srv, err := ca.Server("node", now, "127.0.0.1", "node.example")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("client", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cert  *x509.Certificate
		opts  x509.VerifyOptions
		valid bool
	}{
		{"server for its IP", srv.Cert, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"}, true},
		{"server for its name", srv.Cert, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "node.example"}, true},
		{"server as a client", srv.Cert, x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{"server for another IP", srv.Cert, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.2"}, false},
		{"server of another CA", srv.Cert, x509.VerifyOptions{Roots: other.Pool(), DNSName: "127.0.0.1"}, false},
		{"server tomorrow", srv.Cert, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1", CurrentTime: now.Add(25 * time.Hour)}, false},
		{"client", cli.Cert, x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{"client as a server", cli.Cert, x509.VerifyOptions{Roots: ca.Pool()}, false},
	} {
		_, err := tc.cert.Verify(tc.opts)
		if (err == nil) != tc.valid {
			t.Errorf("%s: Verify = %v, want valid %v", tc.name, err, tc.valid)
		}
	}
	if srv.Cert.SerialNumber.Cmp(cli.Cert.SerialNumber) == 0 {
		t.Error("two certificates share a serial number")
	}
	if _, err := srv.TLS(); err != nil {
		t.Errorf("TLS(): %v", err)
	}

	// Written files read back as the same pair.
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := srv.Write(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.SerialNumber.Cmp(srv.Cert.SerialNumber) != 0 {
		t.Errorf("the files hold serial %s, want %s", tlsfiles.Serial(pair.Leaf), tlsfiles.Serial(srv.Cert))
	}
}
