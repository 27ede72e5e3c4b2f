package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/principal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// oneToken authenticates the header "Bearer good" as p, and nothing else.
type oneToken struct{ p *auth.Principal }

func (o oneToken) Authenticate(h http.Header) (*auth.Principal, error) {
	if h.Get("Authorization") != "Bearer good" {
		return nil, errors.New("unknown token")
	}
	return o.p, nil
}

func (o oneToken) Named(name string) (*auth.Principal, error) {
	if name != o.p.Name {
		return nil, errors.New("unknown token name")
	}
	return o.p, nil
}

// countAuth is a Metrics that counts refusals only.
type countAuth struct {
	Metrics
	n map[connect.Code]int
}

func (c *countAuth) AuthFailed(code connect.Code) { c.n[code]++ }

// TestAuthorize: an allowed call's context names its token (package
// principal, for the records it writes) and says whether its tasks must be
// checked; a refusal is an error of the right code, logged with the
// token's name, counted, and never holds the token.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	mx := &countAuth{n: map[connect.Code]int{}}
	p := &auth.Principal{Name: "mailer", Role: auth.Worker, Namespaces: []string{"default"}, Queues: []string{"emails"}}
	s := New(nil, Options{Auth: oneToken{p}, Metrics: mx, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	good := http.Header{"Authorization": {"Bearer good"}}

	ctx, err := s.authorize(context.Background(), tenurev1connect.WorkerServiceLeaseProcedure, good, "peer:1", &tenurev1.LeaseRequest{Queue: "emails"})
	if err != nil || principal.From(ctx) != "mailer" {
		t.Fatalf("an allowed Lease: %v, principal %q", err, principal.From(ctx))
	}
	if cl := ctx.Value(callerKey{}).(*caller); cl.checkTask {
		t.Error("a Lease asks for its tasks to be checked")
	}
	ctx, err = s.authorize(context.Background(), tenurev1connect.WorkerServiceCommitProcedure, good, "peer:1", &tenurev1.CommitRequest{})
	if err != nil || !ctx.Value(callerKey{}).(*caller).checkTask {
		t.Fatalf("a Commit of a scoped worker: %v; its task must be checked", err)
	}

	_, err = s.authorize(context.Background(), tenurev1connect.WorkerServiceLeaseProcedure, http.Header{"Authorization": {"Bearer bad"}}, "peer:1", &tenurev1.LeaseRequest{Queue: "emails"})
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a bad token: %v", err)
	}
	_, err = s.authorize(context.Background(), tenurev1connect.WorkerServiceLeaseProcedure, good, "peer:1", &tenurev1.LeaseRequest{Queue: "sms"})
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `queue "sms"`) {
		t.Errorf("a Lease of another queue: %v", err)
	}
	if mx.n[connect.CodeUnauthenticated] != 1 || mx.n[connect.CodePermissionDenied] != 1 {
		t.Errorf("refusals counted: %v", mx.n)
	}
	out := logs.String()
	if strings.Count(out, `msg="request refused"`) != 2 || !strings.Contains(out, "token=mailer role=worker") || !strings.Contains(out, "peer=peer:1") || strings.Contains(out, "Bearer bad") {
		t.Errorf("refusals logged:\n%s", out)
	}
}
