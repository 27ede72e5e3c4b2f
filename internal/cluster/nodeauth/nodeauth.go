package nodeauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// Headers of a forwarded request, besides route.ForwardedHeader (the
// forwarding node's id), which the signature also covers.
const (
	// PrincipalHeader names the caller the node forwards for ("" when
	// authentication is off).
	PrincipalHeader = "Tenure-Forwarded-Principal"
	// AtHeader is when the node signed, in Unix milliseconds.
	AtHeader = "Tenure-Forwarded-At"
	// SignatureHeader is the base64 HMAC-SHA-256 of the signed fields.
	SignatureHeader = "Tenure-Forwarded-Signature"
)

// MaxSkew is how far the signing time may be from the receiving node's
// clock.
const MaxSkew = time.Minute

// SecretBytes is the size of the cluster secret.
const SecretBytes = 32

// ErrRefused is wrapped by every refusal of a forwarded request.
var ErrRefused = errors.New("nodeauth: not a request forwarded by a node of this cluster")

// Keys signs and checks forwarded requests with the cluster secret.
type Keys struct {
	secret []byte
	clock  clock.Clock
}

// New returns Keys for secret (SecretBytes or more) on clk (clock.Real if
// nil).
func New(secret []byte, clk clock.Clock) (*Keys, error) {
	if len(secret) < SecretBytes {
		return nil, fmt.Errorf("nodeauth: the cluster secret has %d bytes, want at least %d", len(secret), SecretBytes)
	}
	if clk == nil {
		clk = clock.Real
	}
	return &Keys{secret: append([]byte(nil), secret...), clock: clk}, nil
}

// mac is the signature of the fields.
func (k *Keys) mac(node, procedure, principal, at string) []byte {
	m := hmac.New(sha256.New, k.secret)
	for _, f := range []string{"tenure-forwarded-v1", node, procedure, principal, at} {
		m.Write([]byte(strconv.Itoa(len(f))))
		m.Write([]byte{':'})
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}

// Sign sets the headers of a request that node forwards for principal to
// procedure (such as "/tenure.v1.TaskService/Submit"). forwardedHeader is
// the name of the header that carries node.
func (k *Keys) Sign(h http.Header, forwardedHeader, node, procedure, principal string) {
	at := strconv.FormatInt(k.clock.Now().UnixMilli(), 10)
	h.Set(forwardedHeader, node)
	h.Set(PrincipalHeader, principal)
	h.Set(AtHeader, at)
	h.Set(SignatureHeader, base64.StdEncoding.EncodeToString(k.mac(node, procedure, principal, at)))
}

// Verify checks the headers of a request forwarded to procedure and
// returns the node and the principal it names, or an error that wraps
// ErrRefused and says what is wrong (never a secret).
func (k *Keys) Verify(h http.Header, forwardedHeader, procedure string) (node, principal string, err error) {
	refuse := func(format string, args ...any) (string, string, error) {
		return "", "", fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
	}
	node, principal, at, sig := h.Get(forwardedHeader), h.Get(PrincipalHeader), h.Get(AtHeader), h.Get(SignatureHeader)
	if node == "" || at == "" || sig == "" {
		return refuse("%s, %s and %s are required", forwardedHeader, AtHeader, SignatureHeader)
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return refuse("%s is not a Unix time in milliseconds", AtHeader)
	}
	if d := k.clock.Now().Sub(time.UnixMilli(ms)); d > MaxSkew || d < -MaxSkew {
		return refuse("signed %v from this node's clock, more than %v (check the nodes' clocks)", d.Round(time.Second), MaxSkew)
	}
	got, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.mac(node, procedure, principal, at)) {
		return refuse("the signature does not match (a node of another cluster, or not a node)")
	}
	return node, principal, nil
}

// LoadSecret returns the cluster secret from db (the cluster_secret table
// of schema migration 0003), creating it first if no node has: one of the
// nodes that start at once wins, and all read its secret.
func LoadSecret(ctx context.Context, db *sql.DB) ([]byte, error) {
	fresh := make([]byte, SecretBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("nodeauth: making a cluster secret: %w", err)
	}
	if _, err := db.ExecContext(ctx, "INSERT IGNORE INTO cluster_secret (id, secret) VALUES (1, ?)", fresh); err != nil {
		return nil, fmt.Errorf("nodeauth: storing the cluster secret: %w (run `tenure migrate`)", err)
	}
	var secret []byte
	if err := db.QueryRowContext(ctx, "SELECT secret FROM cluster_secret WHERE id = 1").Scan(&secret); err != nil {
		return nil, fmt.Errorf("nodeauth: reading the cluster secret: %w", err)
	}
	if len(secret) < SecretBytes {
		return nil, fmt.Errorf("nodeauth: the cluster secret in the database has %d bytes, want %d (cluster_secret was changed by hand?)", len(secret), SecretBytes)
	}
	return secret, nil
}
