package worker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/certgen"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// TestRunStopsOnUntrustedServer: a server whose certificate the client
// does not trust ends Run with ErrTLSRefused instead of retrying forever.
func TestRunStopsOnUntrustedServer(t *testing.T) {
	t.Parallel()
	now, dir := time.Now(), t.TempDir()
	ca, err := certgen.NewCA("server ca", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certgen.NewCA("other ca", now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("server", now, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := p.Write(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(apitest.StartTLS(t, r), client.Options{TLSConfig: &tls.Config{RootCAs: other.Pool()}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWorker(c, "q", func(context.Context, *worker.Task[[]byte]) ([]byte, error) { return nil, nil }, opts{Options: worker.Options{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	// The deadline only ends a worker that retries (a failure).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, client.ErrTLSRefused) {
		t.Fatalf("Run: %v; want it stopped with ErrTLSRefused", err)
	}
}
