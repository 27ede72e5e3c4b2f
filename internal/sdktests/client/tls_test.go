package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/certgen/certtest"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/sdk/client"
)

// startTLS serves the API with f's server certificate, requiring client
// certificates of f's CA, as `tenure server --tls-client-ca` does.
func startTLS(t *testing.T, f certtest.Files) string {
	t.Helper()
	r, err := tlsfiles.New(tlsfiles.Config{CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return apitest.StartTLS(t, r)
}

// protoLog records the protocol ALPN chose for each connection.
type protoLog struct {
	mu  sync.Mutex
	got []string
}

func (p *protoLog) verify(cs tls.ConnectionState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, cs.NegotiatedProtocol)
	return nil
}

func (p *protoLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

func mustTLSConfig(t *testing.T, ca, cert, key string) *tls.Config {
	t.Helper()
	cfg, err := client.LoadTLSConfig(ca, cert, key)
	if err != nil {
		t.Fatalf("LoadTLSConfig: %v", err)
	}
	return cfg
}

// TestTLS calls a server that requires client certificates over every
// protocol: HTTP/2 over TLS each time.
func TestTLS(t *testing.T) {
	f := certtest.New(t, "ca")
	var protos protoLog
	url := startTLS(t, f)
	for _, proto := range protocols {
		cfg := mustTLSConfig(t, f.CAFile, f.ClientCert, f.ClientKey)
		cfg.VerifyConnection = protos.verify
		c := newClient(t, url, client.Options{Protocol: proto, TLSConfig: cfg})
		res, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "tls", Payload: []byte(proto)})
		if err != nil {
			t.Fatalf("%s: Submit: %v", proto, err)
		}
		task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: res.TaskID})
		if err != nil || string(task.Payload) != proto {
			t.Fatalf("%s: GetTask = %+v, %v", proto, task, err)
		}
	}
	got := protos.all()
	if len(got) != len(protocols) {
		t.Fatalf("%d connections for %d clients: %q", len(got), len(protocols), got)
	}
	for _, p := range got {
		if p != "h2" {
			t.Errorf("negotiated %q, want h2 for every client: %q", p, got)
		}
	}
}

// failsAtOnce runs call on a client that retries an unavailable answer
// once, and returns its error, failing the test if the client retried it:
// a retried call's error says how often it was tried.
func failsAtOnce(t *testing.T, call func(context.Context) error) error {
	t.Helper()
	err := call(t.Context())
	if err == nil {
		t.Fatal("the call succeeded")
	}
	if strings.Contains(err.Error(), "tried") || strings.Contains(err.Error(), "stopped retrying") {
		t.Fatalf("the client retried a TLS failure: %v", err)
	}
	return err
}

// TestTLSRefusedIsNotRetried: a server the client does not trust, or that
// refuses the client for want of a certificate, fails the call at once.
func TestTLSRefusedIsNotRetried(t *testing.T) {
	f, other := certtest.New(t, "ca"), certtest.New(t, "other")
	url := startTLS(t, f)
	for _, tc := range []struct {
		name, ca, cert, key string
		want                string
	}{
		{"server not trusted", other.CAFile, f.ClientCert, f.ClientKey, "certificate signed by unknown authority"},
		// Refused in an answer, not in the handshake: unauthenticated.
		{"no client certificate", f.CAFile, "", "", "unauthenticated: this server requires a client certificate"},
		// Go's TLS client sends no certificate of a CA the server does
		// not name: the same.
		{"client certificate of another CA", f.CAFile, other.ClientCert, other.ClientKey, "unauthenticated: this server requires a client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, proto := range protocols {
				c := newClient(t, url, client.Options{Protocol: proto, MaxRetries: 1, RetryBackoff: time.Millisecond, TLSConfig: mustTLSConfig(t, tc.ca, tc.cert, tc.key)})
				err := failsAtOnce(t, func(ctx context.Context) error {
					_, err := c.Submit(ctx, client.SubmitRequest{Queue: "tls"})
					return err
				})
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %q does not say %q", proto, err, tc.want)
				}
				// Refused in the handshake: ErrTLSRefused; refused in an
				// answer: unauthenticated. Never "try again later".
				handshake := tc.name == "server not trusted"
				if errors.Is(err, client.ErrTLSRefused) != handshake || errors.Is(err, client.ErrUnavailable) {
					t.Errorf("%s: errors.Is(ErrTLSRefused) = %v, errors.Is(ErrUnavailable) = %v; want %v, false",
						proto, errors.Is(err, client.ErrTLSRefused), errors.Is(err, client.ErrUnavailable), handshake)
				}
			}
		})
	}
}

func TestTLSOptionErrors(t *testing.T) {
	f := certtest.New(t, "ca")
	cfg := mustTLSConfig(t, f.CAFile, "", "")
	if _, err := client.New("http://127.0.0.1:1", client.Options{TLSConfig: cfg}); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Errorf("TLSConfig with an http:// URL: err = %v, want it refused, naming https://", err)
	}
	if _, err := client.New("https://127.0.0.1:1", client.Options{TLSConfig: cfg, HTTPClient: http.DefaultClient}); err == nil || !strings.Contains(err.Error(), "TLSClientConfig") {
		t.Errorf("TLSConfig with an HTTPClient: err = %v, want it refused, saying where TLS goes", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name, ca, cert, key string
		want                []string
	}{
		{"missing CA file", missing, "", "", []string{missing, "no such file"}},
		{"CA file that is a key", f.ClientKey, "", "", []string{f.ClientKey, "no PEM certificate"}},
		{"certificate without key", "", f.ClientCert, "", []string{"both its certificate file and its key file"}},
		{"key without certificate", "", "", f.ClientKey, []string{"both its certificate file and its key file"}},
		{"missing certificate", "", missing, f.ClientKey, []string{missing}},
		{"key of another certificate", "", f.ClientCert, certtest.New(t, "other").ClientKey, []string{"does not match"}},
	} {
		_, err := client.LoadTLSConfig(tc.ca, tc.cert, tc.key)
		if err == nil {
			t.Errorf("%s: LoadTLSConfig succeeded", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
	}
	var unused *client.Error
	if _, err := client.LoadTLSConfig(missing, "", ""); errors.As(err, &unused) {
		t.Errorf("a file error is a *client.Error (a refused call): %v", err)
	}
}
