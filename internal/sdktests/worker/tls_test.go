package worker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/certgen/certtest"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// TestRunStopsOnUntrustedServer: a server whose certificate the client
// does not trust ends Run with ErrTLSRefused instead of retrying forever.
func TestRunStopsOnUntrustedServer(t *testing.T) {
	t.Parallel()
	f, other := certtest.New(t, "server ca"), certtest.CA(t, "other ca")
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: f.ServerCert, KeyFile: f.ServerKey})
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
