// Package certtest gives a test the TLS material it needs, made by
// certgen: a CA, and the certificates it issued as values and as PEM
// files in a directory of the test's own.
package certtest

import (
	"path/filepath"
	"testing"

	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/clock"
)

// CA returns a new CA named name, valid from now.
func CA(t testing.TB, name string) *certgen.CA {
	t.Helper()
	ca, err := certgen.NewCA(name, clock.Real.Now())
	if err != nil {
		t.Fatalf("certtest: %v", err)
	}
	return ca
}

// Files are a CA of a test, the server certificate it issued for
// 127.0.0.1 and a client certificate it issued, and the PEM files of
// each.
type Files struct {
	CA             *certgen.CA
	Server, Client *certgen.Pair
	// CAFile is the CA's certificate; ServerCert and ServerKey the
	// server's pair, ClientCert and ClientKey the client's.
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string
}

// New makes a CA named name and its server and client certificates
// (common names "server" and "client"), and writes them to a directory
// of t's own.
func New(t testing.TB, name string) Files {
	t.Helper()
	now, dir := clock.Real.Now(), t.TempDir()
	f := Files{CA: CA(t, name), CAFile: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	var err error
	if f.Server, err = f.CA.Server("server", now, "127.0.0.1"); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if f.Client, err = f.CA.Client("client", now); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if err := certgen.WriteFile(f.CAFile, f.CA.PEM, 0o644); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if err := f.Server.Write(f.ServerCert, f.ServerKey); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	if err := f.Client.Write(f.ClientCert, f.ClientKey); err != nil {
		t.Fatalf("certtest: %v", err)
	}
	return f
}
