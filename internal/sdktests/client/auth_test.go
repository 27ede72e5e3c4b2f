package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestToken: Options.Token is sent with every call, in every protocol; a
// missing or refused token is ErrUnauthenticated, a call the token may not
// make ErrPermissionDenied; a token that cannot be a header is refused.
func TestToken(t *testing.T) {
	t.Parallel()
	tok, st := authtest.Store(t)
	n := apitest.OpenNode(t)
	url := apitest.Serve(t, server.New(n.Router(), server.Options{Auth: st}))
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			sub := newClient(t, url, client.Options{Protocol: proto, Token: tok.Scoped[auth.Submitter]})
			res, err := sub.Submit(t.Context(), client.SubmitRequest{Namespace: authtest.InNamespace, Queue: authtest.InQueue})
			if err != nil {
				t.Fatalf("Submit with a submitter token: %v", err)
			}
			if _, err := sub.GetTask(t.Context(), client.GetTaskRequest{TaskID: res.TaskID}); err != nil {
				t.Errorf("GetTask of its task: %v", err)
			}
			_, err = sub.KillTask(t.Context(), client.KillTaskRequest{TaskID: res.TaskID, Reason: ""})
			if !errors.Is(err, client.ErrPermissionDenied) || errors.Is(err, client.ErrUnauthenticated) || !strings.Contains(err.Error(), "needs role admin") {
				t.Errorf("KillTask with a submitter token: %v, want ErrPermissionDenied", err)
			}
			none := newClient(t, url, client.Options{Protocol: proto})
			if _, err := none.GetTask(t.Context(), client.GetTaskRequest{TaskID: res.TaskID}); !errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrPermissionDenied) {
				t.Errorf("GetTask without a token: %v, want ErrUnauthenticated", err)
			}
			wrong, _ := auth.NewToken()
			if _, err := newClient(t, url, client.Options{Protocol: proto, Token: wrong}).GetTask(t.Context(), client.GetTaskRequest{TaskID: res.TaskID}); !errors.Is(err, client.ErrUnauthenticated) {
				t.Errorf("GetTask with an unknown token: %v, want ErrUnauthenticated", err)
			}
		})
	}
	for _, bad := range []string{"tnr_a b", "tnr_\n", "tnr_é"} {
		if _, err := client.New(url, client.Options{Token: bad}); err == nil || !strings.Contains(err.Error(), "Options.Token") || strings.Contains(err.Error(), bad) {
			t.Errorf("client.New with Token %q: %v, want an error that does not repeat it", bad, err)
		}
	}
}
