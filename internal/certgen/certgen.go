package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// Validity of what this package makes: from an hour before the time given
// (clocks differ a little) to a day after it.
const (
	backdate = time.Hour
	validFor = 24 * time.Hour
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate in PEM, for a CA file.
	PEM []byte
}

// Pair is a certificate with its private key.
type Pair struct {
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its key in PEM (PKCS #8).
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA named cn, valid around now.
func NewCA(cn string, now time.Time) (*CA, error) {
	key, tmpl, err := template(cn, now)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a certificate named cn for hosts (IP addresses or DNS
// names), usable by a server and, as a node calling another, by a client.
func (ca *CA) Server(cn string, now time.Time, hosts ...string) (*Pair, error) {
	return ca.Issue(cn, now, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// Client issues a client certificate named cn.
func (ca *CA) Client(cn string, now time.Time) (*Pair, error) {
	return ca.Issue(cn, now, nil, x509.ExtKeyUsageClientAuth)
}

// Issue issues a certificate named cn for hosts (IP addresses or DNS
// names), for the extended key usages given.
func (ca *CA) Issue(cn string, now time.Time, hosts []string, usage ...x509.ExtKeyUsage) (*Pair, error) {
	key, tmpl, err := template(cn, now)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = usage
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// TLS returns the pair as a tls.Certificate.
func (p *Pair) TLS() (tls.Certificate, error) { return tls.X509KeyPair(p.CertPEM, p.KeyPEM) }

// Write writes the certificate and the key to certFile and keyFile (the
// key readable by its owner only), each replaced at once by a rename, so
// that a reader sees the old file or the new one, never a part.
func (p *Pair) Write(certFile, keyFile string) error {
	if err := WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		return err
	}
	return WriteFile(keyFile, p.KeyPEM, 0o600)
}

// WriteFile writes data to a temporary file next to path and renames it to
// path.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// template returns a new key and what every certificate of this package
// has in common.
func template(cn string, now time.Time) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, fmt.Errorf("certgen: serial number: %w", err)
	}
	return key, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validFor),
	}, nil
}
