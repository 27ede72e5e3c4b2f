package nodeauth_test

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/nodeauth"
)

const fwd = "Tenure-Forwarded"

func keys(t *testing.T, secret byte, clk clock.Clock) *nodeauth.Keys {
	t.Helper()
	k, err := nodeauth.New(bytes.Repeat([]byte{secret}, nodeauth.SecretBytes), clk)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSignVerify: a signed request verifies, naming its node and
// principal; any change to what was signed, another cluster's secret, a
// missing header or a time beyond MaxSkew is refused.
func TestSignVerify(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	k := keys(t, 1, clk)
	const proc = "/tenure.v1.TaskService/KillTask"
	signed := func() http.Header {
		h := http.Header{}
		k.Sign(h, fwd, "n1", proc, "ops")
		return h
	}
	node, who, err := k.Verify(signed(), fwd, proc)
	if err != nil || node != "n1" || who != "ops" {
		t.Fatalf("Verify = %q, %q, %v", node, who, err)
	}
	for _, c := range []struct {
		name  string
		h     func() http.Header
		proc  string
		keys  *nodeauth.Keys
		after time.Duration
	}{
		{"another principal", func() http.Header { h := signed(); h.Set(nodeauth.PrincipalHeader, "admin"); return h }, proc, k, 0},
		{"another node", func() http.Header { h := signed(); h.Set(fwd, "n2"); return h }, proc, k, 0},
		{"another procedure", signed, "/tenure.v1.TaskService/GetTask", k, 0},
		{"another cluster", signed, proc, keys(t, 2, clk), 0},
		{"no signature", func() http.Header { h := signed(); h.Del(nodeauth.SignatureHeader); return h }, proc, k, 0},
		{"a client's header alone", func() http.Header { return http.Header{fwd: {"n1"}} }, proc, k, 0},
		{"garbage signature", func() http.Header { h := signed(); h.Set(nodeauth.SignatureHeader, "!!"); return h }, proc, k, 0},
		{"too old", signed, proc, k, nodeauth.MaxSkew + time.Second},
	} {
		h := c.h()
		clk.Advance(c.after)
		_, _, err := c.keys.Verify(h, fwd, c.proc)
		clk.Advance(-c.after)
		if !errors.Is(err, nodeauth.ErrRefused) {
			t.Errorf("%s: %v, want ErrRefused", c.name, err)
		}
	}
	if _, err := nodeauth.New([]byte("short"), clk); err == nil {
		t.Fatal("a short secret was accepted")
	}
}

// TestLoadSecretOnce: nodes that load the secret get the same one, made
// by the first.
func TestLoadSecretOnce(t *testing.T) {
	_, db := clustertest.DB(t)
	a, err := nodeauth.LoadSecret(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := nodeauth.LoadSecret(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != nodeauth.SecretBytes || !bytes.Equal(a, b) {
		t.Fatalf("secrets %x and %x", a, b)
	}
}
