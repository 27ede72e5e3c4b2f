package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// DefaultCheckEvery is how often, at most, a handshake compares the files
// with those last read.
const DefaultCheckEvery = time.Second

// Config names the files of a Reloader.
type Config struct {
	// CertFile and KeyFile are the server's PEM certificate (chain, leaf
	// first) and its PEM private key. Required.
	CertFile, KeyFile string
	// ClientCAFile, if set, is a PEM file of CA certificates: a client
	// certificate must chain to one of them, and RequireClientCert refuses
	// requests without one.
	ClientCAFile string
	// PeerCAFile is the PEM file of CA certificates that the certificates
	// of other nodes must chain to (PeerConfig). Default: ClientCAFile;
	// with neither, the system's roots.
	PeerCAFile string
	// CheckEvery bounds how often a handshake looks at the files' times and
	// sizes (default DefaultCheckEvery).
	CheckEvery time.Duration
	// Clock times the checks and is the time certificates are verified at
	// (nil: the real clock).
	Clock clock.Clock
	// Logger hears of every reload, and of every failed one.
	Logger *slog.Logger
}

// Reloader serves the certificate and CAs of its files to every new TLS
// connection, reading them again on Reload or when they change. It is safe
// for concurrent use.
type Reloader struct {
	cfg Config
	cur atomic.Pointer[loaded]

	mu        sync.Mutex // held while the files are checked or read
	lastCheck time.Time  // under mu
	tried     stamps     // under mu: the files as they were when last read
}

// loaded is one reading of the files; never changed once stored.
type loaded struct {
	cert      *tls.Certificate
	server    *tls.Config
	peerRoots *x509.CertPool // nil: the system's roots
}

// stamps is what a check compares of the files: cert, key, client CA,
// peer CA (nil where a file is not configured or cannot be read).
type stamps [4]os.FileInfo

// changed reports whether any file differs from its stamp in o: another
// file (a new one renamed into place), another modification time or size.
// (Modification times are only as fine as the kernel's clock tick: a file
// rewritten in place to the same size within one tick is not seen; a
// rename, or SIGHUP, always is.)
func (s stamps) changed(o stamps) bool {
	for i := range s {
		a, b := s[i], o[i]
		if (a == nil) != (b == nil) {
			return true
		}
		if a != nil && (!os.SameFile(a, b) || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size()) {
			return true
		}
	}
	return false
}

// New reads the files of cfg and returns their Reloader, or an error that
// names the file at fault.
func New(cfg Config) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tlsfiles: a certificate and a key file are both required")
	}
	if cfg.PeerCAFile == "" {
		cfg.PeerCAFile = cfg.ClientCAFile
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = DefaultCheckEvery
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{cfg: cfg}
	r.tried = r.stamps()
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(l)
	r.lastCheck = cfg.Clock.Now()
	r.warnValidity(l)
	return r, nil
}

// Certificate returns the leaf certificate in use.
func (r *Reloader) Certificate() *x509.Certificate { return r.cur.Load().cert.Leaf }

// ServerConfig returns the configuration of a TLS server (HTTP/2 and
// HTTP/1.1 by ALPN) that serves the current files to each connection.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.check()
			return r.cur.Load().server, nil
		},
	}
}

// PeerConfig returns the configuration of a TLS client that calls the
// node serverName names (its host name or IP address, as dialled): it
// presents the current certificate when the far node asks for one, and
// verifies the far node's certificate for serverName against the current
// peer CA.
func (r *Reloader) PeerConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		NextProtos: []string{"h2", "http/1.1"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			r.check()
			return r.cur.Load().cert, nil
		},
		// The usual verification is replaced by VerifyConnection, which
		// does the same against the peer CA read last, not the one at
		// start. It cannot be skipped: VerifyConnection runs regardless.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			r.check()
			return verifyServer(cs, serverName, r.cur.Load().peerRoots, r.cfg.Clock.Now())
		},
	}
}

// DialPeer connects to the node at addr (host:port) over TLS with
// PeerConfig(host), for http.Transport.DialTLSContext: HTTP/2 or HTTP/1.1
// as the far node chooses.
func (r *Reloader) DialPeer(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, r.PeerConfig(host))
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// verifyServer verifies a server's certificate chain in cs for
// serverName, as crypto/tls does by default. (cs.ServerName is what the
// client sent as SNI, empty for an IP address.)
func verifyServer(cs tls.ConnectionState, serverName string, roots *x509.CertPool, now time.Time) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	if serverName == "" {
		return errors.New("tls: no server name to verify the certificate for")
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		DNSName:       serverName,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// Reload reads the files now. On an error (logged too) the certificate and
// CAs in use stay in use.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked("reload requested")
}

// check reads the files again if they changed since they were last read,
// looking at most once per CheckEvery. A check already running is not
// waited for: the handshake goes on with the files in use.
func (r *Reloader) check() {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	now := r.cfg.Clock.Now()
	if d := now.Sub(r.lastCheck); d >= 0 && d < r.cfg.CheckEvery {
		return
	}
	r.lastCheck = now
	if !r.stamps().changed(r.tried) {
		return
	}
	r.reloadLocked("files changed") // a failure is logged
}

// reloadLocked reads the files and, if they are good, puts them in use.
func (r *Reloader) reloadLocked(why string) error {
	r.tried = r.stamps()
	l, err := r.load()
	if err != nil {
		r.cfg.Logger.Error("TLS files not reloaded: the certificate in use stays in use", "why", why, "err", err,
			"serial", Serial(r.Certificate()))
		return err
	}
	r.cur.Store(l)
	leaf := l.cert.Leaf
	r.cfg.Logger.Info("TLS files reloaded", "why", why, "serial", Serial(leaf), "subject", leaf.Subject.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	r.warnValidity(l)
	return nil
}

// warnValidity logs a certificate that is not valid now: clients refuse it.
func (r *Reloader) warnValidity(l *loaded) {
	leaf, now := l.cert.Leaf, r.cfg.Clock.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		r.cfg.Logger.Warn("the TLS certificate is not valid now: clients will refuse it; replace the files and send SIGHUP",
			"file", r.cfg.CertFile, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// load reads every file.
func (r *Reloader) load() (*loaded, error) {
	cert, err := LoadKeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	l := &loaded{cert: &cert, server: &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Time:         r.cfg.Clock.Now,
	}}
	if r.cfg.ClientCAFile != "" {
		pool, err := LoadCAPool(r.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		// Verified if given, required by RequireClientCert: a client
		// without one gets an answer that says so, and probes get theirs.
		l.server.ClientCAs, l.server.ClientAuth = pool, tls.VerifyClientCertIfGiven
		l.peerRoots = pool
	}
	if r.cfg.PeerCAFile != "" && r.cfg.PeerCAFile != r.cfg.ClientCAFile {
		pool, err := LoadCAPool(r.cfg.PeerCAFile)
		if err != nil {
			return nil, fmt.Errorf("peer CA: %w", err)
		}
		l.peerRoots = pool
	}
	return l, nil
}

// stamps looks at the files.
func (r *Reloader) stamps() stamps {
	var s stamps
	for i, f := range [...]string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.ClientCAFile, r.cfg.PeerCAFile} {
		if f != "" {
			s[i], _ = os.Stat(f)
		}
	}
	return s
}

// Serial is a certificate's serial number in hex, as openssl shows it.
func Serial(c *x509.Certificate) string {
	return fmt.Sprintf("%X", c.SerialNumber.Bytes())
}
